"""Small display filters shared by every template."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from apps.analysis.figures import as_of_text, gpu_hours_text, money_text, share_text

register = template.Library()


@register.filter
def duration(value: timedelta | None) -> str:
    """``2d 3h``, ``3h 05m``, ``4m 10s``: compact and sortable by eye."""
    if value is None:
        return ""
    seconds = int(value.total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s"


@register.filter
def gpus(value: float | None) -> str:
    """Whole GPUs as integers, fractions (shards, MIG) with two decimals."""
    if not value:
        return "0"
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


@register.filter
def mb(value: int | None) -> str:
    if not value:
        return "—"
    return f"{value / 1024:.0f} GB" if value >= 1024 else f"{value} MB"


@register.filter
def compact_json(value: Any) -> str:
    if not value:
        return ""
    return json.dumps(value, separators=(", ", ": "), sort_keys=True)[:200]


@register.filter
def gbs(value: float | None) -> str:
    """A byte rate: ``2.5 GB/s``, ``40 MB/s``, ``—`` when not measured."""
    if value is None:
        return "—"
    if value >= 1e9:
        return f"{value / 1e9:.1f} GB/s"
    return f"{value / 1e6:.0f} MB/s" if value >= 1e6 else f"{value / 1e3:.0f} kB/s"


@register.filter
def gbits(value: float | None) -> str:
    """A link rate given in bytes per second, as network people say it: ``400 Gb/s``."""
    if value is None:
        return "—"
    return f"{value * 8 / 1e9:.0f} Gb/s"


@register.simple_tag
def array_summary(arrays: dict[Any, Any] | None, job: Any) -> Any:
    """The summary of the array ``job`` stands for in a grouped list (None otherwise)."""
    if not arrays or not getattr(job, "array_job_id", None):
        return None
    return arrays.get((job.cluster_id, job.array_job_id))


@register.filter
def band(value: float | None) -> str:
    """The efficiency band's name (the list's colour): idle, low, medium or high."""
    if value is None:
        return "unknown"
    return "idle" if value < 0.05 else "low" if value < 0.25 else \
        "medium" if value < 0.6 else "high"


@register.filter
def reason_words(reason: str | None) -> str:
    """Slurm's pending reason code in words (``apps/analysis/pending.py``)."""
    from apps.analysis.pending import reason_words as words

    return words(reason or "")


@register.filter
def is_quota_reason(reason: str | None) -> bool:
    from apps.analysis.pending import is_quota_reason as quota

    return quota(reason or "")


def _number(value: Any) -> float | None:
    """A float from a number or numeric string; None for None, blanks and words."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@register.filter
def percent(value: Any) -> str:
    """A share (0.42) as a whole percent (``42%``); ``—`` when not measured.

    ``figures.share_text``: the job list, the alerts and the findings round the same way."""
    number = _number(value)
    return "—" if number is None else share_text(number)


@register.filter
def gpuh(value: Any, unit: str = "unit") -> str:
    """GPU-hours as every page prints them (``1,500.9 GPU-h``; ``gpuh:"bare"`` leaves the
    unit to the column's heading); ``—`` when unknown."""
    number = _number(value)
    return "—" if number is None else gpu_hours_text(number, unit != "bare")


@register.filter
def gpuh_minutes(value: Any) -> str:
    """GPU-minutes (Slurm's ``GrpTRESMins``) as GPU-hours, printed as ``gpuh`` prints them."""
    number = _number(value)
    return "—" if number is None else gpu_hours_text(number / 60)


@register.filter
def money(value: Any, currency: str) -> str:
    """An amount with its currency (``1,234.50 EUR``); ``—`` when there is none."""
    number = _number(value)
    if number is None or not currency:
        return "—" if number is None else f"{value}"
    return money_text(Decimal(str(value)), currency)


@register.filter
def as_of(value: Any, how: str = "") -> str:
    """``as of 2026-12-01 01:00 UTC (how)``, in the current time zone; "" when unknown."""
    if not isinstance(value, datetime):
        return ""
    return as_of_text(timezone.localtime(value) if timezone.is_aware(value) else value, how)


@register.filter
def percent_of(part: Any, whole: Any) -> str:
    """``part`` as a whole percent of ``whole``; ``—`` when the whole is zero or missing."""
    number, total = _number(part), _number(whole)
    if number is None or not total:
        return "—"
    return f"{round(number / total * 100)}%"


@register.simple_tag(takes_context=True)
def nav_link(context: dict[str, Any], url_name: str, label: str, *also_active: str) -> str:
    """One main-nav link, marked ``aria-current`` on its page (and on the ``also_active`` ones)."""
    request = context.get("request")
    match = getattr(request, "resolver_match", None)
    current = getattr(match, "url_name", None)
    active = current is not None and current in (url_name, *also_active)
    return format_html('<a href="{}"{}>{}</a>', reverse(url_name),
                       mark_safe(' aria-current="page"') if active else "", label)


# Outside text (a job's comment, work dir, node list; Slurm takes 200,000 characters without
# complaint) is shown up to LONG_TEXT_SHOWN characters; the rest opens in a <details>, up to
# LONG_TEXT_MAX in all, so one hostile record cannot make a page of megabytes (issue 27).
LONG_TEXT_SHOWN = 300
LONG_TEXT_MAX = 20_000


@register.filter
def long_text(value: Any, shown: int = LONG_TEXT_SHOWN) -> str:
    """The text, escaped; past ``shown`` characters the rest behind "show all"."""
    text = "" if value is None else str(value)
    if len(text) <= shown:
        return format_html("{}", text)
    rest = text[shown:LONG_TEXT_MAX]
    left_out = len(text) - shown - len(rest)
    note = format_html(' <span class="muted">… {} more characters not shown here (the API has '
                       'the full text)</span>', f"{left_out:,}") if left_out else ""
    return format_html('{}<details class="long-text"><summary>… show all {} characters'
                       '</summary>{}{}</details>', text[:shown], f"{len(text):,}", rest, note)
