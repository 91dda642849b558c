"""The report's parameters, one filter set for the page and the API: a date range (local
days, inclusive), up to three groups, a period, a team. Bad input is a form error (a 400),
never a guess: an unknown group, a reversed range, more periods than a page can show."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import django_filters
from django import forms
from django.utils import timezone

from apps.accounts.models import Team
from apps.analysis.periods import Granularity, PeriodError, period_edges
from apps.analysis.reports import DIMENSIONS
from apps.reports.services import Params

MAX_GROUPS = 3
MAX_DAYS = 366 * 20  # a range with no period: one GROUP BY, but not the whole calendar


class ReportForm(forms.Form):
    """Checks the fields together (each field checks itself first)."""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        today = timezone.localdate()
        first = data.get("date_from") or today.replace(day=1)
        last = data.get("date_to") or max(today, first)
        data["date_from"], data["date_to"] = first, last
        groups = list(dict.fromkeys(data.get("group") or ["team"]))
        if len(groups) > MAX_GROUPS:
            self.add_error("group", f"at most {MAX_GROUPS} groups at once")
        data["group"] = groups
        if (last - first).days > MAX_DAYS:
            raise forms.ValidationError(f"a range is at most {MAX_DAYS} days")
        try:
            period_edges(first, last, _granularity(data.get("period")), UTC)
        except PeriodError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data


def _granularity(value: str | None) -> Granularity | None:
    return Granularity(value) if value else None


def _teams(request: Any) -> Any:
    return Team.objects.visible_to(request.user) if request else Team.objects.none()


class ReportFilterSet(django_filters.FilterSet):
    """Declares the parameters only: the rows are computed (``services.build``)."""

    date_from = django_filters.DateFilter(help_text="first day, YYYY-MM-DD (default: the "
                                          "1st of this month)")
    date_to = django_filters.DateFilter(help_text="last day, inclusive (default: today)")
    group = django_filters.MultipleChoiceFilter(
        choices=list(DIMENSIONS.items()),
        help_text=f"group by (repeat, up to {MAX_GROUPS}): " + ", ".join(DIMENSIONS))
    period = django_filters.ChoiceFilter(choices=[(g.value, g.value) for g in Granularity],
                                         help_text="one row per day, week or month")
    team = django_filters.ModelChoiceFilter(queryset=_teams, to_field_name="slug",
                                            help_text="team slug: only that team's jobs")

    class Meta:
        form = ReportForm


def params_of(cleaned: dict[str, Any]) -> Params:
    return Params(first=cleaned["date_from"], last=cleaned["date_to"],
                  group=tuple(cleaned["group"]), period=_granularity(cleaned.get("period")),
                  team=cleaned.get("team"))
