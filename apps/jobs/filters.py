"""The job filters, shared by the job list page and the API."""

from __future__ import annotations

from datetime import UTC, datetime

import django_filters
from django import forms
from django.db.models import Exists, OuterRef, Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from apps.jobs.models import Job, JobFinding
from apps.jobs.models.jobs import PLAUSIBLE

# Efficiency bands on the useful share of allocated GPU-hours (JobMetrics.useful_fraction).
BANDS: dict[str, tuple[float, float]] = {
    "idle": (0.0, 0.05), "low": (0.05, 0.25), "medium": (0.25, 0.6), "high": (0.6, 1.01)}
BAND_CHOICES = [("idle", "idle (< 5% computing)"), ("low", "low (5-25%)"),
                ("medium", "medium (25-60%)"), ("high", "high (60% and more)"),
                ("unknown", "not measured")]
# Records flagged at import (issue 25): "1" is what admins review (not accepted yet)
IMPLAUSIBLE_CHOICES = [("1", "flagged, waiting for an admin"), ("accepted", "flagged, accepted"),
                       ("any", "flagged, accepted or not")]


class FloatFilter(django_filters.Filter):
    """Any finite number as JSON and OpenAPI mean it (``1.8e181`` included).

    NumberFilter uses a Decimal field capped at 1e50, so it refused numbers the schema
    allows: a 400 for a valid request (found by tests/api/test_fuzz.py).
    """

    field_class = forms.FloatField


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": 2**31 - 1})
class LabelNumberFilter(django_filters.NumberFilter):
    """A whole number a job's script states (``Job.labels``), compared as JSON. Bounded,
    so no value reaches the database that a JSON number in SQLite cannot hold."""

    field_class = forms.IntegerField

    def __init__(self, label_key: str, label: str) -> None:
        super().__init__(field_name=f"labels__{label_key}", label=label, min_value=0,
                         max_value=2**31 - 1)


def _label_path_filter(label_key: str, label: str) -> django_filters.CharFilter:
    """Jobs whose script names a path (dataset, checkpoint) containing the text."""
    return django_filters.CharFilter(field_name=f"labels__{label_key}", lookup_expr="icontains",
                                     label=label)


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    """Compares in UTC. PostgreSQL refuses offsets past ±15:59 ("time zone displacement out
    of range"), which ISO 8601 allows: a 500 found by fuzzing. Instants past the calendar's
    ends once in UTC clamp to its first or last instant."""

    def filter(self, qs: QuerySet[Job], value: datetime | None) -> QuerySet[Job]:
        return super().filter(qs, _in_utc(value) if value is not None else None)


def _in_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:
        edge = datetime.max if value.year > 1 else datetime.min
        return edge.replace(tzinfo=UTC)


class JobFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(method="filter_q", label="Job id or name")
    # distinct=False: a column of the job itself cannot duplicate rows, and SELECT DISTINCT
    # would sort every matching job before the LIMIT instead of reading an index in order.
    state = django_filters.MultipleChoiceFilter(choices=Job.State.choices, distinct=False,
                                                label="State")
    cluster = django_filters.CharFilter(field_name="cluster__name", label="Cluster")
    partition = django_filters.CharFilter(label="Partition")
    user = django_filters.CharFilter(field_name="user_name", label="Slurm user")
    account = django_filters.CharFilter(label="Slurm account")
    team = django_filters.CharFilter(field_name="team__slug", label="Team")
    submitted_after = UtcDateTimeFilter(field_name="submit_time", lookup_expr="gte",
                                        label="Submitted after")
    submitted_before = UtcDateTimeFilter(field_name="submit_time", lookup_expr="lt",
                                         label="Submitted before")
    min_gpus = FloatFilter(field_name="gpu_equivalent", lookup_expr="gte", label="Min GPUs")
    max_gpus = FloatFilter(field_name="gpu_equivalent", lookup_expr="lte", label="Max GPUs")
    # AI-aware labels from the batch script (apps/clusters/labels.py)
    launcher = django_filters.CharFilter(field_name="labels__launcher", label="Launcher")
    framework = django_filters.CharFilter(field_name="labels__framework", label="Framework")
    nodes = LabelNumberFilter("nodes", "Nodes the script asks for")
    procs_per_node = LabelNumberFilter("procs_per_node", "Processes per node")
    tensor_parallel = LabelNumberFilter("tensor_parallel", "Tensor-parallel size")
    pipeline_parallel = LabelNumberFilter("pipeline_parallel", "Pipeline-parallel size")
    dataset = _label_path_filter("datasets", "Dataset path contains")
    checkpoint = _label_path_filter("checkpoints", "Checkpoint path contains")
    efficiency = django_filters.ChoiceFilter(choices=BAND_CHOICES, method="filter_efficiency",
                                             label="Efficiency band")
    has_findings = django_filters.BooleanFilter(method="filter_findings", label="Has findings")
    implausible = django_filters.ChoiceFilter(
        choices=IMPLAUSIBLE_CHOICES, method="filter_implausible", label="Implausible record")

    class Meta:
        model = Job
        fields: list[str] = []

    def filter_q(self, qs: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        """A number matches the raw id, the array id or the display id; text matches job
        names (a substring) and Slurm user names (the whole name, as ``?user=``)."""
        value = value.strip()[:200]
        if not value:
            return qs
        head = value.split("_")[0].split("+")[0]
        if head.isdigit():
            number = int(head)
            if number < 2**63:
                return qs.filter(Q(job_id=number) | Q(array_job_id=number)
                                 | Q(het_job_id=number) | Q(display_id=value))
        # user_name has an index of its own, so PostgreSQL ORs it with the trigram index. It
        # is ORed only when some job has that user name: the planner guesses 1/(distinct
        # users) for any name outside its sample, and at 10M jobs that guess made it read
        # every job by time for a rare job name (docs/joblist.md). The probe is one index read.
        match = Q(name__icontains=value)
        if Job.objects.filter(user_name=value).exists():
            match |= Q(user_name=value)
        return qs.filter(match)

    def filter_efficiency(self, qs: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        """By the share of allocated GPU-hours spent computing; ``unknown``: not measured."""
        if value == "unknown":
            return qs.filter(Q(metrics__isnull=True) | Q(metrics__useful_fraction__isnull=True))
        low, high = BANDS[value]
        return qs.filter(metrics__useful_fraction__gte=low, metrics__useful_fraction__lt=high)

    def filter_implausible(self, qs: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        """Records flagged implausible at import: not accepted yet (``1``), accepted, any."""
        flagged = qs.exclude(PLAUSIBLE)
        if value == "accepted":
            return flagged.filter(implausible_accepted_at__isnull=False)
        if value == "any":
            return flagged
        return flagged.filter(implausible_accepted_at__isnull=True)

    @extend_schema_field(OpenApiTypes.BOOL)  # a method filter is documented as a string otherwise
    def filter_findings(self, qs: QuerySet[Job], name: str, value: bool | None) -> QuerySet[Job]:
        """Jobs with (or without) any finding, whatever wrote it: the diagnosis (and other
        engines' ``JobFinding`` rows) or the security rules (``security.Finding``)."""
        if value is None:
            return qs
        from apps.security.models import Finding

        # One EXISTS over a UNION ALL, probed per candidate row through each table's job
        # index. ``EXISTS(a) OR EXISTS(b)`` made PostgreSQL hash every finding in both
        # tables on each request (a full scan: ~50 ms at 175k findings), whatever the page.
        either = JobFinding.objects.filter(job=OuterRef("pk")).values("job_id").union(
            Finding.objects.filter(job=OuterRef("pk")).values("job_id"), all=True)
        return qs.filter(Exists(either) if value else ~Exists(either))
