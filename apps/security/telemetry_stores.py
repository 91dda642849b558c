"""Detection's telemetry from a cluster with several stores (issue 29 item 2).

Every store is asked for the whole window in parallel (``clusters.stores.fan_out``). Each
store's GPU series are folded into a frame fold of its own as its answers stream in, kept
to the nodes that store answers for, and never held as series (issue 29: 100,000 GPUs'
series held together took most of 2 GB); its node rates are kept the same way. The folds
and node rates are then merged. A store that failed leaves its nodes *not checked*: its
fold is dropped, the run records one failure per store naming them (the run ends partial
and the Security and job pages say so), never a clean result. When every store failed,
the read fails as one store's would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial

from apps.analysis.stores import Coverage, coverage, route
from apps.analysis.timeseries import Series
from apps.clusters import stores as cluster_stores
from apps.clusters.adapters.catalogue import Catalogue
from apps.clusters.models import Cluster
from apps.core.errors import AdapterError
from apps.security.adapters import telemetry
from apps.security.frames import GpuFold, Grid


@dataclass(frozen=True)
class StoresRead:
    """The merged node telemetry and GPU fold, what it covered, which stores were asked."""

    raw: telemetry.RawTelemetry  # node rates, warnings, failures; no GPU series
    fold: GpuFold
    coverage: Coverage
    asked: str  # "gpu-a http://…, default http://…": the run's source line


def from_stores(cluster: Cluster, catalogue: Catalogue, start: float, end: float,
                step: float, grid: Grid) -> StoresRead:
    """Every store's GPUs (folded on ``grid``) and nodes over ``(start, end]``, merged."""
    stores = cluster_stores.stores_for(cluster, catalogue)
    routes = route(cluster_stores.node_names(cluster), stores.routes, stores.partitions)
    # a host's store worked out once, not once per series (6 per GPU: glob matching over
    # every store was a per-GPU cost of its own at 100,000 GPUs)
    owner = cache(stores.store_of)

    def read(store: cluster_stores.Store) -> tuple[telemetry.RawTelemetry, GpuFold]:
        def mine(host: str) -> bool:
            return owner(host) == store.name

        fold = GpuFold(catalogue, grid)
        raw = telemetry.from_prometheus(store.client, store.catalogue, start, end, step,
                                        on_gpu=_kept(fold, store.catalogue, mine))
        return telemetry.kept_hosts(raw, store.catalogue, mine), fold

    calls = {s.name: partial(read, s) for s in stores.stores}
    answers, failed = cluster_stores.fan_out(calls)
    failed.update(cluster_stores.missing_default(routes, stores))
    cover = coverage(routes, failed)
    if not answers:
        raise AdapterError("; ".join(cover.notes()) or "no telemetry store configured",
                           service="prometheus")
    fold = GpuFold(catalogue, grid)
    for name in sorted(answers):
        fold.absorb(answers[name][1])
    raw = telemetry.merged_raw([answers[name][0] for name in sorted(answers)])
    asked = ", ".join(f"{s.name} {s.client.base_url}" for s in stores.stores)
    return StoresRead(raw, fold, cover, asked)


def _kept(fold: GpuFold, catalogue: Catalogue,
          mine: Callable[[str], bool]) -> telemetry.GpuSink:
    """``fold.add`` for the series of GPUs on hosts ``mine`` accepts (a node two stores
    hold is read once, from the store that answers for it); ``catalogue`` is the store's,
    which reads its labels."""
    def add(measure: str, series: Series) -> None:
        key = catalogue.gpu_key(series)
        if key is not None and mine(key.host):
            fold.add(measure, series)

    return add
