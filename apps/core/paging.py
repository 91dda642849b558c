"""Keyset ("seek") pagination for long lists: constant cost per page at any depth.

Offset pagination reads and throws away every row before the page; over a million
jobs that is what made peers' job lists slow. Here a page is "the next N rows after
(submit_time, id)", which an index on (…, -submit_time, -id) answers directly.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models import Q, QuerySet


@dataclass(frozen=True)
class Page:
    rows: list[Any]
    next_cursor: str | None
    has_previous: bool
    cursor_refused: bool = False  # a cursor was given but was not one we wrote: first page


def encode_cursor(when: datetime, pk: int) -> str:
    raw = f"{when.isoformat()}|{pk}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int] | None:
    """Return (time, id), or None for a missing or malformed cursor (start over).

    Only what ``encode_cursor`` writes passes: an aware time that stays within the calendar
    in UTC and a positive 64-bit id. Anything else (a naive time, 9999-12-31T23:59-23:59, an
    id past 2**63) would reach the database and fail there."""
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        text, pk_text = raw.rsplit("|", 1)
        when, pk = datetime.fromisoformat(text), int(pk_text)
        if when.tzinfo is None or not 0 < pk < 2**63:
            return None
        when.astimezone(UTC)
    except (ValueError, binascii.Error, UnicodeDecodeError, OverflowError):
        return None
    return when, pk


def keyset_page(qs: QuerySet[Any], cursor: str, size: int, time_field: str,
                split: Sequence[Q] | None = None) -> Page:
    """One page of ``qs`` ordered newest first by (time_field, id).

    ``split`` names parts whose union holds every row of ``qs``, each one an index's leading
    column (a lead's teams; the user and their led teams for ``visible_to``): the page is
    read through ``split_slice``, one ordered, limited scan per part.
    """
    after = decode_cursor(cursor)
    if after is not None:
        when, pk = after
        qs = qs.filter(Q(**{f"{time_field}__lt": when}) | Q(**{time_field: when, "pk__lt": pk}))
    rows = split_slice(qs.order_by(f"-{time_field}", "-pk"), 0, size + 1, split)
    more = len(rows) > size
    rows = rows[:size]
    next_cursor = encode_cursor(getattr(rows[-1], time_field), rows[-1].pk) if more else None
    return Page(rows=rows, next_cursor=next_cursor, has_previous=after is not None,
                cursor_refused=bool(cursor) and after is None)


def split_slice(qs: QuerySet[Any], start: int, stop: int,
                split: Sequence[Q] | None) -> list[Any]:
    """``qs[start:stop]`` of an ordered ``qs`` whose rows all match one of ``split``'s parts.

    PostgreSQL cannot read an index on (part, -time, -id) in order across an ``IN`` list or
    an ``OR`` of two columns: it scans everyone's rows by time and filters, which is slow
    when the parts are a small share of all rows (620 ms at 10M jobs for a researcher's
    RUNNING jobs through ``visible_to``). One part is added as a filter (an equality the
    index serves). Several parts give the slice's candidate ids with one query, a UNION ALL
    of one ordered scan per part limited to ``stop`` rows (``_split_ids``): the first
    ``stop`` rows of the union are among them. The rows are then read from ``qs`` itself
    by those ids, so its filters (and ``visible_to``) still hold for every row.
    """
    if split and len(split) == 1:
        qs = qs.filter(split[0])
    elif split and connections[qs.db].features.supports_slicing_ordering_in_compound:
        qs = qs.filter(pk__in=list(_split_ids(qs, stop, split)))
    return list(qs[start:stop])


def _split_ids(qs: QuerySet[Any], limit: int, split: Sequence[Q]) -> QuerySet[Any]:
    """The ids of the first ``limit`` rows of ``qs`` (in its order) for each part: one query,
    a UNION ALL of ordered, limited index scans. The caller reads the rows by these ids (a
    subquery instead made the page's plan cost more than the scans)."""
    parts = [qs.filter(part).values_list("pk", flat=True)[:limit] for part in split]
    return parts[0].union(*parts[1:], all=True)


class SplitSlices:
    """An ordered queryset, as DRF's ``CursorPagination`` uses one (``order_by``, ``filter``,
    one slice, ``model``), whose slice is read through ``split_slice``: the API's job list
    gets the same per-part scans as the page, for every cursor DRF writes (forward, back,
    with an offset)."""

    def __init__(self, qs: QuerySet[Any], split: Sequence[Q] | None) -> None:
        self.qs, self.split, self.model = qs, split, qs.model

    def order_by(self, *fields: Any) -> SplitSlices:
        return SplitSlices(self.qs.order_by(*fields), self.split)

    def filter(self, *args: Any, **kwargs: Any) -> SplitSlices:
        return SplitSlices(self.qs.filter(*args, **kwargs), self.split)

    def __getitem__(self, index: slice) -> list[Any]:
        return split_slice(self.qs, index.start or 0, index.stop, self.split)
