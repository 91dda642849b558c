"""Reconcile Beacon's allocated GPU-hours with Slurm's own accounting, per account and job.

For a cluster and a month, over the window Slurm has rolled up (from the month's start to the
last complete hour, ``sreport`` never shows the current hour): the usage report per account
(``sreport ... AccountUtilizationByUser -T gres/gpu``), every job truncated to the window
(``sacct -X -T``), and Beacon's job records through the same overlap arithmetic as the
statements. The pure comparison is ``apps.analysis.reconcile``; each run is stored as a
``Reconciliation`` row and a TaskRun.

Whole GPUs only (``gres/gpu``): Slurm accounts shards as another TRES.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

from django.utils import timezone

from apps.analysis import reconcile as rc
from apps.chargeback.models import Reconciliation
from apps.chargeback.services import month_period
from apps.chargeback.usage import gpu_seconds_by_job
from apps.clusters.adapters.slurm import SlurmClient
from apps.clusters.models import Cluster, SlurmAssociation
from apps.clusters.services import client_for
from apps.core.runs import tracked_run
from apps.jobs.models import Job

TRES = "gres/gpu"
ROLLUP_MARGIN = timedelta(minutes=10)  # slurmdbd rolls an hour up a little after it ends


class ReconcileError(Exception):
    """Nothing to reconcile yet (the month has no complete hour)."""


def rolled_up_until(now: datetime) -> datetime:
    """The end of the last hour slurmdbd has surely rolled up."""
    hour = now.replace(minute=0, second=0, microsecond=0)
    return hour - timedelta(hours=1) if now - hour < ROLLUP_MARGIN else hour


def reconcile_window(cluster: Cluster, lo: datetime, hi: datetime, client: SlurmClient,
                     now: datetime, tolerance_min: float = 1.0) -> rc.Reconciliation:
    """Slurm's report and jobs against Beacon's job records over ``[lo, hi)``."""
    rows = client.usage_report(lo, hi, TRES)
    accounts = {r.account: r.minutes for r in rows if not r.user and r.tres == TRES}
    parents = dict(SlurmAssociation.objects.filter(cluster=cluster, user_name="")
                   .exclude(parent="").values_list("account", "parent"))
    slurm_jobs = [rc.JobSeconds(a.job_id, a.account, a.user, float(a.gpus * a.elapsed_s))
                  for a in client.job_allocations(lo, hi)]
    beacon = [rc.JobSeconds(r["job_id"], r["account"], r["user_name"], r["seconds"])
              for r in gpu_seconds_by_job(Job.objects.filter(cluster=cluster), lo, hi, now)]
    return rc.reconcile(beacon, slurm_jobs, rc.direct_minutes(accounts, parents),
                        tolerance_min)


def reconcile_month(cluster: Cluster, month: date, client: SlurmClient | None = None,
                    now: datetime | None = None) -> Reconciliation:
    """Run and store one reconciliation of ``month`` up to its last rolled-up hour."""
    now = now or timezone.now()
    period = month_period(month)
    client = client or client_for(cluster)
    hi = min(period.end, rolled_up_until(now))
    saved_until = client.accounted_until()  # saved output (files backend) ends there
    if saved_until is not None and saved_until < hi:
        hi = saved_until
        if hi <= period.start:
            raise ReconcileError(f"{cluster.name}'s saved Slurm accounting ends at "
                                 f"{saved_until:%Y-%m-%d %H:%M} UTC, before {month:%Y-%m}")
    if hi <= period.start:
        raise ReconcileError(f"{month:%Y-%m} has no complete hour that Slurm rolled up yet")
    with tracked_run("chargeback.reconcile", cluster=cluster, target=f"{month:%Y-%m}") as run:
        result = reconcile_window(cluster, period.start, hi, client, now)
        row = Reconciliation.objects.create(
            cluster=cluster, month=month, window_start=period.start, window_end=hi,
            ok=result.ok, tolerance_min=result.tolerance_min,
            accounts=[_account(result, a) for a in result.accounts],
            jobs=[_job(d) for d in result.jobs])
        run.stats = {"ok": result.ok, "accounts": len(result.accounts),
                     "job_differences": len(result.jobs)}
    return row


def _account(result: rc.Reconciliation, check: rc.AccountCheck) -> dict[str, Any]:
    return {"account": check.account, "beacon_minutes": round(check.beacon_minutes, 3),
            "report_minutes": check.report_minutes, "jobs_minutes": round(check.jobs_minutes, 3),
            "delta_minutes": round(check.delta_minutes, 3), "ok": result.account_ok(check)}


def _job(diff: rc.JobDifference) -> dict[str, Any]:
    def minutes(value: float | None) -> float | None:
        return None if value is None else round(value, 3)

    return {"job_id": diff.job_id, "kind": diff.kind.value, "account": diff.account,
            "user": diff.user, "beacon_minutes": minutes(diff.beacon_minutes),
            "slurm_minutes": minutes(diff.slurm_minutes)}
