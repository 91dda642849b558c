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
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.analysis import compact
from apps.analysis.efficiency import GpuSummary, JobEfficiency, summarise_job
from apps.analysis.health import GpuHealth, NodeHealth, gpu_health, node_health
from apps.analysis.stragglers import GpuSignals, StragglerVerdict, detect
from apps.analysis.timeseries import GpuKey, Series, Window, regrid
from apps.clusters import services as cluster_services
from apps.clusters.adapters.catalogue import Catalogue, CatalogueError
from apps.clusters.adapters.prometheus import PrometheusClient
from apps.clusters.adapters.telemetry import (
    GpuInterval,
    JobTelemetry,
    fetch_by_host,
    fetch_by_label,
    fetch_nodes,
    plan,
)
from apps.clusters.models import Cluster
from apps.core.batch import forked, forked_map
from apps.core.errors import AdapterError
from apps.jobs.adapters.openmetrics import JobRequest, JobSeries, first_timestamp, jobs_series
from apps.jobs.diagnosis import RuleSet, diagnose_job, diagnose_many
from apps.jobs.models import Job, JobGpu, JobMetrics, JobMetricSummary, JobNodeMetrics

log = logging.getLogger(__name__)

# A finished job's answer with Prometheus warnings is fetched again this often, and the
# PARTIAL_ATTEMPTS-th such answer in a row is stored final with its warnings (a remote
# store that stays broken must not keep a job pending for ever).
PARTIAL_ATTEMPTS = 4
PARTIAL_RETRY_AFTER = timedelta(minutes=15)


class Source(Protocol):
    """Where a job's telemetry comes from (Prometheus, or an OpenMetrics file)."""

    name: str

    def fetch(self, job_id: str, window: Window,
              intervals: Sequence[GpuInterval]) -> JobTelemetry: ...


@dataclass
class PrometheusSource:
    """The cluster's Prometheus: bind by ``hpc_job`` label, else by held (host, GPU)."""

    client: PrometheusClient
    catalogue: Catalogue
    name: str = "prometheus"

    def fetch(self, job_id: str, window: Window,
              intervals: Sequence[GpuInterval]) -> JobTelemetry:
        telemetry = fetch_by_label(self.client, self.catalogue, job_id, window)
        if not telemetry.gpus and intervals:
            telemetry = fetch_by_host(self.client, self.catalogue, intervals, window)
        fetch_nodes(self.client, self.catalogue, {k.host for k in telemetry.gpus}, telemetry)
        return telemetry


@dataclass
class OpenMetricsSource:
    """Telemetry files in OpenMetrics text (the simulator's output, an export).

    ``paths`` are files or folders of files, one per time window as promtool backfills
    them (``telemetry/<start>.om``); only the files whose time range meets the job's window
    are read. A file's range runs from its first sample to the next file's first sample.
    """

    paths: Sequence[Path]
    catalogue: Catalogue
    name: str = "openmetrics"
    _cached_ranges: list[tuple[float, float, Path]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.paths, str | Path):  # one file or folder given on its own
            self.paths = [Path(self.paths)]

    def fetch(self, job_id: str, window: Window,
              intervals: Sequence[GpuInterval]) -> JobTelemetry:
        return self.fetch_many([(job_id, window, intervals)])[job_id]

    def fetch_many(self, jobs: Sequence[tuple[str, Window, Sequence[GpuInterval]]]
                   ) -> dict[str, JobTelemetry]:
        """Several jobs at once, reading each file once (bound by label, else by held GPUs).

        Memory grows with the kept samples: pass jobs in batches (``archive_many`` does).
        """
        requests = [JobRequest(job_id, window, True,
                               tuple((i.key, i.start, i.end) for i in intervals))
                    for job_id, window, intervals in jobs]
        union = Window(min(w.start for _, w, _ in jobs), max(w.end for _, w, _ in jobs)) \
            if jobs else Window(0, 0)
        read: dict[str, JobSeries] = {r.job_id: JobSeries({}, {}) for r in requests}
        for path in self.files_for(union):
            for job_id, part in self._read(path, requests).items():
                read[job_id] = _merged(read[job_id], part)
        return {job_id: self._telemetry(window, read[job_id])
                for job_id, window, _ in jobs}

    def stream(self, jobs: Sequence[tuple[str, Window, Sequence[GpuInterval]]]
               ) -> Iterator[tuple[str, JobTelemetry]]:
        """Telemetry of many jobs in one pass over the files in time order.

        Each file is read once, for the jobs whose window meets it; a job is handed over
        as soon as the files have passed its window, so memory holds the samples of the
        jobs still open (those running at the current file's time), not of all of them.
        Which jobs a file is read for depends on their windows only, so the files are
        read by two forked children (``forked_map``) while this process merges.
        """
        plan = self._plan(jobs)
        parts = forked_map(self._read_planned, [(path, requests) for path, requests, _ in plan])
        read: dict[str, JobSeries] = {}
        windows = {job_id: window for job_id, window, _ in jobs}
        for (_, requests, closing), part in zip(plan, parts, strict=True):
            for r in requests:
                read.setdefault(r.job_id, JobSeries({}, {}))
            for job_id, series in part.items():
                read[job_id] = _merged(read[job_id], series)
            for job_id in closing:
                yield job_id, self._telemetry(windows[job_id],
                                              read.pop(job_id, JobSeries({}, {})))

    def _plan(self, jobs: Sequence[tuple[str, Window, Sequence[GpuInterval]]]
              ) -> list[tuple[Path | None, list[JobRequest], list[str]]]:
        """Per file in time order: the jobs to read it for, and the jobs that close after
        it (their windows end before the next file). A last row without a file closes the
        jobs the files never reached or never passed."""
        waiting = sorted(jobs, key=lambda j: j[1].start)
        open_: dict[str, JobRequest] = {}
        plan: list[tuple[Path | None, list[JobRequest], list[str]]] = []
        for start, end, path in self._ranges():
            while waiting and waiting[0][1].start - self.catalogue.scrape_interval < end:
                job_id, window, intervals = waiting.pop(0)
                open_[job_id] = JobRequest(job_id, window, True, tuple(
                    (i.key, i.start, i.end) for i in intervals))
            requests = [r for r in open_.values() if start <= r.window.end]
            closing = [j for j, r in open_.items() if r.window.end < end]
            for job_id in closing:
                del open_[job_id]
            plan.append((path, requests, closing))
        plan.append((None, [], [job_id for job_id, _, _ in waiting] + list(open_)))
        return plan

    def _read_planned(self, item: tuple[Path | None, list[JobRequest]]) -> dict[str, JobSeries]:
        path, requests = item
        return self._read(path, requests) if path is not None else {}

    def _telemetry(self, window: Window, read: JobSeries) -> JobTelemetry:
        result = JobTelemetry(plan(window, self.catalogue.scrape_interval), read.binding)
        result.gpus, result.nodes = read.gpus, read.nodes
        return result

    def files_for(self, window: Window) -> list[Path]:
        """The files whose time range overlaps ``window`` (all of them when one file)."""
        return [path for start, end, path in self._ranges()
                if start <= window.end and end > window.start - self.catalogue.scrape_interval]

    def _ranges(self) -> list[tuple[float, float, Path]]:
        """``(first sample, next file's first sample, path)``, read once per source."""
        if self._cached_ranges is None:
            starts = sorted((start, path) for path in self._files()
                            if (start := self._first(path)) is not None)
            ends = [s for s, _ in starts[1:]] + [float("inf")]
            self._cached_ranges = [(start, end, path)
                                   for (start, path), end in zip(starts, ends, strict=True)]
        return self._cached_ranges

    def _files(self) -> list[Path]:
        files: list[Path] = []
        for path in self.paths:
            files += sorted(p for p in path.iterdir() if p.is_file() and
                            not p.name.startswith(".")) if path.is_dir() else [path]
        return files

    def _first(self, path: Path) -> float | None:
        try:
            with path.open(encoding="utf-8") as lines:
                return first_timestamp(lines)
        except (OSError, UnicodeDecodeError) as exc:
            raise AdapterError(f"cannot read {path}: {exc}", service="openmetrics") from exc

    def _read(self, path: Path, requests: list[JobRequest]) -> dict[str, JobSeries]:
        relevant = [r for r in requests if self._overlaps(path, r.window)]
        if not relevant:
            return {}
        try:
            with path.open(encoding="utf-8") as lines:
                return jobs_series(lines, self.catalogue, relevant)
        except (OSError, UnicodeDecodeError) as exc:
            raise AdapterError(f"cannot read {path}: {exc}", service="openmetrics") from exc

    def _overlaps(self, path: Path, window: Window) -> bool:
        return path in self.files_for(window)


def _merged(old: JobSeries, part: JobSeries) -> JobSeries:
    """A later file's points appended to what earlier files gave (files in time order)."""
    gpus, nodes = dict(old.gpus), dict(old.nodes)
    _merge_into(gpus, part.gpus)
    _merge_into(nodes, part.nodes)
    labelled = (old.gpus and old.binding == "label") or (part.gpus and part.binding == "label")
    return JobSeries(gpus, nodes, "label" if labelled or not gpus else "host")


def _merge_into(target: dict[Any, dict[str, Series]],
                part: dict[Any, dict[str, Series]]) -> None:
    """Append a later file's points to the series read so far (files come in time order)."""
    for key, measures in part.items():
        mine = target.setdefault(key, {})
        for measure, series in measures.items():
            old = mine.get(measure)
            mine[measure] = series if old is None else Series(
                old.metric, old.labels, old.points + series.points)


def catalogue_for(cluster: Cluster) -> Catalogue:
    try:
        return Catalogue.from_config(cluster.metric_labels)
    except CatalogueError as exc:
        raise AdapterError(f"cluster {cluster.name}: {exc}", service="prometheus") from exc


def prometheus_source(cluster: Cluster) -> PrometheusSource:
    """The Prometheus source of ``cluster`` (AdapterError when none is configured)."""
    client = cluster_services.prometheus_for(cluster)
    if client is None:
        raise AdapterError(f"cluster {cluster.name} has no Prometheus URL", service="prometheus")
    return PrometheusSource(client, catalogue_for(cluster))


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
        source = source or prometheus_source(job.cluster)
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
                           expected=[i.key for i in todo.intervals], gpu_count=todo.gpus)
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
            xids=h.hardware_xids, ecc_dbe=h.ecc_dbe))
    return out


def pending_job_pks(grace_s: int = 120, lookback_days: int = 14, limit: int = 5000) -> list[int]:
    """Finished jobs with GPUs and no final archive, ended at least ``grace_s`` ago
    (the last scrapes arrive late) and recently enough for Prometheus to still hold them,
    on clusters that have a Prometheus.

    A ``partial`` archive (its answer carried warnings) waits ``PARTIAL_RETRY_AFTER``
    between attempts.
    """
    now = timezone.now()
    jobs = Job.objects.all() if settings.PROMETHEUS_URL else \
        Job.objects.exclude(cluster__prometheus_url="")  # no source: the task could only fail
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
    rows = [_summary_row(s, telemetry, analysis.health.get(s.key, GpuHealth()),
                         named.get(s.key), p.window, p.n) for s in result.gpus]
    nodes = [_node_row(health, telemetry.nodes.get(host, {}), p.window, p.n)
             for host, health in analysis.nodes.items()]
    fields = {
        "source": source, "binding": telemetry.binding,
        "measure": result.measure, "window_start": _dt(p.window.start),
        "window_end": _dt(p.window.end), "step_s": p.step, "points": p.n,
        "allocated_gpu_hours": result.allocated_gpu_hours,
        "useful_hours": result.hours.useful, "waiting_hours": result.hours.waiting,
        "held_idle_hours": result.hours.held_idle,
        "no_process_hours": result.hours.no_process, "coverage": result.coverage,
        "means": result.means, "verdict": result.verdict,
        "gpus_missing": [str(k) for k in result.missing],
        "warnings": telemetry.warnings[:20], "last_error": "",
        "useful_fraction": result.fractions.useful if result.has_data else None,
        **_hardware_fields(analysis.health),
        **_straggler_fields(analysis.straggler),
    }
    return Summary(todo.pk, rows, nodes, fields, result.has_data, bool(telemetry.warnings),
                   todo.finished, analysis.straggler.status)


def _write(pairs: Sequence[tuple[Job, Summary]], now: datetime) -> list[JobMetrics]:
    """Step 5: replace the stored rows of every job in ``pairs``, in one transaction."""
    jobs = [job for job, _ in pairs]
    with transaction.atomic():
        locked = {m.job_id: m for m in
                  JobMetrics.objects.select_for_update().filter(job__in=jobs)}
        JobMetricSummary.objects.filter(job__in=jobs).delete()
        JobMetricSummary.objects.bulk_create([JobMetricSummary(job=job, **r)
                                              for job, p in pairs for r in p.summaries])
        JobNodeMetrics.objects.filter(job__in=jobs).delete()
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


def _hardware_fields(health: dict[GpuKey, GpuHealth]) -> dict[str, Any]:
    """GPUs with a hardware XID and the uncorrectable ECC errors over the job: what the
    job-success SLO reads (None where nothing was measured)."""
    if not health:
        return {"xid_gpus": None, "ecc_dbe": None}
    dbe = [h.ecc_dbe for h in health.values() if h.ecc_dbe is not None]
    return {"xid_gpus": sum(1 for h in health.values() if h.hardware_xids),
            "ecc_dbe": int(sum(dbe)) if dbe else None}


def _straggler_fields(verdict: StragglerVerdict) -> dict[str, Any]:
    return {
        "straggler_status": verdict.status, "straggler_confidence": verdict.confidence,
        "straggler_summary": verdict.summary, "straggler_detail": straggler_detail(verdict),
    }


def straggler_detail(verdict: StragglerVerdict) -> dict[str, Any]:
    """The verdict as stored JSON: named GPUs, waiting GPUs, reasons, limits, evidence."""
    return {
        "stragglers": [{"gpu": str(s.key), "waiting": round(s.waiting, 4),
                        "peer_waiting": round(s.peer_waiting, 4),
                        "slowdown": round(s.slowdown, 4), "cause": s.cause}
                       for s in verdict.stragglers],
        "waiting_gpus": [str(k) for k in verdict.waiting_gpus],
        "reasons": list(verdict.reasons), "limits": list(verdict.limits),
        "evidence": [{"kind": e.kind, "gpu": e.gpu, "text": e.text, "value": e.value}
                     for e in verdict.evidence],
    }


def _summary_row(s: GpuSummary, telemetry: JobTelemetry, h: GpuHealth,
                 slowdown: float | None, window: Window, n: int) -> dict[str, Any]:
    series = telemetry.gpus.get(s.key, {})
    return dict(
        host=s.key.host, gpu_index=s.key.gpu, gpu_uuid=telemetry.uuids.get(s.key, ""),
        measure=s.measure, measured_s=s.measured_seconds, mean=s.activity.mean,
        p5=s.activity.p5, p50=s.activity.p50, p95=s.activity.p95,
        idle_fraction=s.idle_fraction, useful=s.split.useful, waiting=s.split.waiting,
        held_idle=s.split.held_idle, no_process=s.split.no_process,
        util_mean=s.means.get("gpu_util"), tensor_mean=s.means.get("tensor_active"),
        fb_used_mib=s.means.get("fb_used"), power_w=s.means.get("power"),
        waiting_with_traffic=s.waiting_with_traffic,
        occupancy_mean=h.occupancy_mean, fp64_mean=h.fp64_mean, dram_mean=h.dram_mean,
        temp_mean=h.temp_mean, temp_max=h.temp_max, sm_clock_busy=h.sm_clock_busy,
        thermal_share=h.thermal_share, power_share=h.power_share,
        hw_slowdown_share=h.hw_slowdown_share, xids=list(h.xids), ecc_sbe=h.ecc_sbe,
        ecc_dbe=h.ecc_dbe, nvlink_bps=h.nvlink_bps, pcie_rx_bps=h.pcie_rx_bps,
        pcie_tx_bps=h.pcie_tx_bps, straggler=slowdown is not None, slowdown=slowdown,
        series=compact.encode(_channels(series, s.measure, window, n)),
    )


def _node_row(h: NodeHealth, series: dict[str, Series], window: Window,
              n: int) -> dict[str, Any]:
    channels = {name: regrid(series[name].points, window, n)
                for name in NODE_CHANNELS if name in series}
    return dict(
        host=h.host, cpu_busy=h.cpu_busy, mem_used_bytes=h.mem_used_bytes,
        ib_tx_bps=h.ib_tx_bps, ib_rx_bps=h.ib_rx_bps,
        ib_wait_per_s=h.ib_wait_per_s, ib_errors=h.ib_errors,
        ib_rate_min_bps=h.ib_rate_min_bps, ib_rate_max_bps=h.ib_rate_max_bps,
        net_tx_bps=h.net_tx_bps, net_rx_bps=h.net_rx_bps, fs_read_bps=h.fs_read_bps,
        fs_write_bps=h.fs_write_bps, series=compact.encode(channels))


# stored channel -> (measure, how samples combine in a bucket)
GPU_CHANNELS: dict[str, tuple[str, str]] = {
    "gpu_util": ("gpu_util", "mean"), "tensor_active": ("tensor_active", "mean"),
    "fb_used": ("fb_used", "mean"), "power": ("power", "mean"),
    "occupancy": ("sm_occupancy", "mean"), "dram_active": ("dram_active", "mean"),
    "fp64_active": ("fp64_active", "mean"), "temperature": ("temperature", "mean"),
    "sm_clock": ("sm_clock", "mean"), "throttle": ("throttle_reasons", "or"),
    "xid": ("xid", "max"), "nvlink": ("nvlink_tx", "mean"), "pcie_rx": ("pcie_rx", "mean"),
    "pcie_tx": ("pcie_tx", "mean"),
}
NODE_CHANNELS = ("cpu_busy", "mem_used", "ib_tx", "ib_rx", "ib_wait", "net_tx", "net_rx",
                 "fs_read", "fs_write")


def _channels(series: dict[str, Series], measure: str, window: Window,
              n: int) -> dict[str, list[float | None]]:
    wanted = {"activity": (measure, "mean"), **GPU_CHANNELS}
    return {channel: regrid(series[m].points, window, n, how)
            for channel, (m, how) in wanted.items() if m in series}


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)
