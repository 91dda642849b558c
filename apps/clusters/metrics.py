"""Cluster figures for the portal's /metrics, read from the database at scrape time."""

from __future__ import annotations

from collections.abc import Iterator

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from apps.clusters.models import Cluster


class ClusterSyncCollector:
    """``beacon_cluster_sync_lag_seconds``: seconds since each syncing cluster's last good
    sync (since it was added, if it never synced). Import-only clusters have no lag."""

    def collect(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily("beacon_cluster_sync_lag_seconds",
                                "Seconds since the cluster's last successful sync",
                                labels=["cluster"])
        last_ok = GaugeMetricFamily("beacon_cluster_last_sync_ok_timestamp_seconds",
                                    "Unix time of the last successful sync (0: never)",
                                    labels=["cluster"])
        now = timezone.now()
        rows = (Cluster.objects.exclude(slurm_backend=Cluster.SlurmBackend.NONE)
                .values_list("name", "last_sync_ok_at", "created_at"))
        for name, ok_at, created_at in rows:
            lag.add_metric([name], max((now - (ok_at or created_at)).total_seconds(), 0.0))
            last_ok.add_metric([name], ok_at.timestamp() if ok_at else 0.0)
        yield lag
        yield last_ok
