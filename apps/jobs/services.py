"""Job services: refreshing a job's stored metrics (archive on demand), and the recorded runs.

The recorded runs (archive, pending archives, files backfill, diagnosis, trace import) are
what the tasks and the command twins call: each is a TaskRun, written here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from enum import StrEnum
from pathlib import Path

from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.clusters.models import Cluster
from apps.core.broker import publish_on_commit
from apps.core.runs import mark_partial, tracked_run
from apps.jobs import archive, traces
from apps.jobs.diagnosis import diagnose_job
from apps.jobs.models import Job, JobMetrics, TraceRun

# A running job's snapshot is refreshed at most this often, however many viewers poll.
REFRESH_AFTER = timedelta(seconds=60)


def needs_refresh(job: Job, metrics: JobMetrics | None) -> bool:
    """Running jobs go stale; finished jobs need one archive; never-started jobs nothing."""
    if job.start_time is None:
        return False
    if metrics is None or metrics.status == JobMetrics.Status.PENDING:
        return True
    if metrics.is_final:
        return False
    return metrics.computed_at is None or timezone.now() - metrics.computed_at > REFRESH_AFTER


class Refresh(StrEnum):
    """What ``request_refresh`` did."""

    QUEUED = "queued"  # this call asked a worker
    ASKED = "asked"  # another view asked within REFRESH_AFTER
    UNAVAILABLE = "unavailable"  # the broker is down: nothing was queued
    NO_SOURCE = "no_source"  # no Prometheus configured: a refresh could only fail


def refresh_if_stale(job: Job, metrics: JobMetrics | None) -> Refresh | None:
    """Ask for a refresh of ``job``'s metrics when they are stale (None: nothing asked).

    A cluster without Prometheus (plain ``make demo``, a site importing archives only)
    queues nothing: the task could only fail, and each page view would add a failed run
    to the Platform page (issue 19). For a running job, or one whose archive is missing,
    the answer is then ``NO_SOURCE``: the page says live refresh needs Prometheus.
    """
    if not job.cluster.has_telemetry:
        running = job.start_time is not None and job.is_active
        return Refresh.NO_SOURCE if running or needs_refresh(job, metrics) else None
    return request_refresh(job) if needs_refresh(job, metrics) else None


def request_refresh(job: Job) -> Refresh:
    """Enqueue one archive task for ``job`` unless one was asked for within REFRESH_AFTER.

    1. A conditional UPDATE claims the request, so concurrent page views enqueue once.
    2. The task is published; if the broker (Redis) is down, the claim is released, so
       the next view asks again instead of waiting out REFRESH_AFTER, and the caller is
       told the refresh could not be queued. The page keeps serving the stored archive.
    """
    from apps.jobs.tasks import archive_job  # tasks import services' neighbours

    now = timezone.now()
    JobMetrics.objects.get_or_create(job=job)
    claimed = JobMetrics.objects.filter(job=job).filter(
        Q(refresh_requested_at__isnull=True) | Q(refresh_requested_at__lt=now - REFRESH_AFTER)
    ).update(refresh_requested_at=now)
    if not claimed:
        return Refresh.ASKED
    outcome = [Refresh.QUEUED]

    def _release(exc: BaseException) -> None:
        JobMetrics.objects.filter(job=job, refresh_requested_at=now).update(
            refresh_requested_at=None)
        outcome[0] = Refresh.UNAVAILABLE

    publish_on_commit(archive_job, job.pk, on_failure=_release)
    return outcome[0]  # inside an outer transaction the publish comes later: optimistic


# --- Recorded runs (tasks and commands) ------------------------------------------------


def archive_job(job: Job, source: archive.Source | None = None, *, force: bool = False,
                attempt: Mapping[str, int] | None = None) -> JobMetrics:
    """``archive.archive_job`` as a TaskRun; ``attempt``: the task's try and retries left."""
    with tracked_run("archive_job", cluster=job.cluster, target=str(job)) as run:
        run.stats = dict(attempt or {})
        metrics = archive.archive_job(job, source, force=force)
        run.stats.update(status=metrics.status, measure=metrics.measure,
                         gpus=job.archived_gpus().count())
        # a refused measure or a partial answer: the run says so, with the query
        mark_partial(run, [str(w) for w in metrics.warnings or []])
    return metrics


def archive_pending() -> int:
    """Enqueue an archive of every finished, unarchived job; returns how many."""
    from apps.jobs.tasks import archive_job as archive_task  # tasks import this module

    with tracked_run("archive_pending") as run:
        pks = archive.pending_job_pks()
        for pk in pks:
            archive_task.delay_on_commit(pk)
        run.stats = {"enqueued": len(pks)}
    return len(pks)


def archive_from_files(cluster: Cluster, jobs: Sequence[Job], source: archive.OpenMetricsSource, *,
                       force: bool = False) -> list[JobMetrics]:
    """One cluster's jobs from telemetry files in one pass (``archive.archive_many``)."""
    with tracked_run("archive_jobs", cluster=cluster, target=f"{len(jobs)} jobs from files") as run:
        done = archive.archive_many(jobs, source, force=force)
        run.stats = {"jobs": len(done)}
    return done


def diagnose_again(jobs: QuerySet[Job]) -> dict[str, int]:
    """Evaluate the diagnosis rules on ``jobs`` again; returns jobs and findings counted."""
    with tracked_run("diagnose_jobs", target=f"{jobs.count()} jobs") as run:
        fired = sum(len(diagnose_job(job)) for job in jobs.iterator(chunk_size=500))
        stats = {"jobs": jobs.count(), "findings": fired}
        run.stats = stats
    return stats


def import_trace(job: Job, paths: Sequence[Path]) -> TraceRun:
    """``traces.import_trace`` as a TaskRun (what ``manage.py import_trace`` runs)."""
    with tracked_run("import_trace", job.cluster, target=str(job)) as run:
        trace_run = traces.import_trace(job, paths)
        run.stats = {"trace_run": trace_run.pk, "ranks": trace_run.ranks.count(),
                     "warnings": len(trace_run.warnings)}
    return trace_run
