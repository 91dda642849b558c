"""Detection's telemetry from a cluster with several stores (issue 29 item 2).

Every store is asked for the whole window in parallel (``clusters.stores.fan_out``), each
answer is kept to the nodes its store answers for, and the answers are merged into one
``RawTelemetry``. A store that failed leaves its nodes *not checked*: the run records one
failure per store naming them (the run ends partial and the Security and job pages say
so), never a clean result. When every store failed, the read fails as one store's would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial

from apps.analysis.stores import Coverage, coverage, route
from apps.clusters import stores as cluster_stores
from apps.clusters.adapters.catalogue import Catalogue
from apps.clusters.models import Cluster
from apps.core.errors import AdapterError
from apps.security.adapters import telemetry


@dataclass(frozen=True)
class StoresRead:
    """The merged telemetry, what it covered, and which stores were asked."""

    raw: telemetry.RawTelemetry
    coverage: Coverage
    asked: str  # "gpu-a http://…, default http://…": the run's source line


def from_stores(cluster: Cluster, catalogue: Catalogue, start: float, end: float,
                step: float) -> StoresRead:
    """Every store's GPUs and nodes over ``(start, end]``, merged (see the module)."""
    stores = cluster_stores.stores_for(cluster, catalogue)
    routes = route(cluster_stores.node_names(cluster), stores.routes, stores.partitions)
    calls = {s.name: partial(telemetry.from_prometheus, s.client, s.catalogue, start, end, step)
             for s in stores.stores}
    answers, failed = cluster_stores.fan_out(calls)
    failed.update(cluster_stores.missing_default(routes, stores))
    cover = coverage(routes, failed)
    if not answers:
        raise AdapterError("; ".join(cover.notes()) or "no telemetry store configured",
                           service="prometheus")
    found = stores.by_name()
    # a host's store worked out once, not once per series (6 per GPU: glob matching over
    # every store was a per-GPU cost of its own at 100,000 GPUs)
    owner = cache(stores.store_of)
    parts = [telemetry.kept_hosts(answers[name], found[name].catalogue,
                                  partial(_owned, owner, name)) for name in sorted(answers)]
    asked = ", ".join(f"{s.name} {s.client.base_url}" for s in stores.stores)
    return StoresRead(telemetry.merged_raw(parts), cover, asked)


def _owned(owner: Callable[[str], str], name: str, host: str) -> bool:
    return owner(host) == name
