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
                split: tuple[str, Sequence[Any]] | None = None) -> Page:
    """One page of ``qs`` ordered newest first by (time_field, id).

    ``split=(field, values)`` says ``qs`` holds only rows whose ``field`` is one of
    ``values`` (a lead's teams). With more than one value the page's ids come from one
    ordered, limited scan per value, merged (``_split_ids``): PostgreSQL cannot read an
    index on (field, -time, -id) in time order across an ``IN`` list, so it would scan the
    whole list by time instead, which is slow when those teams are a small share of all jobs.
    The rows are still read from ``qs`` itself, so its filters (and ``visible_to``) hold.
    """
    after = decode_cursor(cursor)
    if after is not None:
        when, pk = after
        qs = qs.filter(Q(**{f"{time_field}__lt": when}) | Q(**{time_field: when, "pk__lt": pk}))
    order = (f"-{time_field}", "-pk")
    if split is not None and len(split[1]) > 1 and \
            connections[qs.db].features.supports_slicing_ordering_in_compound:
        qs = qs.filter(pk__in=list(_split_ids(qs, order, size + 1, *split)))
    rows = list(qs.order_by(*order)[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    next_cursor = encode_cursor(getattr(rows[-1], time_field), rows[-1].pk) if more else None
    return Page(rows=rows, next_cursor=next_cursor, has_previous=after is not None,
                cursor_refused=bool(cursor) and after is None)


def _split_ids(qs: QuerySet[Any], order: tuple[str, ...], limit: int, field: str,
               values: Sequence[Any]) -> QuerySet[Any]:
    """The ids of the first ``limit`` rows of ``qs`` for each value: one query, a UNION ALL
    of ordered, limited index scans. They hold the page; the page's own query then reads
    them by primary key (a subquery instead made its plan cost more than the scans)."""
    parts = [qs.filter(**{field: value}).order_by(*order).values_list("pk", flat=True)[:limit]
             for value in values]
    return parts[0].union(*parts[1:], all=True)
