"""The idle-job policy: warn, wait, cancel through the Slurm adapter (off by default).

``GUARDRAILS_POLICY`` is ``off`` (the default), ``dry-run`` (decisions recorded and shown,
nothing sent, nothing cancelled) or ``enforce``. The decision is pure
(``apps/analysis/guardrails_policy.py``); this module reads its inputs (the live view, the
job's last policy steps, the exemptions), records every step as a ``PolicyAction`` and in
the audit log, tells the owner, and cancels with the cluster's Slurm backend
(``cancel_job``: scancel for the cli backend, ``DELETE /slurm/.../job/{id}`` for rest,
``pyslurm.Job(id).cancel()`` for pyslurm). A backend that cannot cancel (files) is a
recorded ``cancel_failed``, never a silent success.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime

from django.conf import settings
from django.db.models import Q

from apps.analysis.guardrails import LiveJob, all_idle_since
from apps.analysis.guardrails_policy import (
    CANCEL,
    CLEAR,
    EXEMPT,
    WARN,
    Decision,
    PolicyConfig,
    PolicyState,
    decide,
)
from apps.audit.models import AuditEvent
from apps.audit.services import record
from apps.clusters import services as cluster_services
from apps.clusters.adapters.slurm import Action
from apps.core.errors import AdapterError
from apps.guardrails.alerts import local_time, scancel_command
from apps.guardrails.live import is_interactive
from apps.guardrails.models import Exemption, Message, PolicyAction
from apps.guardrails.notify import job_url, send_notice
from apps.jobs.models import Job

log = logging.getLogger(__name__)
OFF, DRY_RUN, ENFORCE = "off", "dry-run", "enforce"
ACTOR = "beacon-guardrails"  # the audit log's name for the policy


def mode() -> str:
    return str(settings.GUARDRAILS_POLICY)


def policy_config() -> PolicyConfig:
    return PolicyConfig(idle_hours=settings.GUARDRAILS_POLICY_IDLE_MINUTES / 60,
                        grace_minutes=settings.GUARDRAILS_POLICY_GRACE_MINUTES)


def config_for(job: Job, base: PolicyConfig | None = None) -> PolicyConfig:
    """The policy's thresholds for ``job``: never act before its owner could be alerted, so
    on an interactive partition the idle time is at least the interactive alerts' one."""
    base = base or policy_config()
    if not is_interactive(job):
        return base
    return replace(base, idle_hours=max(base.idle_hours,
                                        settings.GUARDRAILS_INTERACTIVE_IDLE_MINUTES / 60))


def exemption_for(job: Job) -> str:
    """Why ``job`` is exempt ("" when it is not): its user, account, partition or itself."""
    values: dict[str, str] = {Exemption.Kind.USER: job.user_name,
                              Exemption.Kind.ACCOUNT: job.account,
                              Exemption.Kind.PARTITION: job.partition}
    for row in Exemption.objects.filter(Q(cluster_id=job.cluster_id) | Q(cluster__isnull=True)):
        if row.kind == Exemption.Kind.JOB and row.value in (str(job.job_id), job.display_id):
            return f"job opt-out: {row.reason}"
        if row.kind != Exemption.Kind.JOB and values.get(row.kind) == row.value:
            return f"{row.get_kind_display().lower()} {row.value}: {row.reason}"
    return ""


def apply(job: Job, view: LiveJob, now: datetime, idle_below: float) -> PolicyAction | None:
    """One policy step for a running job; the recorded action, or None when nothing changed."""
    if mode() == OFF:
        return None
    steps = list(PolicyAction.objects.filter(job=job).order_by("at", "pk"))
    if any(s.action == PolicyAction.Action.CANCELLED for s in steps):
        return None  # cancelled (or, in a dry run, would have been): nothing more to do
    warned = _standing_warning(steps)
    state = PolicyState(now.timestamp(), all_idle_since(view, idle_below),
                        warned.at.timestamp() if warned else None, exemption_for(job))
    decision = decide(state, config_for(job))
    if decision.action == EXEMPT:
        if steps and steps[-1].action == PolicyAction.Action.EXEMPT:
            return None
        return _record(job, PolicyAction.Action.EXEMPT, decision, now)
    if decision.action == WARN:
        return _warn(job, decision, now)
    if decision.action == CANCEL:
        return _cancel(job, decision, now)
    if decision.action == CLEAR:
        return _record(job, PolicyAction.Action.CLEARED, decision, now)
    return None


def _standing_warning(steps: list[PolicyAction]) -> PolicyAction | None:
    """The last warning not withdrawn since (a failed cancel keeps it standing)."""
    for step in reversed(steps):
        if step.action == PolicyAction.Action.CLEARED:
            return None
        if step.action == PolicyAction.Action.WARNED:
            return step
    return None


def _record(job: Job, action: str, decision: Decision, now: datetime,
            **detail: object) -> PolicyAction:
    cancel_at = datetime.fromtimestamp(decision.cancel_at, tz=UTC) if decision.cancel_at \
        else None
    dry = mode() != ENFORCE
    step = PolicyAction.objects.create(job=job, action=action, dry_run=dry, at=now,
                                       reason=decision.reason[:300], cancel_at=cancel_at,
                                       detail=dict(detail))
    record(AuditEvent.Action.GUARDRAIL, username=ACTOR,
           target=f"job {job.cluster.name}:{job.display_id}",
           details={"action": action, "dry_run": dry, "reason": decision.reason,
                    "user": job.user_name, **({"cancel_at": cancel_at.isoformat()}
                                              if cancel_at else {}), **detail})
    log.info("guardrails policy: job %s %s%s: %s", job, action, " (dry run)" if dry else "",
             decision.reason)
    return step


def _warn(job: Job, decision: Decision, now: datetime) -> PolicyAction:
    step = _record(job, PolicyAction.Action.WARNED, decision, now)
    if not step.dry_run and step.cancel_at is not None:
        when = local_time(job, step.cancel_at)
        send_notice(Message.Kind.POLICY, job.user,
                    f"[Beacon] Job {job.display_id} will be cancelled at {when}: its GPUs are idle",
                    "\n".join([
                        f"Every GPU of your job {job.display_id} \"{job.name}\" on "
                        f"{job.cluster.name} has been idle: {decision.reason}.",
                        f"The site's idle-job policy cancels it at {when} unless a GPU gets "
                        "busy again before then. Nothing is lost if the job is still needed: "
                        "start work on its GPUs and the warning is withdrawn.",
                        f"If you are done, end it now: {scancel_command(job)}",
                        "If the job must stay (a service, a demo), ask the platform team for "
                        "an exemption.", f"Job page: {job_url(job)}"]), now, [job])
    return step


def _cancel(job: Job, decision: Decision, now: datetime) -> PolicyAction:
    if mode() != ENFORCE:
        return _record(job, PolicyAction.Action.CANCELLED, decision, now)
    try:
        client = cluster_services.client_for(job.cluster)
        why = client.cannot(Action.CANCEL)
        if why:
            raise AdapterError(why, service="slurm")
        client.cancel_job(job.job_id)
    except AdapterError as exc:
        return _record(job, PolicyAction.Action.CANCEL_FAILED, decision, now, error=str(exc))
    step = _record(job, PolicyAction.Action.CANCELLED, decision, now)
    send_notice(Message.Kind.POLICY, job.user,
                f"[Beacon] Job {job.display_id} was cancelled: its GPUs stayed idle",
                "\n".join([f"Your job {job.display_id} \"{job.name}\" on {job.cluster.name} "
                           f"was cancelled by the site's idle-job policy: {decision.reason}.",
                           f"Job page: {job_url(job)}"]), now, [job])
    return step
