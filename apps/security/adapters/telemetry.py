"""Telemetry for security rules: every GPU and node of a cluster over a window.

Two sources give the same ``RawTelemetry``:

- :func:`from_prometheus`: one range query per GPU measure (``avg_over_time`` per step, no
  job filter: the free GPUs are the point) and a few node queries (InfiniBand bytes per
  device, Ethernet egress, transport and link errors, partition-key errors) as rates, and
  CPU: cores and busy cores from node_exporter's per-core idle seconds;
- :func:`from_openmetrics`: the same families read from OpenMetrics files (the simulator's
  demo path), counters turned into rates with ``counter_rate``.

Every label value that reaches PromQL goes through ``promql`` (quoted, allow-listed).
Failures are ``AdapterError`` (``TransientAdapterError`` when a retry can help).
"""

from __future__ import annotations

import calendar
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from pathlib import Path

from apps.analysis.timeseries import Point, Series, counter_rate
from apps.clusters.adapters.catalogue import Catalogue, MetricSpec, raw_points, windowed
from apps.clusters.adapters.prometheus import (
    PrometheusClient,
    QueryFailure,
    all_failed,
    read_narrowly,
)
from apps.clusters.adapters.promql import (
    Matcher,
    counter_sum,
    deduplicated,
    duration,
    host_of,
    selector,
)
from apps.core.errors import AdapterError
from apps.jobs.adapters.openmetrics import read_series

GPU_MEASURES = ("gpu_util", "fb_used", "sm_active", "tensor_active", "power", "nvlink_tx")
INSTANT_MEASURE = "fb_used"  # read at instants: who holds a GPU at the same moment
# node measure -> (families, how: "rate" per second, or "increase" per bucket)
NODE_FAMILIES: dict[str, tuple[tuple[str, ...], str]] = {
    "ib": (("node_infiniband_port_data_received_bytes_total",
            "node_infiniband_port_data_transmitted_bytes_total"), "rate"),
    "egress": (("node_network_transmit_bytes_total",), "rate"),
    "transport_errors": (("node_infiniband_out_of_sequence_packets_received_total",
                          "node_infiniband_duplicate_requests_packets_total",
                          "node_infiniband_packet_sequence_errors_total"), "rate"),
    "link_errors": (("node_infiniband_symbol_error_total",
                     "node_infiniband_link_error_recovery_total"), "rate"),
    "pkey_errors": (("node_infiniband_port_constraint_errors_received_total",
                     "node_infiniband_port_constraint_errors_transmitted_total"), "increase"),
}
_FAMILY_MEASURE = {family: measure for measure, (families, _) in NODE_FAMILIES.items()
                   for family in families}
# CPU: node_exporter's per-core seconds; only mode="idle" is read (busy = cores - idle), so a
# site that keeps only that mode (metric_relabel_configs) gives the same answer.
CPU_FAMILY = "node_cpu_seconds_total"
# Ethernet egress leaves out the loopback and InfiniBand's IPoIB devices.
_NOT_EGRESS = re.compile(r"^(lo|ib.*)$")
_FILE_TIME = re.compile(r"^(\d{8})T(\d{4})Z")
GpuSink = Callable[[str, Series], None]  # (GPU measure, series): where a read's GPU series go


@dataclass
class RawTelemetry:
    """GPU series with their labels (``hpc_job`` included) and node rates per measure.

    ``nodes[host][measure]`` are ``(t, value)`` points: per-second rates, or increases per
    bucket for ``pkey_errors``; ``cpu_cores`` and ``cpu_busy`` (cores not idle).
    ``ib_devices[host][device]`` keeps InfiniBand per device,
    so a finding can name the port. ``step`` is the spacing of the data (seconds).
    """

    step: float
    gpus: list[tuple[str, Series]] = field(default_factory=list)
    nodes: dict[str, dict[str, list[Point]]] = field(default_factory=dict)
    ib_devices: dict[str, dict[str, list[Point]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # queries that failed while the others were read: the rules needing them found nothing
    failures: list[QueryFailure] = field(default_factory=list)


# --- Prometheus --------------------------------------------------------------------------------


def from_prometheus(client: PrometheusClient, catalogue: Catalogue, start: float, end: float,
                    step: float, on_gpu: GpuSink | None = None) -> RawTelemetry:
    """Every GPU's measures and every node's rates over ``(start, end]``, one point per step.

    One query per measure; a query Prometheus refuses or times out is noted in
    ``raw.failures`` and the others are read (``read_narrowly``). Raises ``AdapterError``
    when Prometheus cannot be reached (transient) or every query failed.

    Each answer is read as it streams in (``stream_range``). GPU series go to ``on_gpu``
    when given, as ``(measure, series)``, and are not kept in ``raw.gpus``: the caller
    folds them into the frame's buckets (issue 29: at 100,000 GPUs the series held
    together were most of detection's memory). A read that raises has handed some series
    over: the caller drops what it folded.
    """
    raw = RawTelemetry(step)
    sink = on_gpu or (lambda measure, series: raw.gpus.append((measure, series)))
    reads = gpu_reads(catalogue)
    queries = {**gpu_queries(catalogue, step), **node_queries(catalogue, step)}
    for name, expr in queries.items():
        # named after the exporter's series, so its labels are read in its spelling
        each = partial(_gpu_series, sink, *reads[name]) if name in reads else \
            partial(_node_series, raw, catalogue, name)
        result = read_narrowly(raw.failures, name, expr,
                               partial(client.stream_range, expr, start + step, end, step,
                                       each))
        if result is not None:
            raw.warnings.extend(result.warnings)
    _sum_devices(raw)
    _busy_cores(raw)
    if (failed := all_failed(raw.failures, len(queries), "telemetry")) is not None:
        raise failed
    return raw


def _gpu_series(sink: GpuSink, measure: str, spec: MetricSpec, series: Series) -> None:
    sink(measure, _scaled(Series(spec.name, series.labels, series.points), spec.scale))


def gpu_reads(catalogue: Catalogue) -> dict[str, tuple[str, MetricSpec]]:
    """Query name -> (measure, exporter series) for every GPU measure of every exporter the
    cluster runs: the measure's name for the first exporter, ``measure (amd)`` for others
    (one query each: their units and labels differ)."""
    first = catalogue.dialects[0].name
    return {measure if dialect.name == first else f"{measure} ({dialect.name})":
            (measure, spec) for measure, dialect, spec in catalogue.pairs(GPU_MEASURES)}


def gpu_queries(catalogue: Catalogue, step: float) -> dict[str, str]:
    """One query per GPU measure and exporter, without a job filter (the free GPUs are the
    point); older metric names are ``or``-ed in after the current one (same labels: the
    current name wins)."""
    cluster = _cluster(catalogue)
    window = duration(max(step - 0.001, 0.001))
    instant = instant_window(catalogue, step)
    rate_window = step + catalogue.scrape_interval
    store = catalogue.store
    # Memory is read at each instant, not averaged: two jobs' series at one instant then
    # mean two jobs at once (an average would also hold a job that ended mid-step).
    return {name: windowed(spec, [cluster], instant, rate_window, fn="last", store=store)
            if measure == INSTANT_MEASURE else
            windowed(spec, [cluster], window, rate_window, store=store)
            for name, (measure, spec) in gpu_reads(catalogue).items()}


def instant_window(catalogue: Catalogue, step: float) -> str:
    """What "at an instant" reads: the last sample of each series within one scrape
    interval (and a half, for jitter), never more than a step.

    Not a bare selector: that looks back Prometheus' 5-minute lookback delta, so a job
    that ended minutes ago still "holds" the GPU where no staleness marker was written
    (backfilled or remote-written data), and scrapes sparser than 5 minutes (hourly
    telemetry) are missed at most instants.
    """
    return duration(max(min(step, 1.5 * catalogue.scrape_interval) - 0.001, 0.001))


def _cluster(catalogue: Catalogue) -> list[Matcher]:
    if catalogue.cluster_label and catalogue.cluster_value:
        return [Matcher.eq(catalogue.cluster_label, catalogue.cluster_value)]
    return []


def _scaled(series: Series, scale: float) -> Series:
    if scale == 1.0:
        return series
    return Series(series.metric, series.labels, tuple((t, v * scale) for t, v in series.points))


def node_queries(catalogue: Catalogue, step: float) -> dict[str, str]:
    """The PromQL of every node measure (``NODE_FAMILIES``, then CPU) for a window read at
    ``step``: each counter name its own selector (``promql.counter_sum``), since rate()
    drops the name and a port's received and transmitted series share every other label.

    Rates and increases take each bucket plus one scrape interval: every pair of adjacent
    samples whose later one falls in the bucket is inside it (the per-sample rates the
    OpenMetrics path computes, bucket by bucket), and nothing older smears in. (A
    ``4 x scrape`` window, the usual advice for graphs, spread a multi-node job's traffic
    three hours past its end on hourly telemetry.) A counter jump inside the overlap may
    count in two buckets, never in none.
    """
    node, cluster = catalogue.node_label, _cluster(catalogue)
    seconds = step + catalogue.scrape_interval
    queries = {}
    for measure, (families, how) in NODE_FAMILIES.items():
        matchers = [*cluster, Matcher.not_matching("device", "lo|ib.*")] \
            if measure == "egress" else cluster
        by = [node, "device"] if measure == "ib" else [node]
        queries[measure] = counter_sum(families, matchers, seconds, by, fn=how,
                                       store=catalogue.store)
    idle = [Matcher.eq("mode", "idle"), *cluster]
    last = f"last_over_time({selector(CPU_FAMILY, *idle)}[{instant_window(catalogue, step)}])"
    cores = f"count by ({node}) ({deduplicated(last)})"
    queries["cpu_cores"] = cores
    # busy = cores - idle, subtracted by ``_busy_cores``: a ``cores - idle`` query counted
    # the cores a second time (a third of the window's Prometheus time at 10,000 GPUs)
    queries["cpu_idle"] = counter_sum([CPU_FAMILY], idle, seconds, [node],
                                      store=catalogue.store)
    return queries


def _node_series(raw: RawTelemetry, catalogue: Catalogue, measure: str,
                 series: Series) -> None:
    host = host_of(series.labels.get(catalogue.node_label, ""))
    if not host:
        return
    if measure == "ib":
        raw.ib_devices.setdefault(host, {})[series.labels.get("device", "")] = \
            list(series.points)
    else:
        raw.nodes.setdefault(host, {})[measure] = list(series.points)


def _busy_cores(raw: RawTelemetry) -> None:
    """Each node's busy cores: its cores less its idle cores, at the steps both have a value
    (as PromQL's ``cores - idle`` matches them; the same float subtraction)."""
    for measures in raw.nodes.values():
        idle = dict(measures.pop("cpu_idle", ()))
        if idle and "cpu_cores" in measures:
            measures["cpu_busy"] = [(t, n - idle[t]) for t, n in measures["cpu_cores"]
                                    if t in idle]


def _sum_devices(raw: RawTelemetry) -> None:
    for host, devices in raw.ib_devices.items():
        total: dict[float, float] = defaultdict(float)
        for points in devices.values():
            for t, v in points:
                total[t] += v
        raw.nodes.setdefault(host, {})["ib"] = sorted(total.items())


def kept_hosts(raw: RawTelemetry, catalogue: Catalogue, keep: Callable[[str], bool]
               ) -> RawTelemetry:
    """``raw`` cut to the hosts ``keep`` accepts: one store's answer kept to the nodes it
    answers for (issue 29), so a node two stores hold is read once."""
    def host(series: Series) -> str:
        key = catalogue.gpu_key(series)
        return key.host if key is not None else ""

    return RawTelemetry(
        raw.step, [(m, s) for m, s in raw.gpus if keep(host(s))],
        {h: v for h, v in raw.nodes.items() if keep(h)},
        {h: v for h, v in raw.ib_devices.items() if keep(h)},
        list(raw.warnings), list(raw.failures))


def merged_raw(parts: Sequence[RawTelemetry]) -> RawTelemetry:
    """Several stores' telemetry of the same window and step, each for other nodes."""
    if not parts:
        raise ValueError("nothing to merge")
    whole = RawTelemetry(parts[0].step)
    for part in parts:
        whole.gpus += part.gpus
        whole.nodes.update(part.nodes)
        whole.ib_devices.update(part.ib_devices)
        whole.warnings += part.warnings
        whole.failures += part.failures
    return whole


# --- OpenMetrics files -----------------------------------------------------------------------


def telemetry_files(folder: Path, start: float, end: float) -> list[Path]:
    """The ``.om`` files of ``folder`` that may hold samples in ``(start, end]``.

    Files named like the simulator's (``20261101T0000Z.om``, one aligned window each) are
    chosen by name; others are all read (and their samples clipped).
    """
    if not folder.is_dir():
        raise AdapterError(f"{folder}: not a folder of OpenMetrics files", service="openmetrics")
    paths = sorted(p for p in folder.iterdir() if p.suffix == ".om" and p.is_file())
    stamps = [file_start(p) for p in paths]
    if not paths or any(s is None for s in stamps):
        return paths
    kept = []
    for i, path in enumerate(paths):
        begin = stamps[i]
        after = stamps[i + 1] if i + 1 < len(paths) else None
        assert begin is not None
        if begin <= end and (after is None or after > start):
            kept.append(path)
    return kept


def file_start(path: Path) -> float | None:
    """The start of a simulator-style file's window, from its name (None: another name)."""
    match = _FILE_TIME.match(path.name)
    if match is None:
        return None
    return float(calendar.timegm(time.strptime(match[1] + match[2], "%Y%m%d%H%M")))


def from_openmetrics(paths: Sequence[Path], catalogue: Catalogue, start: float,
                     end: float, parsed: dict[Path, list[Series]] | None = None) -> RawTelemetry:
    """The same measures read from OpenMetrics files, samples inside ``(start, end]``
    (counters keep the sample before ``start``, so the first rate is known).

    ``parsed`` keeps each file's wanted series across calls: consecutive windows (a sliced
    backfill) share their edge files, which are then parsed once. The caller bounds it.
    A malformed or truncated file raises ``AdapterError`` naming it and the line.
    """
    gpu_names = {name: m for m, _, spec in catalogue.pairs(GPU_MEASURES) for name in spec.names}
    gpu_points: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Point]] = \
        defaultdict(list)
    counters: dict[tuple[str, str, str, str], list[Point]] = defaultdict(list)
    wanted = set(gpu_names) | set(_FAMILY_MEASURE) | {CPU_FAMILY}
    cache = {} if parsed is None else parsed
    for path in paths:
        if path not in cache:
            cache[path] = _wanted_series(path, wanted)
        _clip_into(cache[path], gpu_names, catalogue, start, end, gpu_points, counters)
    raw = RawTelemetry(_spacing(gpu_points.values()) or catalogue.scrape_interval)
    for (measure, name, labels), points in _gpu_parts(gpu_points, catalogue).items():
        found = catalogue.spec_of(name)
        assert found is not None  # only the catalogue's names were kept
        spec = found[1]
        parts = [Series(name, dict(part), tuple(sorted(p))) for part, p in points]
        kept = tuple(p for p in raw_points(spec, parts) if p[0] > start)
        raw.gpus.append((measure, _scaled(Series(spec.name, dict(labels), kept), spec.scale)))
    _node_rates(counters, catalogue, start, raw)
    return raw


def _gpu_parts(gpu_points: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Point]],
               catalogue: Catalogue) -> dict[tuple[str, str, tuple[tuple[str, str], ...]],
                                             list[tuple[tuple[tuple[str, str], ...],
                                                        list[Point]]]]:
    """Series of one GPU that are parts of one reading (its XGMI links, its clocks) under
    one key, the part label left out (PromQL's ``sum without`` / ``avg without``)."""
    grouped: dict[tuple[str, str, tuple[tuple[str, str], ...]],
                  list[tuple[tuple[tuple[str, str], ...], list[Point]]]] = defaultdict(list)
    for (measure, name, labels), points in gpu_points.items():
        found = catalogue.spec_of(name)
        over = found[1].over if found else ""
        key = tuple((k, v) for k, v in labels if k != over)
        grouped[(measure, name, key)].append((labels, points))
    return grouped


def _wanted_series(path: Path, wanted: set[str]) -> list[Series]:
    """One file's series of the wanted families (parsed once per series by ``read_series``)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as lines:
            return read_series(lines, lambda name, labels: name in wanted)
    except OSError as exc:
        raise AdapterError(f"{path.name}: cannot read ({exc})", service="openmetrics") from exc
    except AdapterError as exc:
        raise AdapterError(f"{path.name}: {exc}", service="openmetrics",
                           detail=exc.detail) from exc


def _clip_into(series_list: list[Series], gpu_names: dict[str, str], catalogue: Catalogue,
               start: float, end: float,
               gpu_points: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Point]],
               counters: dict[tuple[str, str, str, str], list[Point]]) -> None:
    """One file's series clipped to the window; counters keep a margin before it for
    their first rate."""
    margin = 4 * catalogue.scrape_interval + 3600.0
    for series in series_list:
        measure = gpu_names.get(series.metric)
        if measure is not None:
            key = (measure, series.metric, tuple(sorted(series.labels.items())))
            # a running total keeps one sample before the window, for its first rate
            since = start - margin if _is_total(catalogue, series.metric) else start
            gpu_points[key].extend(p for p in series.points if since < p[0] <= end)
            continue
        labels = series.labels
        host = host_of(labels.get(catalogue.node_label, ""))
        if series.metric == CPU_FAMILY:
            if labels.get("mode") != "idle":
                continue
            node_key = (host, CPU_FAMILY, labels.get("cpu", ""), "")
        else:
            node_key = (host, series.metric, labels.get("device", ""), labels.get("port", ""))
        counters[node_key].extend(p for p in series.points if start - margin < p[0] <= end)


def _is_total(catalogue: Catalogue, name: str) -> bool:
    found = catalogue.spec_of(name)
    return found is not None and found[1].reduce == "rate"


def _spacing(series: Iterable[list[Point]]) -> float | None:
    """The sampling interval: the median over series of each one's smallest gap.

    Not a series' median gap: a free GPU's series (no job label) is only written between
    jobs, so its gaps include whole jobs.
    """
    smallest = []
    for points in series:
        times = sorted({t for t, _ in points})
        gaps = [b - a for a, b in pairwise(times) if b > a]
        if gaps:
            smallest.append(min(gaps))
        if len(smallest) >= 200:
            break
    return sorted(smallest)[len(smallest) // 2] if smallest else None


def _node_rates(counters: dict[tuple[str, str, str, str], list[Point]], catalogue: Catalogue,
                start: float, raw: RawTelemetry) -> None:
    per_host: dict[tuple[str, str], dict[float, float]] = defaultdict(lambda: defaultdict(float))
    for (host, family, device, _port), points in counters.items():
        if family == CPU_FAMILY:
            _add_core(per_host, host, [p for p in counter_rate(sorted(points)) if p[0] > start])
            continue
        measure = _FAMILY_MEASURE[family]
        if not host or (measure == "egress" and _NOT_EGRESS.match(device)):
            continue
        ordered = sorted(points)
        rates = counter_rate(ordered)
        if NODE_FAMILIES[measure][1] == "increase":
            rates = tuple((t1, v * (t1 - t0)) for (t0, _), (t1, v) in
                          zip(ordered, rates, strict=False))
        kept = [(t, v) for t, v in rates if t > start]
        if measure == "ib":
            merged = raw.ib_devices.setdefault(host, {}).setdefault(device, [])
            merged.extend(kept)
        else:
            for t, v in kept:
                per_host[(host, measure)][t] += v
    for (host, measure), values in per_host.items():
        raw.nodes.setdefault(host, {})[measure] = sorted(values.items())
    for measures in raw.nodes.values():
        if "cpu_cores" in measures:
            idle = dict(measures.pop("cpu_idle", []))
            measures["cpu_busy"] = [(t, max(n - idle.get(t, 0.0), 0.0))
                                    for t, n in measures["cpu_cores"]]
    _sum_devices(raw)


def _add_core(per_host: dict[tuple[str, str], dict[float, float]], host: str,
              idle_rates: Iterable[Point]) -> None:
    """One core's idle seconds per second, counted into its node's cores and idle cores."""
    if not host:
        return
    for t, v in idle_rates:
        per_host[(host, "cpu_cores")][t] += 1.0
        per_host[(host, "cpu_idle")][t] += min(max(v, 0.0), 1.0)


# --- Queries to show as evidence ---------------------------------------------------------------

_EVIDENCE_MEASURES = {
    "gpu_activity_without_job": ("gpu_util", "fb_used"),
    "gpu_memory_left_after_job": ("fb_used", "gpu_util"),
    "gpu_shared_between_users": ("fb_used",),
    "miner_in_job": ("gpu_util", "tensor_active", "power"),
}
_EVIDENCE_NODE = {
    "ib_traffic_without_multinode_job": "ib", "rdma_transport_errors": "transport_errors",
    "ib_partition_key_violation": "pkey_errors", "miner_in_job": "egress",
}


def evidence_queries(catalogue: Catalogue, rule: str, host: str, gpu: int | None) -> list[str]:
    """PromQL an admin can paste into Prometheus to see what the rule saw (label values
    quoted by ``promql``; empty when the rule reads no telemetry or names no host)."""
    if not host:
        return []
    queries = []
    if gpu is not None:
        for _measure, dialect, spec in catalogue.pairs(_EVIDENCE_MEASURES.get(rule, ())):
            queries += [selector(spec.name, Matcher.eq(label, host),
                                 Matcher.eq(dialect.gpu_label, str(gpu)))
                        for label in dialect.host_labels]
    node_measure = _EVIDENCE_NODE.get(rule)
    if node_measure is not None:
        families, how = NODE_FAMILIES[node_measure]
        # one query per counter: rate() drops the name, so one per name keeps them apart
        queries += [f"{how}({selector(family, Matcher.host(catalogue.node_label, [host]))}[5m])"
                    for family in families]
    return queries
