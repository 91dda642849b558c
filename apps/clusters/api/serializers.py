from __future__ import annotations

from rest_framework import serializers

from apps.clusters.models import Cluster


class ClusterSerializer(serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = ["id", "name", "display_name", "is_simulated", "slurm_backend", "timezone",
                  "gpu_types", "sync_state", "sync_watermark", "last_sync_ok_at"]
