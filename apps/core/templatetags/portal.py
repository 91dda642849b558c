"""Small display filters shared by every template."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django import template

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
