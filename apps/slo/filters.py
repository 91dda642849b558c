"""SLO filters, shared by the pages and the API: team slug, objective, status, month."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from drf_spectacular.utils import extend_schema_field

from apps.analysis.slo import Status
from apps.chargeback.filters import MonthFilter
from apps.slo.models import Objective, Scorecard, Snapshot

STATUSES = [(s.value, s.value.replace("_", " ")) for s in Status]


@extend_schema_field({"type": "integer", "minimum": 1, "maximum": 2**63 - 1})
class IdFilter(django_filters.NumberFilter):
    """An object id: a whole number the database holds (NumberFilter takes 0.5 and 1e300)."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, min_value=1, max_value=2**63 - 1, **kwargs)


class ScorecardFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", help_text="team slug")
    objective = IdFilter(field_name="objective_id", help_text="SLO id")
    status = django_filters.ChoiceFilter(choices=STATUSES)

    class Meta:
        model = Scorecard
        fields = ["team", "objective", "status"]


class SnapshotFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", help_text="team slug")
    objective = IdFilter(field_name="objective_id", help_text="SLO id")
    month = MonthFilter(field_name="month", help_text="YYYY-MM")

    class Meta:
        model = Snapshot
        fields = ["team", "objective", "month"]


class ObjectiveFilterSet(django_filters.FilterSet):
    sli = django_filters.ChoiceFilter(choices=Objective.Sli.choices)
    enabled = django_filters.BooleanFilter()

    class Meta:
        model = Objective
        fields = ["sli", "enabled"]
