"""Calendar months for the archive's monthly partitions (issue 29): pure date arithmetic.

A month is the ``date`` of its first day. The archive's partition key is the month a job
ended, or, while it runs, the month it was submitted (``archive_month``); a job's rows are
therefore in one of at most two months (``archive_months``), which is what every query by job
filters on so PostgreSQL reads one or two partitions. Retention keeps the current month and
the ``keep`` full months before it (``expired``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime


def month_of(moment: datetime | date) -> date:
    """The first day of ``moment``'s month, in UTC for an aware datetime."""
    if isinstance(moment, datetime) and moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return date(moment.year, moment.month, 1)


def add_months(month: date, n: int) -> date:
    """``month`` moved by ``n`` months (negative: back), as a first day."""
    index = month.year * 12 + month.month - 1 + n
    return date(index // 12, index % 12 + 1, 1)


def archive_month(submit: datetime, end: datetime | None) -> date:
    """The partition of a job's archive rows: its end month, its submit month while it runs."""
    return month_of(end if end is not None else submit)


def archive_months(submit: datetime, end: datetime | None) -> tuple[date, ...]:
    """Every month a job's rows can be in: rows written while it ran stay in its submit
    month until the final archive rewrites them under its end month."""
    months = {month_of(submit)}
    if end is not None:
        months.add(month_of(end))
    return tuple(sorted(months))


def months_ahead(today: date, ahead: int) -> list[date]:
    """The current month and the ``ahead`` months after it: the partitions to have ready."""
    first = month_of(today)
    return [add_months(first, i) for i in range(ahead + 1)]


def cutoff(today: date, keep: int) -> date:
    """The oldest month retention keeps: the current month minus ``keep`` months."""
    return add_months(month_of(today), -keep)


def expired(months: Iterable[date], today: date, keep: int) -> list[date]:
    """The months older than ``cutoff``, oldest first; ``keep`` < 1 keeps everything."""
    if keep < 1:
        return []
    oldest = cutoff(today, keep)
    return sorted(m for m in months if m < oldest)


def partition_name(table: str, month: date) -> str:
    """``jobs_jobmetricsummary_p2026_12``: the table of one month."""
    return f"{table}_p{month.year:04d}_{month.month:02d}"
