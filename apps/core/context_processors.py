"""The "simulated data" banner of a page about one cluster (navigation: apps/shell)."""

from __future__ import annotations

from typing import Any, Protocol


class _Cluster(Protocol):  # clusters.Cluster: core imports no domain app
    name: str
    is_simulated: bool


def simulated_banner(cluster: _Cluster) -> dict[str, Any]:
    """For a page about one cluster: the banner only if that cluster is simulated.

    ``navigation``'s default (every simulated cluster) is for pages that mix clusters; a
    view's context overrides a context processor's, so a real cluster's page stays plain.
    """
    return {"simulated_clusters": [cluster.name] if cluster.is_simulated else []}
