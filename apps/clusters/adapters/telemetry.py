"""Per-job GPU and node series from Prometheus, bound to the job in one of two ways.

- **by label**: ``M{hpc_job="J"}``, where the site runs dcgm-exporter's job mapping
  (``gpu_gfx_activity{job_id="J"}`` with the AMD exporter's Slurm integration);
- **by host**: ``M{Hostname=~"h1|h2", gpu=~"0|1"}`` (AMD: ``hostname``, ``gpu_id``) over the
  job's window, then kept only for the (host, GPU) pairs and intervals the job held
  (``JobGpu`` rows). Intervals that know their GPU's UUID select by it instead
  (``M{UUID=~"GPU-a|GPU-b"}``): Slurm's GPU index and NVML's (dcgm's ``gpu`` label) can
  differ, the UUID cannot. Such series are filed under the interval's (host, GPU), the
  name the job's records use.

Each exporter the cluster runs (``Catalogue.dialects``) is asked in its own names and
labels, one query per measure and exporter: a cluster mixing NVIDIA and AMD nodes reads
each GPU as its exporter writes it, in the same portal units.

On the same data both give the same per-GPU series (tested against the real Prometheus).

Every query is bounded. The job window is cut into ``n <= 300`` equal windows and each
point is ``avg_over_time(M[w])`` over one of them (``w`` = step - 1 ms: Prometheus 2.x
range selectors include both ends, so this keeps adjacent windows from sharing a sample).
A range query of this shape keeps at most ``series x (n + w/scrape + 1)`` samples in
memory (:func:`peak_samples`): 512 GPUs over 7 days is about 190 k, far below the default
``--query.max-samples`` of 50 M.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from apps.analysis.timeseries import GpuKey, Series, Window
from apps.clusters.adapters.catalogue import (
    JOB_MEASURES,
    Catalogue,
    Dialect,
    group_by_gpu,
    windowed,
)
from apps.clusters.adapters.prometheus import (
    PrometheusClient,
    QueryFailure,
    all_failed,
    read_narrowly,
)
from apps.clusters.adapters.promql import Matcher, check_job_id, duration, host_of

MAX_POINTS = 300
DEFAULT_MAX_SAMPLES = 50_000_000  # Prometheus' default --query.max-samples


@dataclass(frozen=True)
class GpuInterval:
    """A GPU the job held, and when (unix seconds)."""

    host: str
    gpu: int
    start: float
    end: float
    uuid: str = ""

    @property
    def key(self) -> GpuKey:
        return GpuKey(self.host, self.gpu)


@dataclass(frozen=True)
class Plan:
    """How a job window is sampled: ``n`` windows of ``step`` seconds ending at ``end``."""

    window: Window
    n: int
    step: float

    @property
    def first(self) -> float:
        return self.window.start + self.step

    def times(self) -> list[float]:
        """The evaluation timestamps (each the end of its window)."""
        return [self.window.start + (k + 1) * self.step for k in range(self.n)]


@dataclass
class JobTelemetry:
    """Per-GPU series (measure -> Series, portal units) and per-node series for one job."""

    plan: Plan
    binding: str
    gpus: dict[GpuKey, dict[str, Series]] = field(default_factory=dict)
    uuids: dict[GpuKey, str] = field(default_factory=dict)
    vendors: dict[GpuKey, str] = field(default_factory=dict)  # nvidia, amd (by exporter)
    models: dict[GpuKey, str] = field(default_factory=dict)  # the exporter's model label
    nodes: dict[str, dict[str, Series]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    peak_samples: int = 0
    # measures whose query failed while the others were read (also in ``warnings``, so a
    # finished job's archive is partial and fetched again)
    failures: list[QueryFailure] = field(default_factory=list)

    def failed(self, failures: list[QueryFailure]) -> None:
        self.failures += failures
        self.warnings += [f"query failed: {f}" for f in failures]


def plan(window: Window, scrape_interval: float, max_points: int = MAX_POINTS) -> Plan:
    """Windows no shorter than one scrape and no more than ``max_points`` of them."""
    seconds = max(window.seconds, 0.001)
    n = max(1, min(max_points, math.floor(seconds / scrape_interval)))
    return Plan(window, n, seconds / n)


def peak_samples(series: int, plan: Plan, scrape_interval: float) -> int:
    """Upper bound of the samples one windowed range query holds in memory at once.

    The output (``series x n`` points) plus one window of raw samples per series.
    """
    per_window = math.ceil(plan.step / scrape_interval) + 1
    return series * (plan.n + per_window)


def fetch_by_label(client: PrometheusClient, catalogue: Catalogue, job_id: str,
                   window: Window, measures: Sequence[str] = JOB_MEASURES, *,
                   stats: bool = False) -> JobTelemetry:
    """Series of the GPUs that carried ``hpc_job=<job_id>`` (each exporter's job label)
    during the window.

    ``stats`` asks Prometheus for its sample counts (``peak_samples``; costs time).
    """
    job_id = check_job_id(job_id)
    return _fetch(client, catalogue, window, measures, "label",
                  lambda d: [[Matcher.eq(d.job_label, job_id), *_cluster(catalogue)]],
                  None, stats)


def fetch_by_host(client: PrometheusClient, catalogue: Catalogue,
                  intervals: Sequence[GpuInterval], window: Window,
                  measures: Sequence[str] = JOB_MEASURES, *, stats: bool = False
                  ) -> JobTelemetry:
    """Series of the GPUs in ``intervals`` (by UUID when known, else by host and index),
    kept only inside each interval."""
    if not intervals:
        return JobTelemetry(plan(window, catalogue.scrape_interval), "host")
    by_uuid = {i.uuid: i.key for i in intervals if i.uuid}
    by_index = [i for i in intervals if not i.uuid]

    def alternatives(d: Dialect) -> list[list[Matcher]]:
        # One selector per label spelling: a cluster may mix Hostname and hostname nodes.
        found = [[Matcher.one_of(label, by_uuid), *_cluster(catalogue)]
                 for label in d.uuid_labels] if by_uuid else []
        if by_index:
            hosts = {i.host for i in by_index}
            gpus = {str(i.gpu) for i in by_index}
            found += [[Matcher.one_of(label, hosts), Matcher.one_of(d.gpu_label, gpus),
                       *_cluster(catalogue)] for label in d.host_labels]
        return found

    return _fetch(client, catalogue, window, measures, "host", alternatives, intervals, stats,
                  by_uuid)


def fetch_nodes(client: PrometheusClient, catalogue: Catalogue, hosts: Iterable[str],
                telemetry: JobTelemetry) -> None:
    """Add node_exporter CPU, memory, network, InfiniBand and file-system series for the
    job's hosts."""
    hosts = sorted(set(hosts))
    if not hosts:
        return
    p = telemetry.plan
    sel = [Matcher.host(catalogue.node_label, hosts), *_cluster(catalogue)]
    # The bucket plus one scrape, less a millisecond: the samples from the previous point's
    # time to this one, so each adjacent pair is counted once, as the file path does (range
    # selectors include both ends in Prometheus 2). Four scrapes, as it was, spread the previous
    # job's traffic on a node over the next job's first points. In seconds: written for the
    # cluster's store so that it reads the same samples there (promql.counter_call).
    rate_window = p.step + catalogue.scrape_interval - 0.001
    failures: list[QueryFailure] = []
    for name, (expr, _unit) in catalogue.node_queries(sel, rate_window).items():
        result = read_narrowly(failures, name, expr, partial(
            client.query_range, expr, p.first, p.window.end, p.step))
        if result is None:
            continue
        telemetry.warnings.extend(result.warnings)
        for series in result.series:
            host = host_of(series.labels.get(catalogue.node_label, ""))
            telemetry.nodes.setdefault(host, {})[name] = series
    telemetry.failed(failures)


# --- Internals -------------------------------------------------------------------------


def _cluster(catalogue: Catalogue) -> list[Matcher]:
    if catalogue.cluster_label and catalogue.cluster_value:
        return [Matcher.eq(catalogue.cluster_label, catalogue.cluster_value)]
    return []


def _fetch(client: PrometheusClient, catalogue: Catalogue, window: Window,
           measures: Sequence[str], binding: str,
           alternatives: Callable[[Dialect], list[list[Matcher]]],
           intervals: Sequence[GpuInterval] | None, stats: bool,
           by_uuid: Mapping[str, GpuKey] | None = None) -> JobTelemetry:
    p = plan(window, catalogue.scrape_interval)
    telemetry = JobTelemetry(p, binding)
    pairs: list[tuple[str, Series]] = []
    failures: list[QueryFailure] = []
    # avg_over_time per window (w = step - 1 ms); a running total's rate over the window
    # and one scrape before it, so the window's first sample has a predecessor
    window_ = duration(p.step - 0.001) if p.step > 0.002 else duration(p.step)
    rate_window = p.step + catalogue.scrape_interval - 0.001
    asked = catalogue.pairs(measures)
    first = catalogue.dialects[0].name
    for measure, dialect, spec in asked:
        # One query per metric: functions drop __name__, so a regex over several
        # metrics fails with "vector cannot contain metrics with the same labelset".
        # A query that fails costs its measure only (read_narrowly); all of them: raised.
        expr = windowed(spec, alternatives(dialect), window_, rate_window,
                        store=catalogue.store)
        name = measure if dialect.name == first else f"{measure} ({dialect.name})"
        result = read_narrowly(failures, name, expr, partial(
            client.query_range, expr, p.first, p.window.end, p.step, stats=stats))
        if result is None:
            continue
        telemetry.warnings.extend(result.warnings)
        telemetry.peak_samples = max(telemetry.peak_samples, result.peak_samples or 0)
        # the answer has no names (functions drop them): the exporter's name says which
        # units and labels it is in
        pairs += [(measure, Series(spec.name, s.labels, s.points)) for s in result.series]
    if (failed := all_failed(failures, len(asked), "GPU metric")) is not None:
        raise failed
    telemetry.failed(failures)
    key_of = _keyer(catalogue, by_uuid or {})
    grouped = group_by_gpu(pairs, catalogue, key_of)
    telemetry.uuids = _uuids(pairs, catalogue, key_of)
    telemetry.gpus = _inside(grouped, intervals, p) if intervals is not None else grouped
    telemetry.vendors = {key: catalogue.vendor_of(m) for key, m in telemetry.gpus.items()}
    telemetry.models = catalogue.models_of(telemetry.gpus)
    return telemetry


def _keyer(catalogue: Catalogue, by_uuid: Mapping[str, GpuKey]
           ) -> Callable[[Series], GpuKey | None]:
    """The GPU a series is filed under: the held interval's, when its UUID says so."""
    if not by_uuid:
        return catalogue.gpu_key

    def key_of(series: Series) -> GpuKey | None:
        uuid = catalogue.uuid_of(series)
        return by_uuid.get(uuid) or catalogue.gpu_key(series)

    return key_of


def _uuids(pairs: list[tuple[str, Series]], catalogue: Catalogue,
           key_of: Callable[[Series], GpuKey | None]) -> dict[GpuKey, str]:
    uuids: dict[GpuKey, str] = {}
    for _measure, series in pairs:
        uuid = catalogue.uuid_of(series)
        if uuid and (key := key_of(series)) is not None:
            uuids.setdefault(key, uuid)
    return uuids


def _inside(grouped: dict[GpuKey, dict[str, Series]], intervals: Sequence[GpuInterval],
            p: Plan) -> dict[GpuKey, dict[str, Series]]:
    """Keep held GPUs only, and only windows whose middle lies in a held interval."""
    held: dict[GpuKey, list[GpuInterval]] = defaultdict(list)
    for interval in intervals:
        held[interval.key].append(interval)
    kept: dict[GpuKey, dict[str, Series]] = {}
    for key, measures in grouped.items():
        if key not in held:
            continue
        spans = held[key]
        kept[key] = {
            m: Series(s.metric, s.labels, tuple(
                (t, v) for t, v in s.points
                if any(i.start <= t - p.step / 2 <= i.end for i in spans)))
            for m, s in measures.items()
        }
    return kept


# --- Several stores (issue 29) ---------------------------------------------------------


def keep_hosts(telemetry: JobTelemetry, keep: Callable[[str], bool]) -> JobTelemetry:
    """``telemetry`` cut to the hosts ``keep`` accepts: a store's answer kept to the nodes
    it answers for, so two stores that both hold a node do not count it twice."""
    kept = JobTelemetry(telemetry.plan, telemetry.binding, warnings=list(telemetry.warnings),
                        peak_samples=telemetry.peak_samples,
                        failures=list(telemetry.failures))
    kept.gpus = {k: v for k, v in telemetry.gpus.items() if keep(k.host)}
    kept.uuids = {k: v for k, v in telemetry.uuids.items() if keep(k.host)}
    kept.vendors = {k: v for k, v in telemetry.vendors.items() if keep(k.host)}
    kept.models = {k: v for k, v in telemetry.models.items() if keep(k.host)}
    kept.nodes = {h: v for h, v in telemetry.nodes.items() if keep(h)}
    return kept


def merged(parts: Sequence[JobTelemetry]) -> JobTelemetry:
    """One job's telemetry from several stores, each holding other nodes (same plan).

    Bound "by label" when any store found the job's label: a store that fell back to the
    held GPUs is then left out, as one store holding every node would have read it (the
    host fallback runs only when no GPU carries the job's label)."""
    if not parts:
        raise ValueError("nothing to merge")
    labelled = [p for p in parts if p.binding == "label" and p.gpus]
    binding = "label" if labelled else parts[0].binding
    whole = JobTelemetry(parts[0].plan, binding)
    for part in parts:
        if binding == "label" and part.binding != "label" and part.gpus:
            continue
        whole.gpus.update(part.gpus)
        whole.uuids.update(part.uuids)
        whole.vendors.update(part.vendors)
        whole.models.update(part.models)
        whole.nodes.update(part.nodes)
        whole.warnings += part.warnings
        whole.failures += part.failures
        whole.peak_samples = max(whole.peak_samples, part.peak_samples)
    return whole
