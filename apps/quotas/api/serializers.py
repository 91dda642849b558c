"""Quota API shapes: accounts with their quota and usage, previews, applies, changes."""

from __future__ import annotations

from rest_framework import serializers

from apps.chargeback.filters import MONTH_PATTERN
from apps.core.api.fields import SOME_TEXT, StrictText
from apps.quotas.models import Quota, QuotaChange


class QuotaSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="account.cluster.name")
    account = serializers.CharField(source="account.name")
    team = serializers.CharField(source="account.team.slug")
    month = serializers.DateField(format="%Y-%m")
    gpu_hours = serializers.FloatField(allow_null=True, help_text="null: no limit")

    class Meta:
        model = Quota
        fields = ["id", "cluster", "account", "team", "month", "gpu_minutes", "gpu_hours",
                  "state", "version", "applied_at", "slurm_minutes", "drift"]


class AccountUsageSerializer(serializers.Serializer):
    """One Slurm account of a team: the quota in force and usage as Slurm enforces it."""

    id = serializers.IntegerField(source="account.pk")
    cluster = serializers.CharField(source="account.cluster.name")
    account = serializers.CharField(source="account.name")
    team = serializers.CharField(source="account.team.slug")
    quota = QuotaSerializer(allow_null=True)
    slurm_minutes = serializers.IntegerField(allow_null=True,
                                             help_text="GrpTRESMins gres/gpu Slurm holds")
    used_hours = serializers.FloatField(help_text="Slurm's decayed usage (sshare GrpTRESRaw)")
    month_hours = serializers.FloatField(
        help_text="allocated gres/gpu device-hours this month, as Slurm counts them")
    percent = serializers.FloatField(source="status.percent", allow_null=True, default=None)
    burn_hours_per_day = serializers.FloatField(source="status.burn_hours_per_day",
                                                allow_null=True, default=None)
    exhausted_at = serializers.DateTimeField(source="status.exhausted_at", allow_null=True,
                                             default=None)
    level = serializers.IntegerField(source="status.level", allow_null=True, default=None)


class PreviewRequestSerializer(serializers.Serializer):
    month = StrictText(MONTH_PATTERN, help_text="YYYY-MM: this month, or a later one "
                                                "(scheduled); a past month is refused (409)")
    gpu_minutes = serializers.IntegerField(
        allow_null=True, min_value=0, max_value=2**53,
        help_text="GrpTRESMins gres/gpu (GPU-minutes); null: remove the limit; more than 10 x "
                  "what the cluster delivers in the month is refused as absurd (409)")


class QuotaStatusSerializer(serializers.Serializer):
    """Usage against a limit, as the quota page prints it."""

    limit_hours = serializers.FloatField()
    used_hours = serializers.FloatField(help_text="Slurm's decayed usage (sshare GrpTRESRaw)")
    percent = serializers.FloatField()
    level = serializers.IntegerField(help_text="the highest warning level reached: 0, 80, 100")
    burn_hours_per_day = serializers.FloatField()
    exhausted_at = serializers.DateTimeField(allow_null=True,
                                             help_text="when it runs out at the current burn")


class PreviewSerializer(serializers.Serializer):
    """The preview page's figures (issue 26: a change shows its consequence before it is
    made): what Slurm would run, the usage now, and what the new limit does to it."""

    month = serializers.DateField(format="%Y-%m")
    old_minutes = serializers.IntegerField(allow_null=True)
    new_minutes = serializers.IntegerField(allow_null=True)
    command = serializers.CharField(help_text="exactly what apply runs")
    slurm_output = serializers.CharField(help_text="Slurm's answer to a dry run")
    version = serializers.IntegerField(help_text="send back as seen_version")
    scheduled = serializers.BooleanField(help_text="a later month: written when it begins")
    usage = AccountUsageSerializer(allow_null=True, help_text="the account's row of the quota "
                                                              "page now")
    after = QuotaStatusSerializer(allow_null=True, help_text="the usage now against the new "
                                                             "limit; null: no limit")
    blocks = serializers.BooleanField(help_text="the new limit is already used up: new and "
                                                "pending jobs of the account wait at once")
    users = serializers.ListField(child=serializers.CharField(),
                                  help_text="the account's users: whom the limit applies to")
    pending_jobs = serializers.IntegerField(help_text="the account's jobs pending now")


class ApplyRequestSerializer(PreviewRequestSerializer):
    seen_minutes = serializers.IntegerField(allow_null=True, min_value=0, max_value=2**63 - 1,
                                            help_text="old_minutes of the preview")
    seen_version = serializers.IntegerField(min_value=0, max_value=2**31 - 1,
                                            help_text="version of the preview")
    reason = StrictText(SOME_TEXT, max_length=2000, help_text="why (kept in the audit trail)")


class QuotaChangeSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="account.cluster.name")
    account = serializers.CharField(source="account.name")
    actor = serializers.CharField(source="actor.username", allow_null=True, default=None)
    month = serializers.DateField(format="%Y-%m")

    class Meta:
        model = QuotaChange
        fields = ["id", "cluster", "account", "month", "kind", "at", "actor", "old_minutes",
                  "new_minutes", "reason", "command", "output", "error"]
