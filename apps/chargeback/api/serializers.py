"""Chargeback API shapes. Money and hours are exact decimal strings (never floats)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, TypedDict

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.analysis.chargeback import Policy
from apps.chargeback.filters import MONTH_PATTERN
from apps.chargeback.models import BillingPeriod, Rate, Statement, StatementLine
from apps.core.api.fields import SOME_TEXT, Conflict, DecimalString, StrictText, decimal_pattern


class _Digits(TypedDict):
    """The DecimalField keywords shared by every hours (or money) field."""

    max_digits: int
    decimal_places: int


HOURS = _Digits(max_digits=16, decimal_places=4)
MONEY = _Digits(max_digits=16, decimal_places=2)


class UsageLineSerializer(serializers.Serializer):
    """One priced line of live usage (``apps.analysis.chargeback.Line``)."""

    team = serializers.CharField(help_text="team slug; empty: an account mapped to no team")
    user = serializers.CharField()
    partition = serializers.CharField()
    gpu_model = serializers.CharField(help_text="empty: not recorded")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    allocated_hours = serializers.DecimalField(source="hours.allocated", **HOURS)
    useful_hours = serializers.DecimalField(source="hours.useful", **HOURS)
    waiting_hours = serializers.DecimalField(source="hours.waiting", **HOURS)
    held_idle_hours = serializers.DecimalField(source="hours.held_idle", **HOURS)
    no_process_hours = serializers.DecimalField(source="hours.no_process", **HOURS)
    unmeasured_hours = serializers.DecimalField(source="hours.unmeasured", **HOURS)
    charged_hours = serializers.DecimalField(**HOURS)
    price = serializers.DecimalField(max_digits=12, decimal_places=4, allow_null=True)
    amount = serializers.DecimalField(**MONEY)
    useful_amount = serializers.DecimalField(
        **MONEY, help_text="the same line charged at useful (and unmeasured) hours only")


class RateSerializer(serializers.ModelSerializer):
    partition = StrictText(max_length=128, required=False, default="",
                           help_text="empty: any partition")
    gpu_model = StrictText(max_length=64, required=False, default="",
                           help_text="empty: any GPU model")
    price = DecimalString(decimal_pattern(8, 4), help_text="per GPU-hour, e.g. \"2.5000\"")
    note = StrictText(max_length=200, required=False, default="")

    class Meta:
        model = Rate
        fields = ["id", "partition", "gpu_model", "price", "valid_from", "valid_until", "note",
                  "created_at", "updated_at"]
        read_only_fields = ["created_at", "updated_at"]

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        start = attrs.get("valid_from", getattr(self.instance, "valid_from", None))
        until = attrs.get("valid_until", getattr(self.instance, "valid_until", None))
        if start and until and until <= start:
            raise Conflict("valid_until must be after valid_from")
        return attrs


class PeriodSerializer(serializers.ModelSerializer):
    month = serializers.SerializerMethodField()
    policy = serializers.ChoiceField(choices=[p.value for p in Policy])
    waste_fee = serializers.DecimalField(max_digits=5, decimal_places=4,
                                         min_value=Decimal("0"), max_value=Decimal("1"))

    class Meta:
        model = BillingPeriod
        fields = ["month", "policy", "waste_fee"]

    def get_month(self, period: BillingPeriod) -> str:
        return period.label


class TermsSerializer(serializers.Serializer):
    policy = serializers.ChoiceField(choices=[p.value for p in Policy])
    waste_fee = DecimalString(r"^(0(\.\d{1,4})?|1(\.0{1,4})?)$", required=False,
                              default=Decimal("0"),
                              help_text="0..1: share of the rate charged per wasted GPU-hour")


class StatementLineSerializer(serializers.ModelSerializer):
    class Meta:
        model = StatementLine
        fields = ["kind", "user_name", "partition", "gpu_model", "start", "end",
                  "allocated_hours", "useful_hours", "waiting_hours", "held_idle_hours",
                  "no_process_hours", "unmeasured_hours", "charged_hours", "price", "amount",
                  "useful_amount", "description", "created_at"]


class StatementSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug")
    month = serializers.CharField(source="period.label")
    adjustments = serializers.DecimalField(source="adjustments_total", read_only=True, **MONEY)
    total_due = serializers.DecimalField(read_only=True, **MONEY)

    class Meta:
        model = Statement
        fields = ["id", "team", "month", "status", "policy", "waste_fee", "currency",
                  "computed_at", "finalised_at", "allocated_hours", "useful_hours",
                  "waiting_hours", "held_idle_hours", "no_process_hours", "unmeasured_hours",
                  "charged_hours", "amount", "useful_amount", "adjustments", "total_due"]


class WastefulJobSerializer(serializers.Serializer):
    """A job of the team that wasted at least half its measured GPU-hours in the month."""

    cluster = serializers.CharField(source="job.cluster.name")
    job_id = serializers.IntegerField(source="job.job_id")
    display_id = serializers.CharField(source="job.display_id")
    user = serializers.CharField(source="job.user_name")
    partition = serializers.CharField(source="job.partition")
    allocated_hours = serializers.FloatField(source="hours.allocated")
    wasted_hours = serializers.FloatField(source="hours.waste")
    waste_share = serializers.FloatField(source="share")
    kind = serializers.ChoiceField(choices=["waiting", "held_idle", "no_process"])


class StatementDetailSerializer(StatementSerializer):
    lines = StatementLineSerializer(many=True, read_only=True)
    wasteful_jobs = serializers.SerializerMethodField(
        help_text="where the waste came from (live, not part of the amounts)")

    class Meta(StatementSerializer.Meta):
        fields = [*StatementSerializer.Meta.fields, "lines", "wasteful_jobs"]

    @extend_schema_field(WastefulJobSerializer(many=True))
    def get_wasteful_jobs(self, statement: Statement) -> list[dict[str, Any]]:
        from apps.chargeback.services import wasteful_jobs_of

        return list(WastefulJobSerializer(wasteful_jobs_of(statement), many=True).data)


class AdjustmentSerializer(serializers.Serializer):
    amount = DecimalString(decimal_pattern(11, 2, signed=True),
                           help_text="negative: a credit; not zero (409)")
    description = StrictText(SOME_TEXT, max_length=500, help_text="why (kept on the line)")


class ReconcileRequestSerializer(serializers.Serializer):
    cluster = StrictText(r"^[-a-zA-Z0-9_]{1,64}$", help_text="cluster name (404 if unknown)")
    month = StrictText(MONTH_PATTERN)


class ReconciliationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    cluster = serializers.CharField(source="cluster.name")
    month = serializers.DateField()
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()
    ok = serializers.BooleanField()
    tolerance_min = serializers.FloatField()
    accounts = serializers.ListField(child=serializers.DictField())
    jobs = serializers.ListField(child=serializers.DictField())
    created_at = serializers.DateTimeField()
