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
next run; the others go on. Simulated clusters are left out: their "running" jobs are a
saved moment, not a live cluster (``manage.py guardrail_report`` replays them).
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
from apps.guardrails.notify import deliver_pending
from apps.jobs.archive import Source, archive_job
from apps.jobs.models import Job

log = logging.getLogger(__name__)


def watched_clusters() -> list[Cluster]:
    """Real clusters whose telemetry can be read live."""
    return [c for c in Cluster.objects.filter(is_simulated=False) if c.has_telemetry]


def running_gpu_jobs(clusters: list[Cluster]) -> QuerySet[Job]:
    return (Job.objects.filter(cluster__in=clusters, state=Job.State.RUNNING,
                               gpu_equivalent__gt=0, start_time__isnull=False)
            .select_related("cluster", "user", "team").order_by("pk"))


def check_job(job: Job, now: datetime, stall_rules: StallRules, config: AlertConfig,
              source: Source | None = None) -> dict[str, Any]:
    """Steps 1 to 3 for one job; what happened, for the run's stats.

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
        stats: dict[str, Any] = {"jobs": 0, "measured": 0, "alerts": 0, "policy": {},
                                 "errors": 0}
        stall_rules, config = StallRules.load(), alert_config()
        not_checked: list[str] = []
        for job in jobs if jobs is not None else running_gpu_jobs(watched_clusters()):
            stats["jobs"] += 1
            try:
                done = check_job(job, now, stall_rules, config, source)
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
        stats["sent"] = deliver_pending(now)
        stats["not_checked"] = len(not_checked)
        run.stats = stats
        mark_partial(run, not_checked)  # a store down: those jobs were not checked
    return stats
