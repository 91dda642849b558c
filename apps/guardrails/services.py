"""The guardrails' periodic check: every running GPU job, its live view, alerts, the policy.

``run_checks`` is what beat runs every ``GUARDRAILS_CHECK_EVERY`` seconds (twin:
``manage.py check_guardrails``):

1. for each running GPU job on a real cluster with Prometheus, refresh its live snapshot
   through the job page's own archive path (``archive_job``: same fetch, same summaries,
   same straggler verdict and diagnosis), then build its live view from those rows;
2. raise the alerts the view calls for (once per job and kind);
3. take the idle-job policy's step (when the policy is on);
4. send what is pending (grouped per user, rate-limited).

A job whose telemetry cannot be read is counted in the run's ``errors`` and left for the
next run; the others go on.

A simulated cluster's "running" jobs are a saved moment, not a live cluster, so
``run_checks`` leaves them out. When its stores can be read live (``make demo-full``),
``check_simulated`` runs the same steps 1 and 2 over them at the cluster's simulated "now"
(``Cluster.simulated_now``), its own recorded run: each job read from the store(s) holding
its nodes, alerts kept marked simulated and sent to nobody, no policy step (its Slurm is a
folder of saved output: nothing to warn or cancel). Beat reaches it as security detection
reaches every cluster: ``check_running_jobs`` queues one task per such cluster.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from apps.analysis.guardrails import AlertConfig
from apps.analysis.stores import STORE_FAILED
from apps.clusters.models import Cluster
from apps.core.errors import AdapterError
from apps.core.runs import mark_partial, tracked_run
from apps.guardrails import policy
from apps.guardrails.alerts import raise_alerts
from apps.guardrails.live import StallRules, alert_config, stored_view
from apps.guardrails.models import Alert
from apps.guardrails.notify import deliver_pending
from apps.jobs.archive import Source, archive_job
from apps.jobs.models import Job

log = logging.getLogger(__name__)


def watched_clusters() -> list[Cluster]:
    """Real clusters whose telemetry can be read live."""
    return [c for c in Cluster.objects.filter(is_simulated=False) if c.has_telemetry]


def simulated_clusters() -> list[Cluster]:
    """Simulated clusters whose stores can be read live at a known simulated "now" (demo-full;
    plain ``make demo`` has no store, so nothing is checked there)."""
    return [c for c in Cluster.objects.filter(is_simulated=True, simulated_now__isnull=False)
            if c.has_telemetry]


def running_gpu_jobs(clusters: list[Cluster]) -> QuerySet[Job]:
    return (Job.objects.filter(cluster__in=clusters, state=Job.State.RUNNING,
                               gpu_equivalent__gt=0, start_time__isnull=False)
            .select_related("cluster", "user", "team").order_by("pk"))


def check_job(job: Job, now: datetime, stall_rules: StallRules, config: AlertConfig,
              source: Source | None = None, simulated: bool = False) -> dict[str, Any]:
    """Steps 1 to 3 for one job; what happened, for the run's stats (``simulated``: alerts
    kept marked simulated, no policy step).

    A job with nodes on a telemetry store that did not answer is not checked this time
    (issue 29): its missing GPUs would read as idle, and an alert or a policy step taken
    on them would be a verdict on what was not read."""
    metrics = archive_job(job, source, now=now)
    unread = [w for w in metrics.warnings or [] if str(w).startswith(STORE_FAILED)]
    if unread:
        return {"measured": False, "alerts": [], "policy": None, "not_checked": unread}
    view = stored_view(job, stall_rules, now)
    if view is None:
        return {"measured": False, "alerts": [], "policy": None}
    if simulated:
        new = raise_alerts(job, view, now, config, Alert.Status.SIMULATED)
        return {"measured": True, "alerts": [a.kind for a in new], "policy": None}
    new = raise_alerts(job, view, now, config)
    step = policy.apply(job, view, now, config.idle_below)
    return {"measured": True, "alerts": [a.kind for a in new],
            "policy": step.action if step else None}


def run_checks(now: datetime | None = None, source: Source | None = None,
               jobs: QuerySet[Job] | None = None) -> dict[str, Any]:
    """One pass over the running GPU jobs (``jobs`` narrows it; ``source`` replaces
    Prometheus, for tests and telemetry files); then the sends."""
    now = now or timezone.now()
    with tracked_run("guardrails_check") as run:
        jobs = jobs if jobs is not None else running_gpu_jobs(watched_clusters())
        stats, not_checked = _check_all(jobs, now, source, simulated=False)
        stats["sent"] = deliver_pending(now)
        run.stats = stats
        mark_partial(run, not_checked)  # a store down: those jobs were not checked
    return stats


def check_simulated(cluster: Cluster, source: Source | None = None) -> dict[str, Any] | None:
    """Steps 1 and 2 over a simulated cluster's running GPU jobs at its simulated "now",
    recorded as the cluster's own ``guardrails_check`` run (None: it has no simulated
    "now", a cluster loaded before it was kept; ``load_demo`` again sets it).

    Nothing is sent (``sent`` stays empty): its alerts are kept marked simulated, and the
    pending alerts of real clusters wait for their own pass, at the real "now"."""
    if not cluster.is_simulated or cluster.simulated_now is None:
        return None
    now = cluster.simulated_now
    with tracked_run("guardrails_check", cluster=cluster,
                     target=f"simulated now {now:%Y-%m-%d %H:%M} UTC") as run:
        stats, not_checked = _check_all(running_gpu_jobs([cluster]), now, source,
                                        simulated=True)
        stats["sent"] = {}
        run.stats = stats
        mark_partial(run, not_checked)
    return stats


def _check_all(jobs: QuerySet[Job], now: datetime, source: Source | None,
               simulated: bool) -> tuple[dict[str, Any], list[str]]:
    """Steps 1 to 3 over ``jobs``: the run's stats, and the jobs a silent store left
    unchecked."""
    stats: dict[str, Any] = {"jobs": 0, "measured": 0, "alerts": 0, "policy": {},
                             "errors": 0}
    stall_rules, config = StallRules.load(), alert_config()
    not_checked: list[str] = []
    for job in jobs:
        stats["jobs"] += 1
        try:
            done = check_job(job, now, stall_rules, config, source, simulated)
        except AdapterError as exc:
            stats["errors"] += 1
            log.warning("guardrails: job %s: telemetry unreadable: %s", job, exc)
            continue
        if done.get("not_checked"):
            not_checked.append(f"job {job}: {'; '.join(done['not_checked'])}")
        stats["measured"] += int(done["measured"])
        stats["alerts"] += len(done["alerts"])
        if done["policy"]:
            stats["policy"][done["policy"]] = stats["policy"].get(done["policy"], 0) + 1
    stats["not_checked"] = len(not_checked)
    return stats, not_checked
