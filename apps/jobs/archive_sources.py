"""Where the job archive's telemetry comes from: the cluster's Prometheus, or OpenMetrics files.

``archive.py`` fetches through a ``Source``; ``OpenMetricsSource`` also streams many jobs in
one pass over the files (``archive_many``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings

from apps.analysis.hostlist import expand as expand_hostlist
from apps.analysis.stores import coverage, route
from apps.analysis.timeseries import Series, Window
from apps.clusters import services as cluster_services
from apps.clusters import stores as cluster_stores
from apps.clusters.adapters.catalogue import Catalogue, CatalogueError
from apps.clusters.adapters.prometheus import PrometheusClient
from apps.clusters.adapters.telemetry import (
    GpuInterval,
    JobTelemetry,
    fetch_by_host,
    fetch_by_label,
    fetch_nodes,
    keep_hosts,
    merged,
    plan,
)
from apps.clusters.models import Cluster
from apps.core.batch import forked_map
from apps.core.errors import AdapterError
from apps.jobs.adapters.openmetrics import JobRequest, JobSeries, first_timestamp, jobs_series
from apps.jobs.models import Job


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
class StoresSource:
    """A cluster whose nodes are split over several stores (issue 29 item 2).

    Each store holding some of the job's ``nodes`` is asked in parallel (only for the GPUs
    it answers for), its answer kept to its own nodes, and the answers merged. A store
    that fails leaves its nodes not checked: a warning names the store and the nodes, so
    the page says so and the run ends partial; when every store failed, the fetch fails.
    """

    stores: cluster_stores.Stores
    nodes: tuple[str, ...]
    name: str = "prometheus"

    def fetch(self, job_id: str, window: Window,
              intervals: Sequence[GpuInterval]) -> JobTelemetry:
        hosts = set(self.nodes) | {i.host for i in intervals}
        routes = route(hosts, self.stores.routes, self.stores.partitions)
        found = self.stores.by_name()
        # nodes not known (no node list, no held GPUs): every store is asked, by label
        asked = [name for name in routes if name in found] if hosts else list(found)
        calls = {name: self._call(found[name], job_id, window, intervals) for name in asked}
        answers, failed = cluster_stores.fan_out(calls)
        failed.update(cluster_stores.missing_default(routes, self.stores))
        notes = coverage(routes, failed).notes()
        if not answers:
            raise AdapterError("; ".join(notes) or "no telemetry store answers for the job",
                               service="prometheus")
        whole = merged([keep_hosts(answers[name], self._owned(name)) for name in sorted(answers)])
        whole.warnings[:0] = notes  # first: the page shows the first few warnings
        return whole

    def _call(self, store: cluster_stores.Store, job_id: str, window: Window,
              intervals: Sequence[GpuInterval]) -> Any:
        mine = [i for i in intervals if self.stores.store_of(i.host) == store.name]
        source = PrometheusSource(store.client, store.catalogue)
        return lambda: source.fetch(job_id, window, mine)

    def _owned(self, name: str) -> Any:
        return lambda host: self.stores.store_of(host) == name


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
        result.vendors = {key: self.catalogue.vendor_of(m) for key, m in read.gpus.items()}
        result.models = self.catalogue.models_of(read.gpus)
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
    """The cluster's metric catalogue, the site's exporters and AMD prefix as defaults."""
    try:
        return Catalogue.from_config(cluster.metric_labels, {
            "exporters": settings.GPU_EXPORTERS, "amd_prefix": settings.AMD_METRICS_PREFIX})
    except CatalogueError as exc:
        raise AdapterError(f"cluster {cluster.name}: {exc}", service="prometheus") from exc


def telemetry_source(job: Job) -> PrometheusSource | StoresSource:
    """Where ``job``'s live telemetry comes from: its cluster's Prometheus, or, when the
    cluster has several stores, each store holding some of the job's nodes."""
    cluster = job.cluster
    if not cluster_stores.has_several(cluster):
        return prometheus_source(cluster)
    nodes = tuple(expand_hostlist(job.nodes)) if job.nodes else ()
    return StoresSource(cluster_stores.stores_for(cluster, catalogue_for(cluster)), nodes)


def prometheus_source(cluster: Cluster) -> PrometheusSource:
    """The Prometheus source of ``cluster`` (AdapterError when none is configured)."""
    client = cluster_services.prometheus_for(cluster)
    if client is None:
        raise AdapterError(f"cluster {cluster.name} has no Prometheus URL", service="prometheus")
    return PrometheusSource(client, catalogue_for(cluster))
