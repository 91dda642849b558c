"""Usage reports' rows (pure): what one group of jobs in one period adds up to.

The numbers come from the statements' and the SLOs' own queries (``apps/reports/services.py``
says which); this module only names the groups, joins the pieces into rows and totals them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date

from apps.analysis.chargeback import UNKNOWN_MODEL, model_shares
from apps.analysis.slo import Counts

# The dimensions a report groups by, in the order a row names them, with their column titles.
DIMENSIONS: dict[str, str] = {
    "team": "Team", "user": "User", "account": "Account", "partition": "Partition",
    "gpu_model": "GPU model", "size": "Job size (GPUs)",
}
NO_TEAM = "(no team)"


def dominant_model(gpu_types: Mapping[str, float] | None) -> str:
    """The model holding most of a job's GPUs (ties: the first by name; none: unknown).
    Job counts and waits cannot be split by share as GPU-hours are (``model_shares``)."""
    shares = model_shares(gpu_types or {})
    return max(sorted(shares), key=lambda m: shares[m]) if shares else UNKNOWN_MODEL


@dataclass
class Row:
    """One group in one period. Hours: GPU-hours inside the period (statements' sums);
    ``started``/``ended``: GPU jobs started (waits) and ended (endings counted by the job
    success SLI); ``success`` and ``efficiency`` are the SLIs' good/total events."""

    group: tuple[str, ...]
    period: int = 0
    gpu_hours: float = 0.0
    useful_hours: float = 0.0
    started: int = 0
    wait_p50: float | None = None
    wait_p90: float | None = None
    wait_p95: float | None = None
    ended: int = 0
    success: Counts = field(default_factory=Counts)
    efficiency: Counts = field(default_factory=Counts)

    @property
    def success_rate(self) -> float | None:
        return self.success.sli

    @property
    def efficiency_share(self) -> float | None:
        return self.efficiency.sli


def add_hours(row: Row, allocated: float, useful: float) -> Row:
    """``row`` with these hours added (in place: reports add up thousands of rows)."""
    row.gpu_hours += allocated
    row.useful_hours += useful
    return row


def table(rows: Iterable[Row]) -> list[Row]:
    """Rows by period, then group; rows with nothing in them left out."""
    kept = [r for r in rows if r.gpu_hours > 0 or r.started or r.ended or r.efficiency.total]
    return sorted(kept, key=lambda r: (r.period, r.group))


def total(rows: Sequence[Row]) -> Row:
    """Hours, counts and SLI events added up (percentiles do not add: left empty)."""
    out = Row(group=("Total",))
    for r in rows:
        add_hours(out, r.gpu_hours, r.useful_hours)
        out.started += r.started
        out.ended += r.ended
        out.success = out.success.plus(r.success)
        out.efficiency = out.efficiency.plus(r.efficiency)
    return out


def period_label(first_day: date, granularity: str | None) -> str:
    """``2026-11`` for a month, the period's first day otherwise (``2026-11-02``)."""
    if granularity is None:
        return "whole range"
    return f"{first_day:%Y-%m}" if granularity == "month" else first_day.isoformat()
