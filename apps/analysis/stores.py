"""Which telemetry store answers for which node, and what a fan-out over stores covered
(issue 29 item 2: several Prometheus-compatible stores per cluster).

A cluster's telemetry may be split over stores, each for a set of nodes given as host-name
globs and/or Slurm partitions. A node belongs to the first store (by ``order``, then name)
that claims it; a node no store claims belongs to the cluster's own Prometheus, the default
store (``DEFAULT``). After a fan-out, a store that failed leaves its nodes *not checked*:
they are listed by name, never counted as clean.

Pure: no Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

DEFAULT = "default"  # the cluster's own Prometheus URL: every node no store claims
STORE_FAILED = "telemetry store "  # how every note of a failed store begins
NAMED_NODES = 10  # how many not-checked nodes a note names before "and N more"


@dataclass(frozen=True)
class StoreRoute:
    """A store's claim: host-name globs (``gpu-a*``) and partition names; either matches."""

    name: str
    hosts: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    order: int = 0

    def claims(self, node: str, partitions: frozenset[str] = frozenset()) -> bool:
        """Whether ``node`` (in ``partitions``) is this store's."""
        return any(fnmatchcase(node, glob) for glob in self.hosts) or \
            bool(partitions.intersection(self.partitions))


def store_of(node: str, stores: Sequence[StoreRoute],
             partitions: frozenset[str] = frozenset()) -> str:
    """The name of the store answering for ``node``: the first claiming it, else DEFAULT."""
    for store in sorted(stores, key=lambda s: (s.order, s.name)):
        if store.claims(node, partitions):
            return store.name
    return DEFAULT


def route(nodes: Iterable[str], stores: Sequence[StoreRoute],
          partitions_of: Mapping[str, frozenset[str]] | None = None) -> dict[str, tuple[str, ...]]:
    """Nodes grouped by the store answering for them (sorted; stores with no node left out)."""
    partitions_of = partitions_of or {}
    grouped: dict[str, list[str]] = {}
    for node in sorted(set(nodes)):
        grouped.setdefault(store_of(node, stores, partitions_of.get(node, frozenset())),
                           []).append(node)
    return {name: tuple(found) for name, found in grouped.items()}


@dataclass(frozen=True)
class Coverage:
    """What a fan-out over stores read: nodes checked, and nodes not checked with why."""

    checked: tuple[str, ...] = ()
    # store name -> (why it failed, the nodes it answers for)
    not_checked: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return not self.not_checked

    @property
    def unchecked_nodes(self) -> tuple[str, ...]:
        return tuple(sorted(n for _, nodes in self.not_checked.values() for n in nodes))

    def notes(self) -> list[str]:
        """One line per failed store: its name, why, and the nodes left not checked."""
        return [f"{STORE_FAILED}{name} failed ({why}): {not_checked_text(nodes)}"
                for name, (why, nodes) in sorted(self.not_checked.items())]


def coverage(routes: Mapping[str, Sequence[str]], failed: Mapping[str, str]) -> Coverage:
    """The coverage of a fan-out: ``routes`` as :func:`route` gives them, ``failed`` the
    stores whose read failed (name -> why). A failed store with no node routed to it (the
    nodes are not known yet, as in a detection before the first node sync) still appears,
    with no nodes named."""
    checked = sorted(n for name, nodes in routes.items() if name not in failed for n in nodes)
    return Coverage(tuple(checked), {name: (why, tuple(routes.get(name, ())))
                                     for name, why in failed.items()})


def not_checked_text(nodes: Sequence[str]) -> str:
    """``3 nodes not checked: a, b, c``; long lists name the first ``NAMED_NODES``."""
    if not nodes:
        return "its nodes not checked"
    shown = ", ".join(nodes[:NAMED_NODES])
    more = f" and {len(nodes) - NAMED_NODES} more" if len(nodes) > NAMED_NODES else ""
    noun = "node" if len(nodes) == 1 else "nodes"
    return f"{len(nodes)} {noun} not checked: {shown}{more}"
