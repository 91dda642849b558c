"""A statement's figures as every page states them (issue 26)."""

from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from apps.analysis.figures import as_of_text
from apps.chargeback.models import Statement
from apps.chargeback.services import current_month
from apps.core.facts import fact_html

register = template.Library()


@register.simple_tag
def month_hours(statement: Any, bare: bool = False) -> SafeString:
    """The team's GPU-hours in the statement's month, as of its computation: the figure the
    chargeback, statement, quota and team pages all show (``team-month-gpu-hours``)."""
    if statement is None or statement == "":
        return fact_html("team-month-gpu-hours", None, None)
    return fact_html("team-month-gpu-hours", statement.team, statement.allocated_hours,
                     at=statement.computed_at, bare=bare, month=statement.period.month)


def snapshot_words(statement: Any) -> str:
    """What a statement's figures are a snapshot of, with when: ``as of 2026-11-02 06:00 UTC
    (statement draft)``; a final statement's as of its last computation."""
    if statement.computed_at is None:
        return "not computed yet"
    how = "final statement" if statement.is_final else "statement draft"
    return as_of_text(timezone.localtime(statement.computed_at), how)


@register.simple_tag
def month_hours_as_of(statement: Any) -> SafeString:
    """The team's GPU-hours this month with the snapshot they come from, as the quota, quota
    edit and team pages say it (the statement's own page has its status beside it)."""
    if statement is None or statement == "":
        return format_html('<span class="muted">no statement yet</span>')
    return format_html('{} <span class="small muted">{}</span>', month_hours(statement),
                       snapshot_words(statement))


@register.simple_tag(takes_context=True)
def team_month(context: dict[str, Any], team: Any) -> SafeString:
    """The team page's line on this month: its statement's GPU-hours and snapshot, linked
    for those who may open the statement (leads, admins)."""
    month = current_month()
    statement = (Statement.objects.filter(team=team, period__month=month)
                 .select_related("team", "period").first())
    user = getattr(context.get("request"), "user", None)
    link = format_html(' · <a href="{}">statement</a>', reverse(
        "chargeback-statement", args=[statement.pk])) if statement is not None and \
        Statement.objects.visible_to(user).filter(pk=statement.pk).exists() else ""
    return format_html('<p id="team-month">GPU-hours this month ({}): {}{}</p>',
                       f"{month:%Y-%m}", month_hours_as_of(statement), link)
