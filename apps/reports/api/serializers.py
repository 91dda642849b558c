from __future__ import annotations

from typing import Any

from rest_framework import serializers

from apps.analysis.reports import Row


class RowSerializer(serializers.Serializer[Any]):
    """One group in one period (plain numbers: hours, seconds, shares 0..1)."""

    group = serializers.SerializerMethodField()
    period = serializers.SerializerMethodField()
    gpu_hours = serializers.FloatField()
    useful_gpu_hours = serializers.FloatField(source="useful_hours")
    jobs_started = serializers.IntegerField(source="started")
    wait_p50_s = serializers.FloatField(source="wait_p50", allow_null=True)
    wait_p90_s = serializers.FloatField(source="wait_p90", allow_null=True)
    wait_p95_s = serializers.FloatField(source="wait_p95", allow_null=True)
    jobs_ended = serializers.IntegerField(source="ended")
    success_rate = serializers.FloatField(allow_null=True)
    efficiency = serializers.FloatField(source="efficiency_share", allow_null=True)
    measured_gpu_hours = serializers.SerializerMethodField()

    def get_group(self, row: Row) -> dict[str, str]:
        return dict(zip(self.context["group"], row.group, strict=True))

    def get_period(self, row: Row) -> str:
        labels: list[str] = self.context["labels"]
        return labels[row.period]

    def get_measured_gpu_hours(self, row: Row) -> float:
        return row.efficiency.total / 3600


class ReportSerializer(serializers.Serializer[Any]):
    date_from = serializers.DateField()
    date_to = serializers.DateField()
    group = serializers.ListField(child=serializers.CharField())
    period = serializers.CharField(allow_null=True)
    as_of = serializers.DateTimeField()
    periods = serializers.ListField(child=serializers.CharField())
    rows = RowSerializer(many=True)
