"""The demo's guardrails stage: what the beat would have said during the simulated month.

The beat leaves simulated clusters out (their "running" jobs are a saved moment), so after
``load_demo`` nobody would have an alert. This stage replays the guardrails' checks
(``apps/guardrails/replay.py``, the code ``manage.py guardrail_report`` scores) and keeps:

- the alerts, marked simulated and never sent (``store_replayed``): "My alerts" and the job
  page show them;
- the idle-job policy's steps as a dry run, marked simulated, on the job page and in the
  audit log (what an admin would see with ``GUARDRAILS_POLICY=dry-run``);
- last week's right-sizing digests, stored as simulated messages (``sizing.send_digests``
  on the simulated cluster), shown on "My alerts".

Replaying every job of the month takes minutes (each check re-summarises the job's
telemetry from its start), so the stage replays only the jobs that matter and stops early:

1. jobs that ended in the last ``DAYS`` days of the month or are still running (the week a
   digest covers);
2. of those, the jobs whose stored archive shows a sign an alert could follow: a GPU with a
   run of idle samples as long as the alert or policy needs, a run the site's idleness
   reading flags (idle, or mostly idle with its memory held), a straggler verdict, an
   input-stall finding;
3. each job's replay ends once what it was picked for has been raised (and the policy, for
   an idle job, has cancelled it).

What is stored for a job is what the full replay stores for it (same checks, same code);
a kind the archive shows no sign of is not looked for (docs/diagnosis.md measures what
that leaves out on the demo month). Loading again stores nothing new, and replays only the
jobs whose picked kinds are not all stored yet.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet

from apps.analysis import compact
from apps.analysis.guardrails import AlertConfig
from apps.analysis.idleness import IDLE
from apps.audit.models import AuditEvent
from apps.audit.services import record
from apps.clusters.models import Cluster
from apps.guardrails import replay, sizing
from apps.guardrails.alerts import store_replayed
from apps.guardrails.live import alert_config, is_interactive
from apps.guardrails.models import Alert, PolicyAction
from apps.guardrails.policy import ACTOR, config_for, policy_config
from apps.jobs.idleness import job_idleness
from apps.jobs.models import Job, JobFinding, JobMetrics, JobMetricSummary

DAYS = 7  # the demo replays the jobs of the month's last week (and the running ones)
STEPS = {"warn": PolicyAction.Action.WARNED, "clear": PolicyAction.Action.CLEARED,
         "cancel": PolicyAction.Action.CANCELLED}


def replay_guardrails(cluster: Cluster, telemetry: Path, now: datetime, step: float,
                      days: float = DAYS) -> dict[str, Any]:
    """Replay the picked jobs (a check every ``step`` seconds: the telemetry step, as
    ``guardrail_report`` looks by default), store their alerts and policy steps, then write
    last week's digests."""
    config = alert_config()
    picked = _not_stored(pick(cluster, now, config, days))
    stats: dict[str, Any] = {"jobs": len(picked), "checks": 0, "alerts": 0, "policy_steps": 0}
    if telemetry.is_dir() and picked:
        jobs = Job.objects.filter(pk__in=picked).select_related("cluster")
        rows = {j.job_id: j for j in jobs}
        wanted = {j.job_id: picked[j.pk] for j in rows.values()}
        seen = replay.replay(cluster, telemetry, now, step, config, policy_config(), jobs=jobs,
                             enough=lambda job, r: _enough(wanted[job.job_id], r))
        with transaction.atomic():
            for r in seen:
                stats["checks"] += r.checks
                stats["alerts"] += store_replayed(rows[r.job_id], list(r.alerts.values()))
                stats["policy_steps"] += store_policy(rows[r.job_id], r)
    digests = sizing.send_digests(now, simulated=cluster)
    stats.update(user_digests=digests["user_digests"], team_digests=digests["team_digests"],
                 week=digests["week"])
    return stats


# --- Which jobs -------------------------------------------------------------------------------


def pick(cluster: Cluster, now: datetime, config: AlertConfig,
         days: float = DAYS) -> dict[int, set[str]]:
    """The jobs worth replaying (by pk), each with what it was picked for: ``idle`` (the
    idle alerts and the policy), ``straggler``, ``input_stall``."""
    recent = (Job.objects.filter(cluster=cluster, gpu_equivalent__gt=0,
                                 start_time__isnull=False, metrics__status__in=JobMetrics.MEASURED)
              .filter(Q(end_time__isnull=True) | Q(end_time__gte=now - timedelta(days=days))
                      | Q(state__in=Job.ACTIVE_STATES)))
    pks = set(recent.values_list("pk", flat=True))
    picked: dict[int, set[str]] = {}
    stall = JobFinding.objects.filter(job_id__in=pks, key__in=settings.GUARDRAILS_STALL_RULES)
    for pk in stall.values_list("job_id", flat=True):
        picked.setdefault(pk, set()).add("input_stall")
    verdict = JobMetrics.objects.filter(job_id__in=pks,
                                        straggler_status=JobMetrics.StragglerStatus.FOUND)
    for pk in verdict.values_list("job_id", flat=True):
        picked.setdefault(pk, set()).add("straggler")
    for pk in idle_jobs(recent, config):
        picked.setdefault(pk, set()).add("idle")
    for pk, kinds in read_idle(recent, config).items():
        picked.setdefault(pk, set()).update(kinds)
    return picked


def read_idle(jobs: QuerySet[Job], config: AlertConfig) -> dict[int, set[str]]:
    """Jobs the site's idleness reading of their stored archive flags (the job page's and the
    diagnosis' reading): the alert kinds the same reading raises while they run."""
    out: dict[int, set[str]] = {}
    for metrics in JobMetrics.objects.filter(job__in=jobs).select_related("job"):
        reading = job_idleness(metrics.job, metrics, config.rules)
        if reading is None or not reading.flagged:
            continue
        out[metrics.job_id] = {"gpus_idle"} if reading.state == IDLE else set()
        if reading.memory_held:
            out[metrics.job_id].add("memory_held")
    return out


def idle_jobs(jobs: QuerySet[Job], config: AlertConfig) -> set[int]:
    """Jobs with a GPU whose stored series holds a run of idle samples spanning the shorter
    of the idle alert's and the policy's thresholds (at least two samples: an idle run is
    counted between them), as the alert counts a run."""
    out: set[int] = set()
    base = policy_config()
    rows = JobMetricSummary.objects.filter(job__in=jobs).select_related("job").only(
        "series", "job__partition", "job__gpus", "job__cluster_id", "job__id")
    steps = dict(JobMetrics.objects.filter(job__in=jobs).values_list("job_id", "step_s"))
    for row in rows.iterator(chunk_size=500):
        if row.job_id in out:
            continue
        alert = config.interactive_idle_minutes if is_interactive(row.job) else \
            config.idle_minutes
        needed = min(alert * 60, config_for(row.job, base).idle_hours * 3600)
        step = steps.get(row.job_id) or 0.0
        channels = compact.decode(bytes(row.series))
        busy = channels.get("gpu_util") or channels.get("activity") or []
        if step > 0 and longest_idle(busy, config.idle_below) >= max(2.0, needed / step + 1):
            out.add(row.job_id)
    return out


def longest_idle(busy: list[float | None], idle_below: float) -> int:
    """The most samples in a row under ``idle_below`` (unmeasured ones neither count nor
    break a run, as in ``apps.analysis.guardrails.idle_run``)."""
    best = run = 0
    for value in busy:
        if value is None:
            continue
        run = run + 1 if value < idle_below else 0
        best = max(best, run)
    return best


def _enough(kinds: set[str], r: replay.Replayed) -> bool:
    """Everything the job was picked for is raised (for an idle job: the policy ended too)."""
    return _all_there(kinds, set(r.alerts), bool(r.policy and r.policy[-1][1] == "cancel"))


def _all_there(kinds: set[str], raised: set[str], cancelled: bool) -> bool:
    want = {"gpus_idle" if k == "idle" else k for k in kinds}
    return want <= raised and ("idle" not in kinds or cancelled)


def _not_stored(picked: dict[int, set[str]]) -> dict[int, set[str]]:
    """The picked jobs a load before did not finish (loading again replays only those)."""
    raised: dict[int, set[str]] = {}
    for job_id, kind in Alert.objects.filter(job_id__in=picked).values_list("job_id", "kind"):
        raised.setdefault(job_id, set()).add(kind)
    cancelled = set(PolicyAction.objects.filter(
        job_id__in=picked, action=PolicyAction.Action.CANCELLED).values_list("job_id", flat=True))
    return {pk: kinds for pk, kinds in picked.items()
            if not _all_there(kinds, raised.get(pk, set()), pk in cancelled)}


# --- Storing ----------------------------------------------------------------------------------


def store_policy(job: Job, r: replay.Replayed) -> int:
    """The policy's replayed steps on ``job`` as a dry run marked simulated, each in the
    audit log too (as the policy records them); none when the job has its steps already."""
    if not r.decisions or PolicyAction.objects.filter(job=job).exists():
        return 0
    for t, decision in r.decisions:
        at = datetime.fromtimestamp(t, tz=UTC)
        cancel_at = datetime.fromtimestamp(decision.cancel_at, tz=UTC) \
            if decision.cancel_at else None
        action = STEPS[decision.action]
        PolicyAction.objects.create(job=job, action=action, dry_run=True, at=at,
                                    reason=decision.reason[:300], cancel_at=cancel_at,
                                    detail={"simulated": True})
        record(AuditEvent.Action.GUARDRAIL, username=ACTOR, at=at,
               target=f"job {job.cluster.name}:{job.display_id}",
               details={"action": action, "dry_run": True, "simulated": True,
                        "reason": decision.reason, "user": job.user_name,
                        **({"cancel_at": cancel_at.isoformat()} if cancel_at else {})})
    return len(r.decisions)
