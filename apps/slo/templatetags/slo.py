"""Template helpers for SLO pages: percentages, durations, statuses, and the two small
blocks other pages include (a team's SLO status on its page; the worst budgets on Platform)."""

from __future__ import annotations

import math
from typing import Any

from django import template

from apps.analysis.figures import gpu_seconds_text
from apps.slo.models import Scorecard

register = template.Library()
NONE = "—"


def _number(value: Any) -> float | None:
    """A finite number, or None for what a template may hand a filter instead: None, the
    empty string Django gives for a missing key (a scorecard without data has no ``p50``),
    text, NaN."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
STATUS_WORDS = {"ok": "ok", "slow_burn": "burning slowly", "fast_burn": "burning fast",
                "breached": "breached", "no_data": "no data"}


@register.filter
def pct(value: Any, digits: int = 1) -> str:
    """A share as a percentage (``97.3%``), ``—`` when there is none."""
    number = _number(value)
    if number is None:
        return NONE
    return f"{number * 100:.{int(digits)}f}%"


@register.filter
def seconds(value: Any) -> str:
    """``2d 3h``, ``3h 05m``, ``12m``: a wait or a span given in seconds."""
    number = _number(value)
    if number is None or number < 0:
        return NONE
    total = round(number)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days}d {hours}h"
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m"


@register.filter
def gpu_hours(value: Any) -> str:
    """GPU-seconds as GPU-hours, printed as every page prints them (``figures``)."""
    number = _number(value)
    return NONE if number is None else gpu_seconds_text(number, unit=False)


@register.filter
def status_words(status: str) -> str:
    return STATUS_WORDS.get(status, status)


@register.filter
def rate(value: Any) -> str:
    number = _number(value)
    return NONE if number is None else f"{number:.2g}" if number < 10 else f"{number:.0f}"


@register.filter
def get_rate(rates: dict[str, float | None] | None, window: str) -> str:
    """The burn rate of one window from a scorecard's ``burn_rates``."""
    return rate((rates or {}).get(window))


@register.inclusion_tag("slo/partials/team_summary.html", takes_context=True)
def team_slo_summary(context: dict[str, Any], team: Any) -> dict[str, Any]:
    """The team's scorecards in one line each, for the team page (visible ones only)."""
    user = context["request"].user
    cards = (Scorecard.objects.visible_to(user).filter(team=team)
             .select_related("objective").order_by("objective__order"))
    return {"team": team, "slo_cards": list(cards)}


@register.inclusion_tag("slo/partials/platform_summary.html", takes_context=True)
def slo_summary(context: dict[str, Any], limit: int = 8) -> dict[str, Any]:
    """The scorecards with the least budget left (the Platform page, which is the admins')."""
    visible = Scorecard.objects.visible_to(context["request"].user)
    cards = (visible.select_related("objective", "team").exclude(status="no_data")
             .order_by("budget_remaining")[:limit])
    return {"slo_cards": list(cards), "slo_total": visible.count()}
