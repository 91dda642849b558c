"""Celery tasks for Slurm: thin wrappers (ids in, one service call) around apps/clusters/sync.py
and sync_limits.py.

Each has a management-command twin: ``manage.py sync_cluster NAME --only jobs|queue|nodes|
shares|limits|labels``. ``sync_all_clusters`` is what beat runs; it fans out one task per cluster.
"""

from __future__ import annotations

from celery import shared_task

from apps.clusters import labels, sync, sync_limits
from apps.clusters.models import Cluster
from apps.core.retries import RETRY_DB, RETRY_STEADY


@shared_task(**RETRY_STEADY)
def sync_cluster(cluster_id: int) -> None:
    sync.sync_cluster(Cluster.objects.get(pk=cluster_id))


@shared_task(**RETRY_STEADY)
def sync_queue(cluster_id: int) -> None:
    sync.sync_queue(Cluster.objects.get(pk=cluster_id))


@shared_task(**RETRY_STEADY)
def sync_nodes(cluster_id: int) -> None:
    sync.sync_nodes(Cluster.objects.get(pk=cluster_id))


@shared_task(**RETRY_STEADY)
def sync_shares(cluster_id: int) -> None:
    sync.sync_shares(Cluster.objects.get(pk=cluster_id))


@shared_task(**RETRY_STEADY)
def sync_cluster_limits(cluster_id: int) -> None:
    sync_limits.sync_limits(Cluster.objects.get(pk=cluster_id))


@shared_task(**RETRY_STEADY)
def label_jobs(cluster_id: int) -> None:
    labels.label_jobs(Cluster.objects.get(pk=cluster_id))


PARTS = {"jobs": sync_cluster, "queue": sync_queue, "nodes": sync_nodes, "shares": sync_shares,
         "limits": sync_cluster_limits, "labels": label_jobs}


@shared_task(**RETRY_DB)
def sync_all_clusters(part: str) -> int:
    """Beat's entry point: enqueue ``part`` for every cluster that has a Slurm backend."""
    task = PARTS[part]
    ids = list(Cluster.objects.exclude(slurm_backend=Cluster.SlurmBackend.NONE)
               .filter(is_simulated=False).values_list("pk", flat=True))
    for cluster_id in ids:
        task.delay_on_commit(cluster_id)
    return len(ids)
