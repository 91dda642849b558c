"""Findings and ingest documents in the API (evidence redacted for non-admins)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.analysis.sshd_log import MAX_LINE
from apps.security.findings import TRANSITIONS
from apps.security.models import Finding, FindingEvent


class FindingSerializer(serializers.ModelSerializer):
    cluster = serializers.CharField(source="cluster.name")
    rule = serializers.CharField(source="rule_key")
    node = serializers.CharField(source="node_name")
    gpu = serializers.IntegerField(source="gpu_index", allow_null=True)
    job_id = serializers.IntegerField(source="job_id_raw", allow_null=True)
    user = serializers.CharField(source="user_name")
    team = serializers.CharField(source="team.slug", allow_null=True, default=None)
    assignee = serializers.CharField(source="assignee.username", allow_null=True, default=None)
    url = serializers.SerializerMethodField()

    class Meta:
        model = Finding
        fields = ["id", "cluster", "rule", "title", "severity", "confidence", "attack",
                  "status", "node", "gpu", "gpu_uuid", "job_id", "user", "team", "first_seen",
                  "last_seen", "occurrences", "assignee", "url"]

    def get_url(self, finding: Finding) -> str:
        return f"/security/findings/{finding.pk}/"


class FindingEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor.username", allow_null=True, default=None)
    assignee = serializers.CharField(source="assignee.username", allow_null=True, default=None)

    class Meta:
        model = FindingEvent
        fields = ["at", "actor", "action", "from_status", "to_status", "assignee", "reason",
                  "until"]


class FindingLinksSerializer(serializers.Serializer):
    job = serializers.CharField(allow_null=True)
    gpu = serializers.CharField(allow_null=True)
    cluster = serializers.CharField()


class FindingDetailSerializer(FindingSerializer):
    evidence = serializers.SerializerMethodField()
    events = FindingEventSerializer(many=True, read_only=True)
    links = serializers.SerializerMethodField()

    class Meta(FindingSerializer.Meta):
        fields = [*FindingSerializer.Meta.fields, "status_reason", "suppressed_until",
                  "dedup_key", "evidence", "links", "events"]

    @extend_schema_field(FindingLinksSerializer)
    def get_links(self, finding: Finding) -> dict[str, Any]:
        """The job page (and its per-GPU charts) when the caller may see the job."""
        from apps.jobs.models import Job

        request = self.context.get("request")
        job = None
        if finding.job_id and Job.objects.visible_to(getattr(request, "user", None)) \
                .filter(pk=finding.job_id).exists():
            job = f"/jobs/{finding.cluster.name}/{finding.job_id_raw}/"
        gpu = f"{job}#gpus" if job and finding.gpu_index is not None else None
        return {"job": job, "gpu": gpu, "cluster": f"/clusters/{finding.cluster.name}/"}

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_evidence(self, finding: Finding) -> dict[str, Any]:
        request = self.context.get("request")
        return finding.evidence_for(getattr(request, "user", None))


class TransitionSerializer(serializers.Serializer):
    """A lifecycle action: comment (reason: the text), acknowledge, resolve (reason; a high or
    critical finding: admins or SECURITY_CLOSE_ROLE), suppress (reason and until, the same),
    reopen (admins), assign (assignee: an admin's username; also given with another action)."""

    action = serializers.ChoiceField(choices=sorted(TRANSITIONS))
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True)
    until = serializers.DateTimeField(required=False, allow_null=True)
    assignee = serializers.CharField(max_length=150, required=False, allow_blank=True)


class IngestResultSerializer(serializers.Serializer):
    read = serializers.IntegerField()
    stored = serializers.IntegerField()
    duplicates = serializers.IntegerField()
    skipped = serializers.IntegerField()
    problems = serializers.ListField(child=serializers.CharField())


def _max_items() -> int:
    return int(settings.SECURITY_INGEST_MAX_ITEMS)


class RawLineField(serializers.CharField):
    """A log line as sent: NUL and control characters are the parser's to refuse (it
    counts them as skipped), not a reason to reject the collector's whole batch. Only
    strings are lines (DRF's CharField would turn 12 into "12")."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators
                           if type(v).__name__ != "ProhibitNullCharactersValidator"]

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("a line must be a string")
        return str(super().to_internal_value(data))


class FlatListField(serializers.ListField):
    """A list whose item errors come back as one list of messages ("item 3: ..."), the
    API's declared 400 shape, not as an object keyed by index."""

    def to_internal_value(self, data: Any) -> list[Any]:
        try:
            return list(super().to_internal_value(data))
        except serializers.ValidationError as exc:
            if not isinstance(exc.detail, dict):
                raise
            raise serializers.ValidationError([
                f"item {index}: {' '.join(str(m) for m in _messages(errors))}"
                for index, errors in list(exc.detail.items())[:20]]) from None


def _messages(errors: Any) -> list[Any]:
    if isinstance(errors, dict):
        return [m for value in errors.values() for m in _messages(value)]
    return list(errors) if isinstance(errors, list) else [errors]


class SshdIngestSerializer(serializers.Serializer):
    """syslog lines of sshd from compute nodes; classic syslog lines carry no year, so
    ``reference`` (default: now) dates them. A request body is at most
    DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB by default): send larger logs in batches."""

    cluster = serializers.SlugField(max_length=64)
    lines = FlatListField(child=RawLineField(
        max_length=MAX_LINE * 4, allow_blank=True, trim_whitespace=False),
        max_length=_max_items(), min_length=1)
    reference = serializers.DateTimeField(required=False)


class InventoryIngestSerializer(serializers.Serializer):
    """Node inventories: ``{"node", "collected_at", "software": {name: version}}`` each."""

    cluster = serializers.SlugField(max_length=64)
    inventories = FlatListField(child=serializers.DictField(),
                                        max_length=_max_items(), min_length=1)


class ProbesIngestSerializer(serializers.Serializer):
    """A collector's probe results (``collector/services.json``)."""

    cluster = serializers.SlugField(max_length=64)
    collected_at = serializers.FloatField(required=False, min_value=0, max_value=2**33)
    probes = FlatListField(child=serializers.DictField(), max_length=_max_items(),
                           min_length=1)
