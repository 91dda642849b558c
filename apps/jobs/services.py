"""Job services called by views: refreshing a job's stored metrics (archive on demand)."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum

from django.db.models import Q
from django.utils import timezone

from apps.core.broker import publish_on_commit
from apps.jobs.models import Job, JobMetrics

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
    if not job.cluster.metrics_url:
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
