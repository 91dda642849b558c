"""Celery tasks of quotas: thin, ids in, one service call (twin: ``manage.py check_quotas``)."""

from __future__ import annotations

from celery import shared_task

from apps.clusters.models import Cluster
from apps.core.retries import RETRY, RETRY_DB
from apps.quotas import services


@shared_task(**RETRY)
def check_cluster(cluster_id: int) -> None:
    services.check_cluster(Cluster.objects.get(pk=cluster_id))


@shared_task(**RETRY_DB)
def check_all_clusters() -> int:
    """Beat's entry point: one check per cluster with a Slurm backend."""
    ids = list(Cluster.objects.exclude(slurm_backend=Cluster.SlurmBackend.NONE)
               .filter(is_simulated=False).values_list("pk", flat=True))
    for cluster_id in ids:
        check_cluster.delay_on_commit(cluster_id)
    return len(ids)
