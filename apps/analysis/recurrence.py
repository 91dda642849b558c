"""Recurring windows on the wall clock of a site: "daily at 04:00 for 5 minutes",
"Tuesdays at 08:00 for 6 hours", in the site's time zone.

A :class:`Recurrence` starts at ``at`` (local wall-clock time) on every day, or on the
listed weekdays, and lasts ``minutes``. An occurrence belongs to the day it *starts*: a
Sunday 22:00 window of 4 hours covers Monday 01:00, and a daily 23:55 window of 10 minutes
covers 00:03 of the next day. Durations are real minutes, so across a daylight-saving
change a 04:00 + 5 min window is still 5 minutes long. A start time the clock skips
(02:30 on the spring-forward night) begins at the instant 02:30 would be at the old
offset (03:30 new time); a start time the clock passes twice (the autumn night) starts
at its first pass. Pure: no Django; time zones from the standard library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
MAX_MINUTES = 7 * 24 * 60  # a weekly window may last the whole week, no longer


@dataclass(frozen=True)
class Recurrence:
    """Every day (``weekdays`` empty) or the listed weekdays (0 = Monday) at ``at`` in
    ``tz``, for ``minutes``; ``first``/``last`` bound the days occurrences start on."""

    at: time
    minutes: float
    weekdays: frozenset[int] = frozenset()
    tz: str = "UTC"
    first: date | None = None
    last: date | None = None
    # Every GPU of a frame asks about the same bucket ends: remember the answers.
    _memo: dict[float, bool] = field(default_factory=dict, compare=False, hash=False,
                                     repr=False)

    def active(self, t: float) -> bool:
        """Whether an occurrence covers the instant ``t`` (unix seconds): start <= t < end."""
        known = self._memo.get(t)
        if known is None:
            if len(self._memo) > 100_000:
                self._memo.clear()
            known = self._memo[t] = self._active(t)
        return known

    def _active(self, t: float) -> bool:
        zone = _zone(self.tz)
        today = datetime.fromtimestamp(t, zone).date()
        # An occurrence that started up to ``minutes`` ago may still run: look back that
        # many days (one more for a window that crosses midnight).
        for back in range(math.ceil(self.minutes / 1440) + 1):
            start = self._start(today - timedelta(days=back), zone)
            if start is not None and start <= t < start + self.minutes * 60:
                return True
        return False

    def occurrences(self, start: float, end: float, limit: int = 1000) -> list[tuple[float, float]]:
        """The occurrences overlapping ``[start, end)`` as ``(begin, end)`` unix seconds, at
        most ``limit`` (for pages that show the next windows)."""
        zone = _zone(self.tz)
        day = datetime.fromtimestamp(start, zone).date() - \
            timedelta(days=math.ceil(self.minutes / 1440))
        last = datetime.fromtimestamp(end, zone).date()
        out: list[tuple[float, float]] = []
        while day <= last and len(out) < limit:
            begin = self._start(day, zone)
            if begin is not None and begin < end and begin + self.minutes * 60 > start:
                out.append((begin, begin + self.minutes * 60))
            day += timedelta(days=1)
        return out

    def _start(self, day: date, zone: ZoneInfo) -> float | None:
        if self.weekdays and day.weekday() not in self.weekdays:
            return None
        if (self.first and day < self.first) or (self.last and day > self.last):
            return None
        # fold=0: the first pass of an ambiguous time; a skipped time at the old offset.
        return datetime.combine(day, self.at, tzinfo=zone).timestamp()


@lru_cache(maxsize=64)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def check_zone(name: str) -> str:
    """'' when ``name`` is a time zone this machine knows, else why not."""
    try:
        _zone(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"{name!r} is not a time zone (e.g. Europe/Berlin, UTC)"
    return ""


_DAY_NAMES = {name: i for i, names in enumerate(
    [("mon", "monday"), ("tue", "tues", "tuesday"), ("wed", "wednesday"),
     ("thu", "thur", "thurs", "thursday"), ("fri", "friday"), ("sat", "saturday"),
     ("sun", "sunday")]) for name in names}


def parse_weekdays(text: str) -> frozenset[int]:
    """``"tue"``, ``"mon,thu"``, ``"mon-fri"`` (any case, comma or space separated; short
    or full names) as weekday numbers (0 = Monday); '' is every day. Raises ValueError
    naming the bad part."""
    days: set[int] = set()
    for part in text.replace(",", " ").lower().split():
        ends = part.split("-")
        if len(ends) > 2 or any(end not in _DAY_NAMES for end in ends):
            raise ValueError(f"{part!r} is not a weekday (mon, tue, ... sun, or mon-fri)")
        a, b = _DAY_NAMES[ends[0]], _DAY_NAMES[ends[-1]]
        days.update((a + i) % 7 for i in range((b - a) % 7 + 1))
    return frozenset(days)


def describe(rec: Recurrence) -> str:
    """"daily at 04:00 for 5 min (Europe/Berlin)", "tue, thu at 08:00 for 6 h (UTC)"."""
    when = "daily" if not rec.weekdays or len(rec.weekdays) == 7 else \
        ", ".join(WEEKDAYS[d] for d in sorted(rec.weekdays))
    minutes = rec.minutes
    length = f"{minutes / 60:g} h" if minutes >= 60 and minutes % 60 == 0 else f"{minutes:g} min"
    return f"{when} at {rec.at:%H:%M} for {length} ({rec.tz})"


def iso_utc(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
