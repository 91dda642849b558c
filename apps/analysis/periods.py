"""Periods of a report and how a group of jobs' seconds spread over them (pure).

``edges`` are the instants between periods: ``[lo, ..., hi]``, local midnights of days, of
Mondays or of the 1st of months, clipped to the range. SQL puts each job in its first and
last period (``apps.core.sql.period_index``) and sums, per group of jobs sharing both, the
weights and the weighted start and end (seconds from ``lo``); ``spread`` turns those three
sums into seconds per period exactly. The SLO efficiency trend (one period a day) and the
usage reports (days, weeks, months) share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from enum import StrEnum


class Granularity(StrEnum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"


class PeriodError(ValueError):
    """A range or granularity a report refuses (reversed, too many periods)."""


MAX_PERIODS = 400  # a year of days and some; weeks over 7 years; months over 33


def spread(g: float, s: float, e: float, sd: int, ed: int,
           rel: Sequence[float]) -> tuple[int, list[float]]:
    """Per-period seconds of a group of jobs that all run from period ``sd`` to ``ed``:
    ``g`` = sum of weights, ``s``/``e`` = weighted sums of start/end (seconds from the
    first edge, ``rel`` the edges as such seconds). Returns the first period and one value
    per period up to the last (other periods have none)."""
    last = len(rel) - 2
    sd, ed = min(max(sd, 0), last), min(max(ed, sd, 0), last)
    if sd == ed:
        return sd, [e - s]
    full = [(rel[i + 1] - rel[i]) * g for i in range(sd + 1, ed)]
    return sd, [rel[sd + 1] * g - s, *full, e - rel[ed] * g]


def _next(day: date, granularity: Granularity) -> date:
    if granularity is Granularity.DAY:
        return day + timedelta(days=1)
    if granularity is Granularity.WEEK:
        return day + timedelta(days=7 - day.weekday())  # the next Monday
    return date(day.year + (day.month == 12), day.month % 12 + 1, 1)


def midnight(day: date, tz: tzinfo) -> datetime:
    """Local midnight of ``day`` as an aware UTC datetime."""
    return datetime.combine(day, time.min, tz).astimezone(UTC)


def count_periods(first: date, last: date, granularity: Granularity) -> int:
    """How many periods the days ``first``..``last`` (inclusive) touch."""
    if granularity is Granularity.DAY:
        return (last - first).days + 1
    if granularity is Granularity.WEEK:
        monday = (last - timedelta(days=last.weekday())) - (first - timedelta(days=first.weekday()))
        return monday.days // 7 + 1
    return (last.year - first.year) * 12 + last.month - first.month + 1


def period_edges(first: date, last: date, granularity: Granularity | None,
                 tz: tzinfo) -> list[datetime]:
    """Edges of the periods covering the days ``first``..``last`` (inclusive) in ``tz``;
    ``None``: one period, the whole range. Refuses a reversed range and more than
    ``MAX_PERIODS`` periods, naming the limit."""
    if last < first:
        raise PeriodError(f"the range ends ({last}) before it starts ({first})")
    if granularity is not None:
        n = count_periods(first, last, granularity)
        if n > MAX_PERIODS:
            raise PeriodError(f"{n} {granularity.value}s is more than {MAX_PERIODS} periods: "
                              f"choose a shorter range or a coarser period")
    end = last + timedelta(days=1)
    days = [first]
    while granularity is not None and (nxt := _next(days[-1], granularity)) < end:
        days.append(nxt)
    return [midnight(d, tz) for d in [*days, end]]
