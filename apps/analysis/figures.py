"""How figures print: one function per kind of number, so every page says it the same way (pure).

Issue 26: the job list, the job page, statements, quotas and SLOs printed GPU-hours with
one, two or no decimals, GPU-seconds as bare "Events 26130362", shares with different
rounding and amounts with and without their currency. Every page now formats through
these (``apps/core/templatetags/portal.py`` gives templates the same functions as the
``gpuh``, ``percent``, ``money`` and ``as_of`` filters).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal


def share_text(share: float) -> str:
    """A share (0.42) as a whole percent: ``42%`` (half to even, as ``round``)."""
    return f"{round(share * 100)}%"


def gpu_hours_text(hours: float | Decimal, unit: bool = True) -> str:
    """GPU-hours with one decimal and thousands separated: ``1,500.9 GPU-h``."""
    text = f"{float(hours):,.1f}"
    return f"{text} GPU-h" if unit else text


def gpu_seconds_text(seconds: float, unit: bool = True) -> str:
    """GPU-seconds (an SLO's efficiency events) as GPU-hours: 26130362 -> ``7,258.4 GPU-h``."""
    return gpu_hours_text(seconds / 3600, unit)


def money_text(amount: Decimal | float | int, currency: str) -> str:
    """An amount always with its currency: ``1,234.50 EUR`` (two decimals)."""
    if not currency:
        raise ValueError("an amount needs its currency")
    return f"{Decimal(str(amount)):,.2f} {currency}"


def as_of_text(when: datetime, how: str) -> str:
    """When a snapshot was taken, and what it is: ``as of 2026-12-01 01:00 UTC (statement
    draft)``; ``how`` says what kind of snapshot (live, Slurm's sshare, a draft)."""
    return f"as of {when:%Y-%m-%d %H:%M %Z}".rstrip() + (f" ({how})" if how else "")
