"""How the rest of Beacon reaches a cluster's outside systems: its Slurm and its Prometheus.

Clients are built from the cluster's row (backend, settings, URL); settings give only the
site-wide Prometheus default and timeout. Callers look these up as module attributes
(``services.client_for(cluster)``) so that a test can answer for a cluster with one patch.
"""

from __future__ import annotations

from django.conf import settings

from apps.clusters.adapters.prometheus import PrometheusClient
from apps.clusters.adapters.slurm import SlurmClient
from apps.clusters.adapters.slurm.registry import NOTES, slurm_client

# Action is re-exported: views ask cannot(cluster, Action.X) without importing an adapter
from apps.clusters.adapters.slurm.types import Action
from apps.clusters.models import Cluster
from apps.core.errors import AdapterError

__all__ = ["Action", "backend_note", "cannot", "client_for", "prometheus_for"]


def client_for(cluster: Cluster) -> SlurmClient:
    """The cluster's Slurm backend, configured from its row (never from settings)."""
    if cluster.slurm_backend == Cluster.SlurmBackend.NONE:
        raise AdapterError(f"cluster {cluster.name} has no Slurm backend (imports only)",
                           service="slurm")
    # a simulated cluster's files backend keeps quota writes in its simulated state
    options = {"cluster": cluster.name, "simulated": cluster.is_simulated,
               **(cluster.slurm_settings or {})}
    return slurm_client(cluster.slurm_backend, options)


def cannot(cluster: Cluster, action: Action) -> str:
    """Why the cluster's Slurm backend cannot do ``action`` ("" when it can): what a page
    says in place of the button, before anything is tried."""
    try:
        return client_for(cluster).cannot(action)
    except AdapterError as exc:  # no backend, a backend misconfigured or not installed
        return str(exc)


def backend_note(cluster: Cluster) -> str:
    """What the pages say beside the cluster's Slurm backend when that backend has not run
    against a real Slurm here (pyslurm); "" otherwise. Builds no client."""
    return NOTES.get(cluster.slurm_backend, "")


def prometheus_for(cluster: Cluster) -> PrometheusClient | None:
    """The cluster's Prometheus (its own URL, else ``PROMETHEUS_URL``), with its extra
    headers (a Mimir tenant); None when neither URL is set."""
    url = cluster.metrics_url
    if not url:
        return None
    return PrometheusClient(url, timeout=settings.PROMETHEUS_TIMEOUT,
                            headers=dict(cluster.prometheus_headers or {}))
