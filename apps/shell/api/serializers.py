from __future__ import annotations

from rest_framework import serializers

from apps.core.models import TaskRun


class TaskRunSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name", allow_null=True, default=None)

    class Meta:
        model = TaskRun
        fields = ["id", "kind", "cluster", "target", "status", "created_at", "started_at",
                  "finished_at", "error", "stats"]
