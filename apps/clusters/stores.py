"""A cluster's telemetry stores and the fan-out over them (issue 29 item 2).

A cluster reads telemetry from its own Prometheus URL (the default store) and from any
``TelemetryStore`` rows, each answering for the nodes its globs or partitions claim
(``apps/analysis/stores.py`` routes them). :func:`fan_out` calls each store in a bounded
thread pool and collects what failed: the threads only call adapters (no ORM, so no
database connection is opened in them), and a store that raises ``AdapterError`` leaves
its nodes not checked while the others are used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TypeVar

from django.conf import settings

from apps.analysis.stores import DEFAULT, StoreRoute, store_of
from apps.clusters import services
from apps.clusters.adapters.catalogue import Catalogue
from apps.clusters.adapters.prometheus import PrometheusClient
from apps.clusters.models import Cluster, Node, TelemetryStore
from apps.core.errors import AdapterError

T = TypeVar("T")
MAX_PARALLEL = 8  # stores asked at once: each answer is already one bounded query set


@dataclass(frozen=True)
class Store:
    """One store's client, its claim and the catalogue written for its query engine."""

    route: StoreRoute
    client: PrometheusClient
    catalogue: Catalogue

    @property
    def name(self) -> str:
        return self.route.name


@dataclass(frozen=True)
class Stores:
    """A cluster's stores and how its nodes route to them."""

    stores: tuple[Store, ...]
    partitions: Mapping[str, frozenset[str]]

    @property
    def routes(self) -> tuple[StoreRoute, ...]:
        return tuple(s.route for s in self.stores if s.name != DEFAULT)

    def store_of(self, host: str) -> str:
        """The store answering for ``host`` (DEFAULT when none claims it)."""
        return store_of(host, self.routes, self.partitions.get(host, frozenset()))

    def by_name(self) -> dict[str, Store]:
        return {s.name: s for s in self.stores}


def has_several(cluster: Cluster) -> bool:
    """Whether the cluster has ``TelemetryStore`` rows (else its one Prometheus, as before)."""
    return cluster.telemetry_stores.exists()


def stores_for(cluster: Cluster, catalogue: Catalogue) -> Stores:
    """The cluster's stores: its ``TelemetryStore`` rows in claim order, then the default
    (its own or the site's Prometheus) when it has one."""
    stores = [_store(row, catalogue) for row in cluster.telemetry_stores.all()]
    default = services.prometheus_for(cluster)
    if default is not None:
        stores.append(Store(StoreRoute(DEFAULT), default, catalogue))
    return Stores(tuple(stores), partitions_of(cluster))


def _store(row: TelemetryStore, catalogue: Catalogue) -> Store:
    client = PrometheusClient(row.url, timeout=settings.PROMETHEUS_TIMEOUT,
                              headers=dict(row.headers or {}))
    return Store(_route(row), client, replace(catalogue, store=row.kind))


def _route(row: TelemetryStore) -> StoreRoute:
    return StoreRoute(row.name, tuple(row.hosts or ()), tuple(row.partitions or ()), row.order)


def node_stores(cluster: Cluster) -> dict[str, TelemetryStore | None]:
    """Node name -> the ``TelemetryStore`` answering for it (None: the cluster's own
    Prometheus), for the cluster page; empty when the cluster has no store rows."""
    rows = {row.name: row for row in cluster.telemetry_stores.all()}
    if not rows:
        return {}
    routes = [_route(row) for row in rows.values()]
    partitions = partitions_of(cluster)
    return {node: rows.get(store_of(node, routes, partitions.get(node, frozenset())))
            for node in node_names(cluster)}


def partitions_of(cluster: Cluster) -> dict[str, frozenset[str]]:
    """Node name -> its Slurm partitions (stores may claim nodes by partition)."""
    found: dict[str, set[str]] = {}
    for node, partition in Node.partitions.through.objects.filter(node__cluster=cluster) \
            .values_list("node__name", "partition__name"):
        found.setdefault(node, set()).add(partition)
    return {node: frozenset(names) for node, names in found.items()}


def node_names(cluster: Cluster) -> list[str]:
    """The cluster's synced nodes: the ones a failed store's note names."""
    return list(Node.objects.filter(cluster=cluster).values_list("name", flat=True))


def missing_default(routes: Mapping[str, Iterable[str]], stores: Stores) -> dict[str, str]:
    """When nodes route to the default store and the cluster has none: why they are not
    checked (so they are never taken for clean)."""
    if DEFAULT in routes and DEFAULT not in stores.by_name():
        return {DEFAULT: "no store claims these nodes and the cluster has no Prometheus URL"}
    return {}


def fan_out(calls: Mapping[str, Callable[[], T]]) -> tuple[dict[str, T], dict[str, str]]:
    """Run each store's call, in parallel when there are several; returns the answers and
    the failures (store name -> the ``AdapterError``'s text). Other exceptions are bugs
    and propagate. The calls must not touch the ORM: they run in threads."""
    if len(calls) == 1:
        (name, call), = calls.items()
        try:
            return {name: call()}, {}
        except AdapterError as exc:
            return {}, {name: str(exc)}
    answers: dict[str, T] = {}
    failed: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, max(1, len(calls))),
                            thread_name_prefix="telemetry-store") as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
        for name, future in futures.items():
            try:
                answers[name] = future.result()
            except AdapterError as exc:
                failed[name] = str(exc)
    return answers, failed
