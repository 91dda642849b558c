"""Celery tasks of the jobs app: thin, ids in, one service call (which records the run)."""

from __future__ import annotations

from celery import shared_task

from apps.clusters.models import Cluster
from apps.core.errors import AdapterError
from apps.core.retries import RETRY, RETRY_DB
from apps.jobs import partitions, services, trace_groups, traces
from apps.jobs.models import Job, TraceDigestGroup, TraceFanOut


@shared_task(bind=True, **RETRY)
def archive_job(self, job_pk: int, force: bool = False) -> None:
    """Archive (finished) or snapshot (running) one job's GPU metrics.

    Each attempt is a TaskRun whose stats say which attempt it was and how many retries
    are left after it (0: a failure there is final), so retries with backoff can be seen.
    """
    job = Job.objects.select_related("cluster").get(pk=job_pk)
    try:
        services.archive_job(job, force=force, attempt={
            "attempt": self.request.retries + 1,
            "retries_left": max(0, (self.max_retries or 0) - self.request.retries)})
    except AdapterError:
        # The embedded default has no worker to retry later, and the error is already on
        # the job's metrics row and the TaskRun: the page shows it and asks again.
        if self.request.is_eager:
            return
        raise


@shared_task(**RETRY_DB)
def archive_pending() -> None:
    """The safety net behind the end-of-job hook: enqueue every finished, unarchived job."""
    services.archive_pending()


@shared_task(**RETRY_DB)
def collect_all_traces() -> None:
    """Enqueue a collection for each cluster with a folder under ``TRACE_ROOT``."""
    for pk in traces.clusters_with_traces():
        collect_traces.delay_on_commit(pk)


@shared_task(**RETRY_DB)
def collect_traces(cluster_id: int) -> None:
    """Import one cluster's new or changed traces from ``TRACE_ROOT`` (a TaskRun per run;
    ``manage.py collect_traces`` is its twin)."""
    traces.collect_cluster(Cluster.objects.get(pk=cluster_id))


@shared_task(**RETRY_DB)
def maintain_archive_partitions() -> None:
    """Daily: the archive's coming months' partitions, and retention's detach (a TaskRun
    per run; ``manage.py archive_partitions`` is its twin); it queues the drop below."""
    partitions.maintain()


@shared_task(**RETRY_DB)
def drop_detached_partitions() -> None:
    """Drop the month tables retention detached (a TaskRun per run; idempotent: nothing
    detached, nothing done; ``manage.py archive_partitions --drop-now`` runs it inline)."""
    partitions.drop_detached()


@shared_task(**RETRY_DB)
def digest_trace_group(group_id: int) -> None:
    """Read one group of a large trace run into digests; the last group queues the
    analysis (a TaskRun per run; a group digested or being read is skipped)."""
    trace_groups.digest_group(
        TraceDigestGroup.objects.select_related("fan_out__job__cluster").get(pk=group_id))


@shared_task(**RETRY_DB)
def analyse_trace_groups(fan_out_id: int) -> None:
    """Analyse a large trace run from its groups' digests, as one run (a TaskRun per run;
    nothing to do once analysed)."""
    trace_groups.analyse(TraceFanOut.objects.select_related("job__cluster").get(pk=fan_out_id))
