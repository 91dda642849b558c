"""The metric catalogue: which exporter series stand for which portal concept, per cluster.

Defaults follow dcgm-exporter 4.x and node_exporter. A cluster overrides label names and
metric names in ``Cluster.metric_labels``, e.g.::

    {"job": "jobid", "hostname": ["Hostname", "hostname"], "uuid": "uuid",
     "cluster": "cluster", "cluster_value": "alpha", "node": "instance",
     "scrape_interval": 30, "metrics": {"gpu_util": "nvidia_gpu_duty_cycle"},
     "file_system": {"read": ["lustre_client_read_bytes_total"]},
     "exporters": ["dcgm", "amd"], "amd": {"prefix": "amd_", "job": "job_id"}}

``exporters`` lists the GPU exporters the cluster runs (``fields.DIALECTS``: dcgm-exporter,
AMD's Device Metrics Exporter); a cluster mixing NVIDIA and AMD nodes lists both, and each
GPU is read in its own exporter's names and labels (``fields.py``). The top-level label and
metric keys are dcgm-exporter's; ``amd`` holds the AMD exporter's (``prefix``, ``job``,
``hostname``, ``gpu``, ``uuid``, ``metrics``).

Activity falls back SM active -> GR engine active -> GPU util (duty cycle), and every
result names the measure it used: dcgm-exporter's default counters have left SM_ACTIVE
out since 4.0 (``deploy/prometheus/dcgm-collectors.csv`` turns it back on); AMD's
``gpu_prof_sm_active`` needs the exporter's ProfilerMetrics.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from apps.analysis.timeseries import GpuKey, Point, Series, combine, counter_rate, merge
from apps.analysis.vendors import joined
from apps.clusters.adapters.fields import (
    ACTIVITY_FALLBACK,
    AMD,
    DCGM,
    DCGM_METRICS,
    DIALECTS,
    JOB_MEASURES,
    Dialect,
    MetricSpec,
)
from apps.clusters.adapters.node_samples import (
    FS_COUNTERS,
    NODE_SAMPLES,
    NODE_UNITS,
    family_name,
    node_query,
)
from apps.clusters.adapters.promql import (
    Matcher,
    UnsafeValue,
    check_label,
    check_metric,
    check_store,
    counter_call,
    host_of,
    selector,
)

# dcgm-exporter's table under its former name (the catalogue's default ``metrics``)
GPU_METRICS = DCGM_METRICS
__all__ = ["ACTIVITY_FALLBACK", "GPU_METRICS", "JOB_MEASURES", "Catalogue", "CatalogueError",
           "Dialect", "MetricSpec", "group_by_gpu", "windowed"]

class CatalogueError(ValueError):
    """``Cluster.metric_labels`` holds something unusable; the message names the key."""


@dataclass(frozen=True)
class Catalogue:
    """Label and metric names for one cluster's exporters.

    The label and metric fields are dcgm-exporter's; ``amd`` is the AMD exporter's dialect,
    read where ``exporters`` lists it (:attr:`dialects`).
    """

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
    exporters: tuple[str, ...] = ("dcgm",)
    amd: Dialect = AMD
    store: str = "prometheus"  # the query engine: promql.STORES, docs/metrics.md "Stores"

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | None,
                    defaults: Mapping[str, Any] | None = None) -> Catalogue:
        """Build from ``Cluster.metric_labels``; unknown keys and bad names are errors.

        ``defaults`` are the site's (settings): ``exporters`` and the AMD ``prefix``, used
        where the cluster does not set them.
        """
        config = dict(config or {})
        known = {"job", "hostname", "gpu", "uuid", "node", "cluster", "cluster_value",
                 "scrape_interval", "metrics", "file_system", "exporters", "amd", "store"}
        unknown = sorted(set(config) - known)
        if unknown:
            raise CatalogueError(f"metric_labels: unknown key(s) {', '.join(unknown)}")
        site = dict(defaults or {})
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
                metrics=_metrics(config.get("metrics", {}), GPU_METRICS, "metrics"),
                file_system=_file_system(config.get("file_system", {})),
                exporters=_exporters(config.get("exporters", site.get("exporters"))),
                amd=_amd(config.get("amd", {}), str(site.get("amd_prefix") or "")),
                store=check_store(config.get("store", base.store)),
            )
        except UnsafeValue as exc:
            raise CatalogueError(f"metric_labels: {exc}") from None

    def metric(self, measure: str) -> MetricSpec:
        """dcgm-exporter's series of ``measure`` (see :meth:`pairs` for every exporter's)."""
        return self.metrics[measure]

    @cached_property
    def dialects(self) -> tuple[Dialect, ...]:
        """The exporters this cluster runs, dcgm-exporter's with this catalogue's names."""
        dcgm = replace(DCGM, job_label=self.job_label, host_labels=self.host_labels,
                       gpu_label=self.gpu_label, uuid_labels=self.uuid_labels,
                       metrics=self.metrics)
        mine = {"dcgm": dcgm, "amd": self.amd}
        return tuple(mine[name] for name in self.exporters)

    def pairs(self, measures: Iterable[str]) -> list[tuple[str, Dialect, MetricSpec]]:
        """``(measure, dialect, series)`` for each measure an exporter here has: one query
        each (their units and labels differ, so each is scaled and keyed on its own)."""
        return [(m, d, d.metrics[m]) for m in measures for d in self.dialects if m in d.metrics]

    def node_queries(self, sel: Sequence[Matcher] = (), window: str | float = "5m"
                     ) -> dict[str, tuple[str, str]]:
        """Measure -> (PromQL, unit) for the node series over the matchers ``sel``: the
        node_exporter measures and this cluster's file-system counters, by node label.
        ``window`` in seconds reads counters as Prometheus would over that range, on this
        cluster's store (``promql.counter_call``); a PromQL duration is used as it is."""
        return {measure: (node_query(how, families, self.node_label, sel, window,
                                     self.store), NODE_UNITS[measure])
                for measure, (families, how) in self.node_samples.items()}

    @cached_property
    def node_samples(self) -> dict[str, tuple[tuple[str, ...], str]]:
        """NODE_SAMPLES and the file-system counters, for raw samples (OpenMetrics files)."""
        return {**NODE_SAMPLES, **{m: (names, "rate") for m, names in self.file_system.items()}}

    @cached_property
    def node_families(self) -> dict[str, str]:
        """node_exporter family key (NODE_SAMPLE_MATCHERS) -> the node measure it enters."""
        return {family: measure for measure, (families, _) in self.node_samples.items()
                for family in families}

    @cached_property
    def node_keys(self) -> dict[str, tuple[str, ...]]:
        """Metric name (as written) -> the family keys it may enter (CPU time: two modes)."""
        keys: dict[str, tuple[str, ...]] = {}
        for key in self.node_families:
            keys[family_name(key)] = (*keys.get(family_name(key), ()), key)
        return keys

    def measure_of(self, metric_name: str) -> str | None:
        """Which measure an exporter series name (or an older alias) stands for."""
        found = self._by_name.get(metric_name)
        return found[0] if found else None

    def spec_of(self, metric_name: str) -> tuple[Dialect, MetricSpec] | None:
        """The exporter and series definition a series name belongs to."""
        found = self._by_name.get(metric_name)
        return (found[1], found[1].metrics[found[0]]) if found else None

    @cached_property
    def _by_name(self) -> dict[str, tuple[str, Dialect]]:
        # first measure wins, as the former scan in declaration order did
        by_name: dict[str, tuple[str, Dialect]] = {}
        for dialect in self.dialects:
            for measure, spec in dialect.metrics.items():
                for name in spec.names:
                    by_name.setdefault(name, (measure, dialect))
        return by_name

    def dialect_of(self, series: Series) -> Dialect:
        """The exporter a series comes from: by its name, else (a function's answer, the
        name dropped) by the GPU label it carries; the first exporter otherwise."""
        found = self._by_name.get(series.metric)
        if found:
            return found[1]
        for dialect in self.dialects:
            if dialect.gpu_label in series.labels:
                return dialect
        return self.dialects[0]

    def gpu_key(self, series: Series) -> GpuKey | None:
        """The GPU a series belongs to, or None when it lacks host or index."""
        host = self.series_host(series)
        index = series.labels.get(self.dialect_of(series).gpu_label, "")
        if not host or not index.isdigit():
            return None
        return GpuKey(host, int(index))

    def series_host(self, series: Series) -> str:
        """The node a series is about: its exporter's host label, else the scrape target's
        host (dcgm-exporter --no-hostname, node_exporter); '' when it has neither."""
        return series.label(*self.dialect_of(series).host_labels) or \
            host_of(series.labels.get(self.node_label, ""))

    def job_of(self, series: Series) -> str:
        """The Slurm job a GPU series is labelled with ('' when none)."""
        return series.labels.get(self.dialect_of(series).job_label, "")

    def uuid_of(self, series: Series) -> str:
        return series.label(*self.dialect_of(series).uuid_labels)

    def model_of(self, series: Series) -> str:
        return series.labels.get(self.dialect_of(series).model_label, "")

    def models_of(self, gpus: Mapping[GpuKey, Mapping[str, Series]]) -> dict[GpuKey, str]:
        """Each GPU's model label (``modelName``, ``card_model``), from the first of its
        series that has one; GPUs without any are left out."""
        models: dict[GpuKey, str] = {}
        for key, measures in gpus.items():
            found = next((m for s in measures.values() if (m := self.model_of(s))), "")
            if found:
                models[key] = found
        return models

    @cached_property
    def job_labels(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d.job_label for d in self.dialects))

    def vendor_of(self, measures: Mapping[str, Series]) -> str:
        """The vendor of one GPU's series (by their exporter names; '' when unknown)."""
        return joined(found[1].vendor for s in measures.values()
                      if (found := self._by_name.get(s.metric)))


def windowed(spec: MetricSpec, alternatives: Sequence[Sequence[Matcher]], window: str,
             rate_window: str | float, fn: str = "", store: str = "prometheus") -> str:
    """The PromQL of one exporter series read once per window, ``or``-ed over its names
    (an older name after the current one) and the matcher ``alternatives`` (label
    spellings): ``<fn or reduce>_over_time(name{...}[window])``, or ``rate(...)`` over
    ``rate_window`` for a running total; the parts of one GPU (``over``) combined by
    ``sum without`` / ``avg without`` that label."""
    where = [Matcher.from_tuple((label, "=~", regex)) for label, regex in spec.where]
    parts = []
    for name in spec.names:
        for matchers in alternatives:
            sel = selector(name, *matchers, *where)
            expr = counter_call("rate", sel, rate_window, store) if spec.reduce == "rate" else \
                f"{fn or spec.reduce}_over_time({sel}[{window}])"
            if spec.over:
                how = "sum" if spec.combine == "sum" else "avg"
                expr = f"{how} without ({check_label(spec.over)}) ({expr})"
            parts.append(expr)
    return " or ".join(parts)


def group_by_gpu(pairs: Iterable[tuple[str, Series]], catalogue: Catalogue,
                 key_of: Callable[[Series], GpuKey | None] | None = None, *,
                 raw: bool = False) -> dict[GpuKey, dict[str, Series]]:
    """``(measure, series)`` pairs -> one merged, scaled series per GPU and measure.

    The same function serves Prometheus answers and OpenMetrics files, so both reach the
    efficiency maths in the same shape and units (GPU util % becomes a 0..1 ratio).
    ``key_of`` names a series' GPU (default: its host and index labels). ``raw``: the
    series are samples as scraped (files), so running totals become rates and the parts
    of one GPU (its XGMI links, its clocks) are combined here, as PromQL does otherwise.
    """
    key_of = key_of or catalogue.gpu_key
    buckets: dict[GpuKey, dict[str, list[Series]]] = defaultdict(lambda: defaultdict(list))
    for measure, series in pairs:
        key = key_of(series)
        if key is not None:
            buckets[key][measure].append(series)
    grouped: dict[GpuKey, dict[str, Series]] = {}
    for key, measures in buckets.items():
        grouped[key] = {m: _scaled(m, parts, catalogue, raw) for m, parts in measures.items()}
    return grouped


def gpu_uuid(series: Iterable[Series], catalogue: Catalogue) -> str:
    for item in series:
        uuid = catalogue.uuid_of(item)
        if uuid:
            return uuid
    return ""


def spec_for(measure: str, series: Series, catalogue: Catalogue) -> MetricSpec:
    """The definition ``series`` was read with: its name's, else its exporter's."""
    found = catalogue.spec_of(series.metric)
    if found is not None:
        return found[1]
    return catalogue.dialect_of(series).metrics.get(measure) or catalogue.metric(measure)


def raw_points(spec: MetricSpec, parts: Sequence[Series]) -> tuple[Point, ...]:
    """One GPU's timeline of ``spec`` from the series of its raw samples: those matching
    ``where``, running totals as rates, the ``over`` parts combined."""
    parts = [p for p in parts if _wanted(spec, p.labels)]
    if not spec.over and spec.reduce != "rate":
        return merge(parts)
    by_part: dict[str, list[Series]] = defaultdict(list)
    for part in parts:
        by_part[part.labels.get(spec.over, "") if spec.over else ""].append(part)
    timelines = [merge(items) for items in by_part.values()]
    if spec.reduce == "rate":
        timelines = [counter_rate(points) for points in timelines]
    return combine(timelines, spec.combine)


def _wanted(spec: MetricSpec, labels: Mapping[str, str]) -> bool:
    return all(re.fullmatch(regex, labels.get(label, "")) for label, regex in spec.where)


def _scaled(measure: str, parts: list[Series], catalogue: Catalogue, raw: bool) -> Series:
    spec = spec_for(measure, parts[0], catalogue)
    points = raw_points(spec, parts) if raw else merge(parts)
    if spec.scale != 1.0:
        points = tuple((t, v * spec.scale) for t, v in points)
    first = parts[0]
    return Series(spec.name, dict(first.labels), points)


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


def _metrics(overrides: Any, table: Mapping[str, MetricSpec], key: str
             ) -> dict[str, MetricSpec]:
    if not isinstance(overrides, Mapping):
        raise CatalogueError(f"metric_labels.{key}: expected {{measure: metric name}}")
    metrics = dict(table)
    for measure, name in overrides.items():
        if measure not in metrics:
            raise CatalogueError(f"metric_labels.{key}: unknown measure {measure!r}")
        metrics[measure] = replace(metrics[measure], name=check_metric(str(name)))
    return metrics


def _exporters(value: Any) -> tuple[str, ...]:
    if value is None:
        return ("dcgm",)
    items = [value] if isinstance(value, str) else list(value) if isinstance(
        value, list | tuple) else None
    if not items or len(set(items)) != len(items) or not set(items) <= set(DIALECTS):
        raise CatalogueError(f"metric_labels.exporters: expected a list of "
                             f"{', '.join(DIALECTS)} without repeats, got {value!r}")
    return tuple(items)


AMD_KEYS = ("prefix", "job", "hostname", "gpu", "uuid", "metrics")


def _amd(config: Any, site_prefix: str) -> Dialect:
    """The AMD exporter's dialect: its names under the cluster's prefix (else the site's),
    its label names and metric names where the cluster changed them."""
    if not isinstance(config, Mapping):
        raise CatalogueError('metric_labels.amd: expected {"prefix": "amd_", "job": ...}')
    unknown = sorted(set(config) - set(AMD_KEYS))
    if unknown:
        raise CatalogueError(f"metric_labels.amd: unknown key(s) {', '.join(unknown)} "
                             f"({', '.join(AMD_KEYS)})")
    prefix = config.get("prefix", site_prefix) or ""
    if not isinstance(prefix, str) or (prefix and not re.fullmatch(r"[a-zA-Z_]\w*", prefix)):
        raise CatalogueError(f"metric_labels.amd.prefix: {prefix!r} is not a metric name "
                             "prefix")
    table = {m: spec.prefixed(prefix) for m, spec in AMD.metrics.items()}
    return replace(
        AMD, job_label=_label(config.get("job", AMD.job_label), "amd.job"),
        host_labels=_labels(config.get("hostname", AMD.host_labels), "amd.hostname"),
        gpu_label=_label(config.get("gpu", AMD.gpu_label), "amd.gpu"),
        uuid_labels=_labels(config.get("uuid", AMD.uuid_labels), "amd.uuid"),
        metrics=_metrics(config.get("metrics", {}), table, "amd.metrics"))
