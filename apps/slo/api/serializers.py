"""SLO API shapes: objectives (admins write them), scorecards (SLIs, budgets, burn rates),
monthly snapshots (history) and the ending classification."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.accounts.models import Team
from apps.clusters.models import Cluster
from apps.core.api.fields import NO_NUL_TEXT, SOME_TEXT, Conflict, StrictText
from apps.slo.models import EndingRule, Objective, Scorecard, Snapshot


class ObjectiveSerializer(serializers.ModelSerializer):
    """An SLO. Rules across fields, unknown teams or clusters and a taken name are refused
    with a 409 naming the field (the body is well-formed; the current state refuses it)."""

    name = StrictText(SOME_TEXT, max_length=120)
    description = StrictText(NO_NUL_TEXT, max_length=2000, required=False, default="")
    target = serializers.FloatField(min_value=0.0001, max_value=0.9999,
                                    help_text="share of good events, e.g. 0.9")
    wait_minutes = serializers.IntegerField(min_value=1, max_value=100_000, required=False,
                                            allow_null=True, default=None,
                                            help_text="queue wait: the target wait")
    team = StrictText(r"^[-a-zA-Z0-9_]{1,64}$", required=False, allow_null=True, default=None,
                      help_text="team scope: only this team (its slug)")
    cluster = StrictText(r"^[-a-zA-Z0-9_]{1,64}$", required=False, allow_null=True,
                         default=None, help_text="only jobs of this cluster (its name)")
    partition = StrictText(r"^[-\w.]{0,128}$", max_length=128, required=False, default="")
    order = serializers.IntegerField(min_value=0, max_value=32767, required=False, default=100)
    target_text = serializers.CharField(read_only=True)

    class Meta:
        model = Objective
        fields = ["id", "name", "description", "sli", "target", "wait_minutes", "target_text",
                  "window", "scope", "team", "cluster", "partition", "enabled", "notify",
                  "order", "created_at", "updated_at"]
        read_only_fields = ["created_at", "updated_at"]

    def to_representation(self, instance: Objective) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["team"] = instance.team.slug if instance.team is not None else None
        data["cluster"] = instance.cluster.name if instance.cluster is not None else None
        return data

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        for name, model, key in (("team", Team, "slug"), ("cluster", Cluster, "name")):
            if attrs.get(name) is not None:
                found = model.objects.filter(**{key: attrs[name]}).first()
                if found is None:
                    raise Conflict({name: f"no {name} {attrs[name]!r}"})
                attrs[name] = found

        def value(name: str) -> Any:
            return attrs[name] if name in attrs else getattr(self.instance, name, None)

        if value("sli") == Objective.Sli.QUEUE_WAIT and not value("wait_minutes"):
            raise Conflict({"wait_minutes": "a queue-wait SLO needs a target wait"})
        if value("team") is not None and value("scope") != Objective.Scope.TEAM:
            raise Conflict({"team": "only a team-scope SLO names a team"})
        taken = Objective.objects.filter(name=value("name"))
        if self.instance is not None:
            taken = taken.exclude(pk=self.instance.pk)
        if taken.exists():
            raise Conflict({"name": "another SLO has this name"})
        return attrs


class WorstJobSerializer(serializers.Serializer):
    """A job that cost the SLO most: ``value`` is the wait (seconds), the GPU-seconds lost
    (success) or the GPU-seconds wasted (efficiency)."""

    job = serializers.IntegerField(help_text="Beacon's job id (the job API's pk)")
    cluster = serializers.CharField()
    job_id = serializers.IntegerField()
    display_id = serializers.CharField()
    name = serializers.CharField()
    user_name = serializers.CharField()
    partition = serializers.CharField()
    value = serializers.FloatField()
    rule = serializers.CharField(required=False, help_text="success: the ending rule")
    state = serializers.CharField(required=False)
    frac = serializers.FloatField(required=False, help_text="efficiency: useful share")


class _SubjectSerializer(serializers.ModelSerializer):
    slo = serializers.IntegerField(source="objective_id")
    slo_name = serializers.CharField(source="objective.name")
    sli_kind = serializers.CharField(source="objective.sli")
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True)
    sli = serializers.FloatField(allow_null=True, help_text="good / total; null: no events")
    details = serializers.DictField(help_text="the SLI's breakdown (docs/slo.md)")


class ScorecardSerializer(_SubjectSerializer):
    burn_rates = serializers.DictField(child=serializers.FloatField(allow_null=True),
                                       help_text='burn rate per window ("1h": 2.5)')
    alerts = serializers.ListField(child=serializers.CharField(),
                                   help_text="firing multiwindow alerts (page-1h, ...)")
    trend = serializers.ListField(child=serializers.DictField())
    worst_jobs = serializers.SerializerMethodField()

    class Meta:
        model = Scorecard
        fields = ["id", "slo", "slo_name", "sli_kind", "subject", "team", "partition",
                  "evaluated_at", "window_start", "window_end", "target", "sli", "good",
                  "total", "budget_remaining", "status", "burn_rates", "alerts",
                  "exhaustion_at", "details", "trend", "worst_jobs"]

    @extend_schema_field(WorstJobSerializer(many=True))
    def get_worst_jobs(self, card: Scorecard) -> list[dict[str, Any]]:
        """Only the jobs the caller may see (the view puts their ids in the context)."""
        visible = self.context.get("visible_jobs", set())
        return list(WorstJobSerializer([w for w in card.worst_jobs or []
                                        if w["job"] in visible], many=True).data)


class SnapshotSerializer(_SubjectSerializer):
    month = serializers.DateField(format="%Y-%m")

    class Meta:
        model = Snapshot
        fields = ["id", "slo", "slo_name", "sli_kind", "subject", "team", "partition", "month",
                  "period_start", "period_end", "computed_at", "final", "target", "sli",
                  "good", "total", "budget_remaining", "status", "details"]


class EndingRuleSerializer(serializers.ModelSerializer):
    states = serializers.ListField(child=serializers.CharField())

    class Meta:
        model = EndingRule
        fields = ["key", "label", "order", "cause", "states", "started", "hardware_fault",
                  "reason_pattern", "enabled"]
