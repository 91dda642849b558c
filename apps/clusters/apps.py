"""Clusters: Slurm and Prometheus connections, nodes, partitions, account→team mapping, sync."""

from django.apps import AppConfig


class ClustersConfig(AppConfig):
    name = "apps.clusters"
    label = "clusters"

    def ready(self) -> None:
        from apps.clusters import checks  # noqa: F401  (registers the system checks)
