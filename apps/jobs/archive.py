"""The job archive: a job's GPU metrics fetched, summarised and stored in the database.

Prometheus keeps raw data for weeks; chargeback and SLOs look back months. So each job's
per-GPU summaries and a ~300-point series per GPU are stored when it ends (and refreshed
as snapshots while it runs). Pages read only what is stored here.

Guarantees:

- **idempotent**: a finished job archived once is not fetched again (``force`` re-does
  it); re-running replaces the rows, never duplicates them;
- **all or nothing**: everything is fetched and computed first, then written in one
  transaction, so a half summary is never stored as complete;
- **partial answers are not final**: when Prometheus warns that an answer may be partial
  (a failing remote read, say), a finished job is stored as ``partial`` with the warnings,
  shown on its page, and fetched again by ``archive_pending`` after ``PARTIAL_RETRY_AFTER``;
  the ``PARTIAL_ATTEMPTS``-th partial answer in a row is stored final, warnings kept;
- **failures leave data alone**: an error is recorded on the ``JobMetrics`` row
  (``last_error``) and re-raised; a ``TransientAdapterError`` (Prometheus down or slow)
  makes the Celery task retry later.

Where the telemetry comes from is ``archive_sources.py``; how results become stored rows,
``archive_rows.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.analysis.efficiency import JobEfficiency, summarise_job
from apps.analysis.health import GpuHealth, NodeHealth, gpu_health, node_health
from apps.analysis.stragglers import GpuSignals, StragglerVerdict, detect
from apps.analysis.timeseries import GpuKey, Window
from apps.analysis.vendors import joined
from apps.clusters.adapters.telemetry import GpuInterval, JobTelemetry
from apps.clusters.models import TelemetryStore
from apps.core.batch import forked
from apps.core.errors import AdapterError
from apps.jobs import archive_rows
from apps.jobs.archive_sources import OpenMetricsSource, Source, telemetry_source
from apps.jobs.archive_sources import (  # the archive's sources, as callers know them
    PrometheusSource as PrometheusSource,
)
from apps.jobs.archive_sources import catalogue_for as catalogue_for
from apps.jobs.diagnosis import RuleSet, diagnose_job, diagnose_many
from apps.jobs.idleness import efficiency_thresholds
from apps.jobs.models import Job, JobGpu, JobMetrics, JobMetricSummary, JobNodeMetrics

log = logging.getLogger(__name__)

# A finished job's answer with Prometheus warnings is fetched again this often, and the
# PARTIAL_ATTEMPTS-th such answer in a row is stored final with its warnings (a remote
# store that stays broken must not keep a job pending for ever).
PARTIAL_ATTEMPTS = 4
PARTIAL_RETRY_AFTER = timedelta(minutes=15)


# --- The service -----------------------------------------------------------------------


def archive_job(job: Job, source: Source | None = None, *, force: bool = False,
                now: datetime | None = None) -> JobMetrics:
    """Fetch, summarise and store ``job``'s GPU metrics; return its ``JobMetrics`` row.

    1. A job already archived for good is left alone (unless ``force``).
    2. A job that has not started has nothing to fetch.
    3. Fetch every series first (errors: recorded, then re-raised).
    4. Summarise with the pure efficiency code; hours come from Slurm's allocation.
    5. Replace the stored rows in one transaction, with the straggler verdict.
    6. Run the diagnosis rules over what was stored.
    """
    existing = JobMetrics.objects.filter(job=job).first()
    if existing and existing.is_final and not force:
        return existing
    if job.start_time is None:
        return existing or JobMetrics.objects.get_or_create(job=job)[0]
    now = now or timezone.now()
    window = _window(job, now)
    intervals = _intervals(job, window)
    try:
        source = source or telemetry_source(job)
        telemetry = source.fetch(str(job.job_id), window, intervals)
    except AdapterError as exc:
        record_error(job, exc)
        raise
    return _archive_fetched(job, source.name, telemetry, window, intervals, now)


def archive_many(jobs: Sequence[Job] | QuerySet[Job], source: OpenMetricsSource, *,
                 force: bool = False, now: datetime | None = None,
                 progress: Callable[[int, int], None] | None = None) -> list[JobMetrics]:
    """``archive_job`` for many jobs from telemetry files, in one pass over the files.

    The backfill path (the demo, a site importing history). Each file is read once;
    memory holds the samples of the jobs open at the current file's time. Jobs are
    summarised and stored ``STORE_BATCH`` at a time (one transaction and a few queries
    per batch; the rows are ``archive_job``'s). A file that cannot be read stops the
    pass: the jobs read before it are stored, its error is recorded on every job not
    stored, and re-raised.
    """
    return list(iter_archive(jobs, source, force=force, now=now, progress=progress))


def iter_archive(jobs: Sequence[Job] | QuerySet[Job], source: OpenMetricsSource, *,
                 force: bool = False, now: datetime | None = None,
                 progress: Callable[[int, int], None] | None = None) -> Iterator[JobMetrics]:
    """``archive_many``, yielding each job's row once stored (consume it to the end).

    Given a queryset, the pass keeps each job's window and GPUs, not the job: the jobs
    of a batch are read again to store it, so memory does not grow with the number of
    jobs (a month's backfill).
    """
    now = now or timezone.now()
    given: dict[int, Job] = {}
    todo: dict[str, Todo] = {}
    for chunk in _job_chunks(jobs):
        existing, held = _existing_metrics(chunk), _intervals_of(chunk)
        for job in chunk:
            metrics = existing.get(job.pk)
            if (metrics and metrics.is_final and not force) or job.start_time is None:
                yield metrics or JobMetrics.objects.get_or_create(job=job)[0]
                continue
            window = _window(job, now)
            todo[str(job.job_id)] = _todo(job, window, _clipped(held.get(job.pk, []), window),
                                          now)
            if not isinstance(jobs, QuerySet):
                given[job.pk] = job
    load = (lambda pks: Job.objects.select_related("cluster").in_bulk(pks)) \
        if isinstance(jobs, QuerySet) else (lambda pks: given)
    yield from _archive_stream(todo, source, load, now, progress)


@dataclass(frozen=True)
class Todo:
    """A job to summarise, as plain data (it crosses to the worker process)."""

    pk: int
    window: Window
    intervals: list[GpuInterval]
    gpu_hours: float  # Slurm's allocation up to now
    gpus: int
    finished: bool


def _todo(job: Job, window: Window, intervals: list[GpuInterval], now: datetime) -> Todo:
    return Todo(job.pk, window, intervals, job.gpu_hours_until(now), job.gpus, _finished(job))


def _archive_stream(todo: dict[str, Todo], source: OpenMetricsSource,
                    load: Callable[[list[int]], dict[int, Job]], now: datetime,
                    progress: Callable[[int, int], None] | None) -> Iterator[JobMetrics]:
    """Steps 4 to 6 of ``archive_job`` for the jobs of ``todo`` as the files pass them.

    Forked workers read the files (pure work, ``OpenMetricsSource.stream``) while this
    process summarises, stores and diagnoses what they have read (``apps/core/batch.py``).
    """
    rules = RuleSet.load()  # once per pass, not once per job

    def summaries() -> Iterator[tuple[str, Summary]]:
        for key, telemetry in source.stream([(k, t.window, t.intervals)
                                             for k, t in todo.items()]):
            yield key, summarise(todo[key], source.name, telemetry)

    total, stored, batch = len(todo), 0, []
    try:
        for key, summary in forked(summaries):
            del todo[key]
            batch.append(summary)
            if len(batch) >= STORE_BATCH:
                yield from _store_batch(batch, load, now, rules)
                stored, batch = stored + len(batch), []
                if progress:
                    progress(stored, total)
    except AdapterError as exc:
        yield from _store_batch(batch, load, now, rules)  # read before the error: complete
        pks = {t.pk for t in todo.values()}
        for job in load(sorted(pks)).values():
            if job.pk in pks:
                record_error(job, exc)
        raise
    yield from _store_batch(batch, load, now, rules)
    if progress and batch:
        progress(total, total)


STORE_BATCH = 200  # jobs per transaction in a backfill


def _store_batch(batch: list[Summary], load: Callable[[list[int]], dict[int, Job]],
                 now: datetime, rules: RuleSet) -> list[JobMetrics]:
    """Store and diagnose a batch of summarised jobs, in stream order."""
    if not batch:
        return []
    jobs = load([s.pk for s in batch])
    pairs = [(jobs[s.pk], s) for s in batch]
    stored = _write(pairs, now)
    diagnose_many([job for job, _ in pairs], rules)
    return stored


def _job_chunks(jobs: Sequence[Job] | QuerySet[Job], size: int = 900) -> Iterator[list[Job]]:
    if isinstance(jobs, QuerySet):
        chunk: list[Job] = []
        for job in jobs.iterator(chunk_size=size):
            chunk.append(job)
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk
    else:
        for start in range(0, len(jobs), size):
            yield list(jobs[start:start + size])


def _existing_metrics(jobs: Sequence[Job]) -> dict[int, JobMetrics]:
    """The stored ``JobMetrics`` of ``jobs`` by job pk."""
    return {m.job_id: m for m in JobMetrics.objects.filter(job_id__in=[j.pk for j in jobs])}


def _intervals_of(jobs: Sequence[Job]) -> dict[int, list[JobGpu]]:
    """The held GPUs of ``jobs`` by job pk, each job's in ``job.gpus_held``'s order."""
    held: dict[int, list[JobGpu]] = {}
    pks = [j.pk for j in jobs if j.start_time is not None]
    for gpu in JobGpu.objects.filter(job_id__in=pks).select_related("node"):
        held.setdefault(gpu.job_id, []).append(gpu)
    return held


def _archive_fetched(job: Job, source: str, telemetry: JobTelemetry, window: Window,
                     intervals: Sequence[GpuInterval], now: datetime,
                     rules: RuleSet | None = None) -> JobMetrics:
    """Steps 4 to 6 of ``archive_job`` on fetched telemetry."""
    summary = summarise(_todo(job, window, list(intervals), now), source, telemetry)
    metrics = _write([(job, summary)], now)[0]
    diagnose_job(job, rules)
    return metrics


def summarise(todo: Todo, source: str, telemetry: JobTelemetry) -> Summary:
    """Step 4: the pure efficiency code, health and stragglers; the rows as plain data."""
    result = summarise_job(telemetry.gpus, todo.window, todo.gpu_hours,
                           expected=[i.key for i in todo.intervals],
                           thresholds=efficiency_thresholds(), gpu_count=todo.gpus)
    return _rows(todo, source, telemetry, analyse(telemetry, result, todo.window))


@dataclass(frozen=True)
class Analysis:
    """What the archive stores beyond efficiency: health, node traffic, the straggler verdict."""

    efficiency: JobEfficiency
    health: dict[GpuKey, GpuHealth]
    nodes: dict[str, NodeHealth]
    straggler: StragglerVerdict


def analyse(telemetry: JobTelemetry, result: JobEfficiency, window: Window) -> Analysis:
    """Health per GPU and node, then the straggler verdict over them (all pure)."""
    health = {key: gpu_health(series, window) for key, series in telemetry.gpus.items()}
    nodes = {host: node_health(host, series, window)
             for host, series in sorted(telemetry.nodes.items())}
    return Analysis(result, health, nodes, detect(signals(result, health), result.measure))


def signals(result: JobEfficiency, health: dict[GpuKey, GpuHealth]) -> list[GpuSignals]:
    """The straggler inputs: the efficiency split and the health of each GPU."""
    out = []
    for s in result.gpus:
        h = health.get(s.key, GpuHealth())
        out.append(GpuSignals(
            key=s.key, busy=s.split.busy, computing=s.split.useful, waiting=s.split.waiting,
            traffic_share=s.waiting_with_traffic, sm_clock=h.sm_clock_busy,
            temperature=h.temp_mean, thermal_share=h.thermal_share, power_share=h.power_share,
            hw_slowdown_share=h.hw_slowdown_share,
            xids=h.hardware_xids, ecc_dbe=h.ecc_dbe))
    return out


def pending_job_pks(grace_s: int = 120, lookback_days: int = 14, limit: int = 5000) -> list[int]:
    """Finished jobs with GPUs and no final archive, ended at least ``grace_s`` ago
    (the last scrapes arrive late) and recently enough for Prometheus to still hold them,
    on clusters that have a Prometheus or telemetry stores.

    A ``partial`` archive (its answer carried warnings) waits ``PARTIAL_RETRY_AFTER``
    between attempts.
    """
    now = timezone.now()
    # no source: the task could only fail
    stored = TelemetryStore.objects.values("cluster")
    jobs = Job.objects.all() if settings.PROMETHEUS_URL else Job.objects.filter(
        Q(cluster__prometheus_url__gt="") | Q(cluster__in=stored))
    return list(
        jobs.exclude(state__in=Job.ACTIVE_STATES)
        .filter(gpu_equivalent__gt=0, start_time__isnull=False,
                end_time__lte=now - timedelta(seconds=grace_s),
                end_time__gte=now - timedelta(days=lookback_days))
        .exclude(metrics__status__in=JobMetrics.FINAL)
        .exclude(metrics__status=JobMetrics.Status.PARTIAL,
                 metrics__computed_at__gt=now - PARTIAL_RETRY_AFTER)
        .order_by("end_time").values_list("pk", flat=True)[:limit])


def record_error(job: Job, exc: Exception) -> None:
    """Note a failure on the job's metrics row without touching its stored data."""
    JobMetrics.objects.get_or_create(job=job)
    JobMetrics.objects.filter(job=job).update(
        last_error=f"{type(exc).__name__}: {exc}"[:2000], last_error_at=timezone.now())


def _finished(job: Job) -> bool:
    return not job.is_active and job.end_time is not None


def _window(job: Job, now: datetime) -> Window:
    assert job.start_time is not None
    end = job.end_time if job.end_time and not job.is_active else now
    start = job.start_time.timestamp()
    return Window(start, max(start + 1.0, end.timestamp()))


def _intervals(job: Job, window: Window) -> list[GpuInterval]:
    return _clipped(list(job.gpus_held.select_related("node")), window)


def _clipped(held: Sequence[JobGpu], window: Window) -> list[GpuInterval]:
    return [GpuInterval(g.node.name, g.gpu_index, max(window.start, g.start.timestamp()),
                        min(window.end, g.end.timestamp() if g.end else window.end),
                        g.gpu_uuid)
            for g in held]


@dataclass
class Summary:
    """One job's archive, computed and not stored: the rows' fields as plain data."""

    pk: int
    summaries: list[dict[str, Any]]  # JobMetricSummary fields
    nodes: list[dict[str, Any]]  # JobNodeMetrics fields
    fields: dict[str, Any]  # JobMetrics fields, but status and partial_attempts
    has_data: bool
    warned: bool
    finished: bool
    straggler: str


def _rows(todo: Todo, source: str, telemetry: JobTelemetry, analysis: Analysis) -> Summary:
    result = analysis.efficiency
    p = telemetry.plan
    named = {s.key: s.slowdown for s in analysis.straggler.stragglers}
    rows = [archive_rows.summary_row(s, telemetry, analysis.health.get(s.key, GpuHealth()),
                         named.get(s.key), p.window, p.n) for s in result.gpus]
    nodes = [archive_rows.node_row(health, telemetry.nodes.get(host, {}), p.window, p.n)
             for host, health in analysis.nodes.items()]
    fields = {
        "source": source, "binding": telemetry.binding,
        "measure": result.measure, "gpu_vendor": joined(telemetry.vendors.values()),
        "window_start": archive_rows.utc(p.window.start),
        "window_end": archive_rows.utc(p.window.end), "step_s": p.step, "points": p.n,
        "allocated_gpu_hours": result.allocated_gpu_hours,
        "useful_hours": result.hours.useful, "waiting_hours": result.hours.waiting,
        "held_idle_hours": result.hours.held_idle,
        "no_process_hours": result.hours.no_process, "coverage": result.coverage,
        "measured_s": max((g.measured_seconds for g in result.gpus), default=0.0),
        "means": result.means, "verdict": result.verdict,
        "gpus_missing": [str(k) for k in result.missing],
        "warnings": telemetry.warnings[:20], "last_error": "",
        "useful_fraction": result.fractions.useful if result.has_data else None,
        **archive_rows.hardware_fields(analysis.health),
        **archive_rows.straggler_fields(analysis.straggler),
    }
    return Summary(todo.pk, rows, nodes, fields, result.has_data, bool(telemetry.warnings),
                   todo.finished, analysis.straggler.status)


def _write(pairs: Sequence[tuple[Job, Summary]], now: datetime) -> list[JobMetrics]:
    """Step 5: replace the stored rows of every job in ``pairs``, in one transaction."""
    jobs = [job for job, _ in pairs]
    with transaction.atomic():
        locked = {m.job_id: m for m in
                  JobMetrics.objects.select_for_update().filter(job__in=jobs)}
        JobMetricSummary.objects.for_jobs(jobs).delete()
        JobMetricSummary.objects.bulk_create([JobMetricSummary(job=job, **r)
                                              for job, p in pairs for r in p.summaries])
        JobNodeMetrics.objects.for_jobs(jobs).delete()
        JobNodeMetrics.objects.bulk_create([JobNodeMetrics(job=job, **r)
                                            for job, p in pairs for r in p.nodes])
        out: list[JobMetrics] = []
        new: list[JobMetrics] = []
        for job, p in pairs:
            metrics = locked.get(job.pk) or JobMetrics(job=job)
            status, attempts = _status(p.has_data, p.warned, p.finished,
                                       metrics.partial_attempts)
            for name, value in {**p.fields, "status": status, "partial_attempts": attempts,
                                "computed_at": now}.items():
                setattr(metrics, name, value)
            if metrics.pk is None:
                new.append(metrics)
            else:
                metrics.save()
            out.append(metrics)
        JobMetrics.objects.bulk_create(new)
    for (job, p), metrics in zip(pairs, out, strict=True):
        log.info("archive: job %s %s (%d GPUs, measure %s, straggler %s)", job,
                 metrics.status, len(p.summaries), metrics.measure or "-", p.straggler)
    return out


def _status(has_data: bool, warned: bool, finished: bool, attempts: int) -> tuple[str, int]:
    """The archive's status and its count of partial answers in a row.

    A running job is a ``live`` snapshot either way (its page shows the warnings). A
    finished job's answer with warnings is ``partial`` (not final: fetched again) until the
    ``PARTIAL_ATTEMPTS``-th in a row, which is stored final with its warnings.
    """
    attempts = attempts + 1 if warned else 0
    if not finished:
        return JobMetrics.Status.LIVE, 0
    if warned and attempts < PARTIAL_ATTEMPTS:
        return JobMetrics.Status.PARTIAL, attempts
    return (JobMetrics.Status.COMPLETE if has_data else JobMetrics.Status.NO_DATA), attempts
