"""Chargeback filters, shared by pages and the API: a month (YYYY-MM) and a team slug."""

from __future__ import annotations

from datetime import date
from typing import Any

import django_filters
from django import forms
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema_field

from apps.chargeback.models import Statement

MONTH_PATTERN = r"^2\d{3}-(0[1-9]|1[0-2])$"  # what services.parse_month accepts


class MonthField(forms.Field):
    """Text cleaned into the month's first day; not stripped: " 2026-11" is not a month (a
    400, as the schema says)."""

    def to_python(self, value: Any) -> date | None:
        from apps.chargeback.services import ChargebackError, parse_month

        if value in self.empty_values:
            return None
        try:
            return parse_month(str(value))
        except ChargebackError as exc:
            raise forms.ValidationError(str(exc)) from None


@extend_schema_field({"type": "string", "pattern": MONTH_PATTERN})
class MonthFilter(django_filters.Filter):
    """``?month=2026-11`` (a 400 for anything else, never a silent "all months")."""

    field_class = MonthField

    def filter(self, qs: QuerySet[Any], value: date | None) -> QuerySet[Any]:
        return qs.filter(**{self.field_name: value}) if value else qs


class StatementFilterSet(django_filters.FilterSet):
    month = MonthFilter(field_name="period__month", help_text="YYYY-MM")
    team = django_filters.CharFilter(field_name="team__slug", help_text="team slug")
    status = django_filters.ChoiceFilter(choices=Statement.Status.choices)

    class Meta:
        model = Statement
        fields = ["month", "team", "status"]


class UsageFilterSet(django_filters.FilterSet):
    """Only declares the usage endpoint's parameters (its rows are computed, not a queryset)."""

    month = MonthFilter(help_text="YYYY-MM (default: this month)")
    team = django_filters.CharFilter(help_text="team slug: only that team's lines")
