"""The finding filters, shared by the findings page and the API."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.db.models import Q, QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from apps.analysis.security_rules import RULES
from apps.analysis.security_types import SEVERITIES
from apps.jobs.filters import UtcDateTimeFilter
from apps.security.models import Finding


@extend_schema_field({"type": "integer", "minimum": 0, "maximum": 2**63 - 1})
class JobIdFilter(django_filters.NumberFilter):
    """A Slurm job id: a whole number a BigIntegerField holds (NumberFilter takes 0.5)."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, min_value=0, max_value=2**63 - 1, **kwargs)


class FindingFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(method="filter_q", label="Search")
    status = django_filters.MultipleChoiceFilter(choices=Finding.Status.choices)
    severity = django_filters.MultipleChoiceFilter(choices=[(s, s) for s in SEVERITIES])
    rule = django_filters.ChoiceFilter(field_name="rule_key",
                                       choices=[(k, k) for k in sorted(RULES)])
    cluster = django_filters.CharFilter(field_name="cluster__name")
    node = django_filters.CharFilter(field_name="node_name")
    user = django_filters.CharFilter(field_name="user_name", label="Slurm user")
    team = django_filters.CharFilter(field_name="team__slug")
    job = JobIdFilter(field_name="job_id_raw", label="Job id")
    active = django_filters.BooleanFilter(method="filter_active",
                                          label="Open or acknowledged")
    seen_after = UtcDateTimeFilter(field_name="last_seen", lookup_expr="gte")
    seen_before = UtcDateTimeFilter(field_name="first_seen", lookup_expr="lt")

    class Meta:
        model = Finding
        fields: list[str] = []

    def filter_q(self, qs: QuerySet[Finding], name: str, value: str) -> QuerySet[Finding]:
        value = value.strip()[:200]
        return qs.filter(Q(title__icontains=value) | Q(node_name=value)
                         | Q(user_name=value)) if value else qs

    @extend_schema_field(OpenApiTypes.BOOL)
    def filter_active(self, qs: QuerySet[Finding], name: str,
                      value: bool | None) -> QuerySet[Finding]:
        if value is None:
            return qs
        active = Q(status__in=[Finding.Status.OPEN, Finding.Status.ACKNOWLEDGED])
        return qs.filter(active if value else ~active)
