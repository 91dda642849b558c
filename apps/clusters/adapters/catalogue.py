"""The metric catalogue: which exporter series stand for which portal concept, per cluster.

Defaults follow dcgm-exporter 4.x and node_exporter. A cluster overrides label names and
metric names in ``Cluster.metric_labels``, e.g.::

    {"job": "jobid", "hostname": ["Hostname", "hostname"], "uuid": "uuid",
     "cluster": "cluster", "cluster_value": "alpha", "node": "instance",
     "scrape_interval": 30, "metrics": {"gpu_util": "nvidia_gpu_duty_cycle"},
     "file_system": {"read": ["lustre_client_read_bytes_total"]}}

Activity falls back SM active -> GR engine active -> GPU util (duty cycle), and every
result names the measure it used: dcgm-exporter's default counters have left SM_ACTIVE
out since 4.0 (``deploy/prometheus/dcgm-collectors.csv`` turns it back on).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from apps.analysis.timeseries import GpuKey, Series, merge
from apps.clusters.adapters.promql import (
    Matcher,
    UnsafeValue,
    check_label,
    check_metric,
    counter_sum,
    deduplicated,
    host_of,
    selector,
)


@dataclass(frozen=True)
class MetricSpec:
    """One exporter series: its name, the factor to the portal's unit, and that unit.

    ``aliases`` are older names of the same field (dcgm-exporter renamed throttle reasons to
    clock event reasons); ``reduce`` is how samples combine within a window: ``avg`` for
    measures, ``max`` for codes and counters (an average of XID codes means nothing).
    """

    name: str
    scale: float = 1.0
    unit: str = "ratio"
    aliases: tuple[str, ...] = ()
    reduce: str = "avg"

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


# Portal measure -> dcgm-exporter field. Ratios are 0..1 in the portal.
GPU_METRICS: dict[str, MetricSpec] = {
    "gpu_util": MetricSpec("DCGM_FI_DEV_GPU_UTIL", 0.01),
    "sm_active": MetricSpec("DCGM_FI_PROF_SM_ACTIVE"),
    "sm_occupancy": MetricSpec("DCGM_FI_PROF_SM_OCCUPANCY"),
    "gr_engine_active": MetricSpec("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    "tensor_active": MetricSpec("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
    "dram_active": MetricSpec("DCGM_FI_PROF_DRAM_ACTIVE"),
    "fp64_active": MetricSpec("DCGM_FI_PROF_PIPE_FP64_ACTIVE"),
    "fb_used": MetricSpec("DCGM_FI_DEV_FB_USED", 1.0, "MiB"),
    "fb_free": MetricSpec("DCGM_FI_DEV_FB_FREE", 1.0, "MiB"),
    "power": MetricSpec("DCGM_FI_DEV_POWER_USAGE", 1.0, "W"),
    "temperature": MetricSpec("DCGM_FI_DEV_GPU_TEMP", 1.0, "°C"),
    "sm_clock": MetricSpec("DCGM_FI_DEV_SM_CLOCK", 1.0, "MHz"),
    # A bitmask: max_over_time keeps the highest bits, where the thermal (0x20, 0x40) and
    # power-brake (0x80) reasons sit; reading raw samples (OpenMetrics) ORs them exactly.
    "throttle_reasons": MetricSpec("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 1.0, "bitmask",
                                   aliases=("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",),
                                   reduce="max"),
    "xid": MetricSpec("DCGM_FI_DEV_XID_ERRORS", 1.0, "code", reduce="max"),
    "ecc_sbe": MetricSpec("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 1.0, "count", reduce="max"),
    "ecc_dbe": MetricSpec("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1.0, "count", reduce="max"),
    "nvlink_tx": MetricSpec("DCGM_FI_PROF_NVLINK_TX_BYTES", 1.0, "B/s"),
    "nvlink_rx": MetricSpec("DCGM_FI_PROF_NVLINK_RX_BYTES", 1.0, "B/s"),
    "pcie_tx": MetricSpec("DCGM_FI_PROF_PCIE_TX_BYTES", 1.0, "B/s"),
    "pcie_rx": MetricSpec("DCGM_FI_PROF_PCIE_RX_BYTES", 1.0, "B/s"),
}
ACTIVITY_FALLBACK = ("sm_active", "gr_engine_active", "gpu_util")
# What an archive fetches for each GPU of a job (the rest is for the detail charts).
JOB_MEASURES = ("gpu_util", "sm_active", "gr_engine_active", "tensor_active", "dram_active",
                "fb_used", "power", "nvlink_tx", "pcie_tx",
                # health and traffic: straggler evidence, diagnosis, the per-GPU charts
                "sm_occupancy", "fp64_active", "temperature", "sm_clock", "throttle_reasons",
                "xid", "ecc_sbe", "ecc_dbe", "nvlink_rx", "pcie_rx")

# Node series (node_exporter): measure -> unit. The PromQL comes from NODE_SAMPLES below
# (:func:`node_query`), so the Prometheus and the raw-sample paths read the same families
# the same way; values are per node, shared by every job there.
NODE_UNITS: dict[str, str] = {
    "cpu_busy": "ratio", "mem_used": "B", "net_rx": "B/s", "net_tx": "B/s", "ib_rx": "B/s",
    "ib_tx": "B/s", "ib_wait": "ticks/s", "ib_errors": "count", "ib_rate_min": "B/s",
    "ib_rate_max": "B/s", "fs_read": "B/s", "fs_write": "B/s",
}
# Network file systems: byte counters summed over a node's mounts (``fs_read``, ``fs_write``
# in B/s). node_exporter's mountstats collector by default (off unless started with
# --collector.mountstats); a site with Lustre or GPFS clients names its own counters in
# ``metric_labels`` (``"file_system": {"read": [...], "write": [...]}``).
FS_COUNTERS: dict[str, tuple[str, ...]] = {
    "fs_read": ("node_mountstats_nfs_read_bytes_total",),
    "fs_write": ("node_mountstats_nfs_write_bytes_total",),
}

# The same node measures read from raw node_exporter samples (OpenMetrics files):
# measure -> (families as written, how). ``rate``: a counter's per-second rate summed over
# devices; ``increase``: the same, summed; ``min``/``max``: a gauge over devices;
# ``busy``: 1 - the mean over CPUs of the idle counter's rate (``cpu_busy`` above);
# ``difference``: the first family minus the second per timestamp (``mem_used``).
NODE_SAMPLES: dict[str, tuple[tuple[str, ...], str]] = {
    "cpu_busy": (("node_cpu_seconds_total",), "busy"),
    "mem_used": (("node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes"),
                 "difference"),
    "net_rx": (("node_network_receive_bytes_total",), "rate"),
    "net_tx": (("node_network_transmit_bytes_total",), "rate"),
    "ib_rx": (("node_infiniband_port_data_received_bytes_total",), "rate"),
    "ib_tx": (("node_infiniband_port_data_transmitted_bytes_total",), "rate"),
    "ib_wait": (("node_infiniband_port_transmit_wait_total",), "rate"),
    "ib_errors": (("node_infiniband_link_error_recovery_total",
                   "node_infiniband_link_downed_total"), "increase"),
    "ib_rate_min": (("node_infiniband_rate_bytes_per_second",), "min"),
    "ib_rate_max": (("node_infiniband_rate_bytes_per_second",), "max"),
}
# The label matchers of the node measures (both paths): family -> (label, "=" or "!=",
# value). Only idle CPU time counts for ``busy``; the loopback device is not traffic.
NODE_SAMPLE_MATCHERS: dict[str, tuple[str, str, str]] = {
    "node_cpu_seconds_total": ("mode", "=", "idle"),
    "node_network_receive_bytes_total": ("device", "!=", "lo"),
    "node_network_transmit_bytes_total": ("device", "!=", "lo"),
}


def node_query(how: str, families: Sequence[str], node: str, sel: Sequence[Matcher],
               window: str) -> str:
    """The PromQL of one node measure over the matchers ``sel``, grouped by ``node``.

    Counters (``rate``, ``increase``, ``busy``) go through ``promql.counter_sum``: one
    selector per name (rate() drops the name, and the received and transmitted series
    of a port share every other label), a target scraped twice counted once.
    """
    def matchers(family: str) -> list[Matcher]:
        rule = NODE_SAMPLE_MATCHERS.get(family)
        return [*sel, Matcher.from_tuple(rule)] if rule else list(sel)

    if how in ("rate", "increase"):
        if len({tuple(matchers(f)) for f in families}) != 1:
            raise ValueError("the families of one measure must share their matchers")
        return counter_sum(families, matchers(families[0]), window, [node], fn=how)
    if how == "busy":
        (family,) = families
        idle = counter_sum([family], matchers(family), window, [node, "cpu"])
        return f"1 - avg by ({node}) ({idle})"
    if how == "difference":
        total, available = families
        return (f"max by ({node}) ({deduplicated(selector(total, *matchers(total)))} - "
                f"{deduplicated(selector(available, *matchers(available)))})")
    if how in ("min", "max"):
        (family,) = families
        return f"{how} by ({node}) ({selector(family, *matchers(family))})"
    raise ValueError(f"unknown node measure kind {how!r}")


def node_sample_wanted(family: str, labels: Mapping[str, str]) -> bool:
    """Whether a raw node_exporter sample of ``family`` enters its measure."""
    matcher = NODE_SAMPLE_MATCHERS.get(family)
    if matcher is None:
        return True
    label, op, value = matcher
    return (labels.get(label, "") == value) is (op == "=")


class CatalogueError(ValueError):
    """``Cluster.metric_labels`` holds something unusable; the message names the key."""


@dataclass(frozen=True)
class Catalogue:
    """Label and metric names for one cluster's exporters."""

    job_label: str = "hpc_job"
    host_labels: tuple[str, ...] = ("Hostname", "hostname")
    gpu_label: str = "gpu"
    uuid_labels: tuple[str, ...] = ("UUID", "uuid")
    node_label: str = "instance"
    cluster_label: str = ""
    cluster_value: str = ""
    scrape_interval: float = 30.0
    metrics: Mapping[str, MetricSpec] = field(default_factory=lambda: dict(GPU_METRICS))
    file_system: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(FS_COUNTERS))

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None) -> Catalogue:
        """Build from ``Cluster.metric_labels``; unknown keys and bad names are errors."""
        config = dict(config or {})
        known = {"job", "hostname", "gpu", "uuid", "node", "cluster", "cluster_value",
                 "scrape_interval", "metrics", "file_system"}
        unknown = sorted(set(config) - known)
        if unknown:
            raise CatalogueError(f"metric_labels: unknown key(s) {', '.join(unknown)}")
        base = cls()
        try:
            return replace(
                base,
                job_label=_label(config.get("job", base.job_label), "job"),
                host_labels=_labels(config.get("hostname", base.host_labels), "hostname"),
                gpu_label=_label(config.get("gpu", base.gpu_label), "gpu"),
                uuid_labels=_labels(config.get("uuid", base.uuid_labels), "uuid"),
                node_label=_label(config.get("node", base.node_label), "node"),
                cluster_label=_label(config.get("cluster", ""), "cluster", allow_empty=True),
                cluster_value=str(config.get("cluster_value", "")),
                scrape_interval=_positive(config.get("scrape_interval", 30), "scrape_interval"),
                metrics=_metrics(config.get("metrics", {})),
                file_system=_file_system(config.get("file_system", {})),
            )
        except UnsafeValue as exc:
            raise CatalogueError(f"metric_labels: {exc}") from None

    def metric(self, measure: str) -> MetricSpec:
        return self.metrics[measure]

    def node_queries(self, sel: Sequence[Matcher] = (), window: str = "5m"
                     ) -> dict[str, tuple[str, str]]:
        """Measure -> (PromQL, unit) for the node series over the matchers ``sel``: the
        node_exporter measures and this cluster's file-system counters, by node label."""
        return {measure: (node_query(how, families, self.node_label, sel, window),
                          NODE_UNITS[measure])
                for measure, (families, how) in self.node_samples.items()}

    @cached_property
    def node_samples(self) -> dict[str, tuple[tuple[str, ...], str]]:
        """NODE_SAMPLES and the file-system counters, for raw samples (OpenMetrics files)."""
        return {**NODE_SAMPLES, **{m: (names, "rate") for m, names in self.file_system.items()}}

    @cached_property
    def node_families(self) -> dict[str, str]:
        """node_exporter family (as written) -> the node measure it enters."""
        return {family: measure for measure, (families, _) in self.node_samples.items()
                for family in families}

    def measure_of(self, metric_name: str) -> str | None:
        """Which measure an exporter series name (or an older alias) stands for."""
        return self._by_name.get(metric_name)

    @cached_property
    def _by_name(self) -> dict[str, str]:
        # first measure wins, as the former scan in declaration order did
        by_name: dict[str, str] = {}
        for measure, spec in self.metrics.items():
            for name in spec.names:
                by_name.setdefault(name, measure)
        return by_name

    def gpu_key(self, series: Series) -> GpuKey | None:
        """The GPU a dcgm series belongs to, or None when it lacks host or index."""
        # Without a host label (dcgm-exporter --no-hostname), fall back to the scrape target.
        host = series.label(*self.host_labels) or \
            host_of(series.labels.get(self.node_label, ""))
        index = series.labels.get(self.gpu_label, "")
        if not host or not index.isdigit():
            return None
        return GpuKey(host, int(index))


def group_by_gpu(pairs: Iterable[tuple[str, Series]], catalogue: Catalogue,
                 key_of: Callable[[Series], GpuKey | None] | None = None
                 ) -> dict[GpuKey, dict[str, Series]]:
    """``(measure, series)`` pairs -> one merged, scaled series per GPU and measure.

    The same function serves Prometheus answers and OpenMetrics files, so both reach the
    efficiency maths in the same shape and units (GPU util % becomes a 0..1 ratio).
    ``key_of`` names a series' GPU (default: its host and index labels).
    """
    key_of = key_of or catalogue.gpu_key
    buckets: dict[GpuKey, dict[str, list[Series]]] = defaultdict(lambda: defaultdict(list))
    for measure, series in pairs:
        key = key_of(series)
        if key is not None:
            buckets[key][measure].append(series)
    grouped: dict[GpuKey, dict[str, Series]] = {}
    for key, measures in buckets.items():
        grouped[key] = {m: _scaled(m, parts, catalogue) for m, parts in measures.items()}
    return grouped


def gpu_uuid(series: Iterable[Series], catalogue: Catalogue) -> str:
    for item in series:
        uuid = item.label(*catalogue.uuid_labels)
        if uuid:
            return uuid
    return ""


def _scaled(measure: str, parts: list[Series], catalogue: Catalogue) -> Series:
    scale = catalogue.metric(measure).scale
    points = merge(parts)
    if scale != 1.0:
        points = tuple((t, v * scale) for t, v in points)
    first = parts[0]
    return Series(catalogue.metric(measure).name, dict(first.labels), points)


# --- Config checks ---------------------------------------------------------------------


def _label(value: Any, key: str, allow_empty: bool = False) -> str:
    if allow_empty and value in ("", None):
        return ""
    if not isinstance(value, str):
        raise CatalogueError(f"metric_labels.{key}: expected a label name, got {value!r}")
    return check_label(value)


def _labels(value: Any, key: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else list(value or [])
    if not items:
        raise CatalogueError(f"metric_labels.{key}: needs at least one label name")
    return tuple(_label(item, key) for item in items)


def _positive(value: Any, key: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CatalogueError(f"metric_labels.{key}: expected seconds, got {value!r}") from None
    if number <= 0:
        raise CatalogueError(f"metric_labels.{key}: must be positive")
    return number


def _file_system(overrides: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(overrides, Mapping):
        raise CatalogueError('metric_labels.file_system: expected {"read": [counter names], '
                             '"write": [...]}')
    counters = dict(FS_COUNTERS)
    for direction, names in overrides.items():
        if direction not in ("read", "write"):
            raise CatalogueError(f"metric_labels.file_system: unknown key {direction!r} "
                                 "(read, write)")
        items = [names] if isinstance(names, str) else list(names or [])
        if not items:
            raise CatalogueError(f"metric_labels.file_system.{direction}: needs a counter name")
        counters[f"fs_{direction}"] = tuple(check_metric(str(name)) for name in items)
    return counters


def _metrics(overrides: Any) -> dict[str, MetricSpec]:
    if not isinstance(overrides, Mapping):
        raise CatalogueError("metric_labels.metrics: expected {measure: metric name}")
    metrics = dict(GPU_METRICS)
    for measure, name in overrides.items():
        if measure not in metrics:
            raise CatalogueError(f"metric_labels.metrics: unknown measure {measure!r}")
        metrics[measure] = replace(metrics[measure], name=check_metric(str(name)))
    return metrics
