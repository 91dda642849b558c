"""SQL expressions more than one app needs, written once per database."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise
from typing import Any

from django.db.models import (
    Case,
    Count,
    DateTimeField,
    Expression,
    FloatField,
    Func,
    IntegerField,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Ceil, Floor
from django.db.models.lookups import LessThan, LessThanOrEqual

DAY_S = 86400.0


class _AsFetched:
    """No per-value Python converter: for expressions whose SQL type the driver already
    reads as the Python type on both databases (double precision/REAL sums, COUNTs,
    integer casts). Django otherwise calls ``float()``/``int()`` on every value, which was
    the largest Python cost of a usage report (issue 30: ~100k grouped rows of ~10
    values); a NULL stays ``None`` either way."""

    output_field: Any

    def get_db_converters(self, connection: Any) -> list[Any]:
        return list(self.output_field.get_db_converters(connection))  # the field's only


class FloatSum(_AsFetched, Sum):
    """``Sum`` of a float expression, read as fetched (a float, or None over no rows)."""


class IntCount(_AsFetched, Count):
    """``Count``, read as fetched (an int)."""


class _IntCast(_AsFetched, Cast):
    pass


class IntCase(_AsFetched, Case):
    """An integer ``Case``, read as fetched."""


class Seconds(Func):
    """Seconds from ``b`` to ``a`` (two datetimes), in SQL, per database."""

    output_field = FloatField()
    arity = 2

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection,
                           template="EXTRACT(EPOCH FROM (%(expressions)s))::double precision",
                           arg_joiner=" - ", **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection,
                           template="((julianday(%(expressions)s)) * 86400.0)",
                           arg_joiner=") - julianday(", **extra)


def period_index(expr: Any, edges: Sequence[datetime], *, end: bool = False) -> Expression:
    """The period (0-based, between ``edges``) holding instant ``expr``; with ``end``, an
    instant on an edge belongs to the period before. Arithmetic when every period but the
    last is 24 h long (rolling SLO days); a CASE over the edges otherwise (local midnights,
    weeks, calendar months). Shared by the SLO trend days, chargeback's per-period hours
    and the usage reports, so a job lands in the same period everywhere."""
    lengths = [(b - a).total_seconds() for a, b in pairwise(edges)]
    if all(n == DAY_S for n in lengths[:-1]) and lengths[-1] <= DAY_S:
        offset = Seconds(expr, _dt(edges[0])) / Value(DAY_S)
        rounded = Ceil(offset) - Value(1.0) if end else Floor(offset)
        return _IntCast(rounded, IntegerField())
    before = LessThanOrEqual if end else LessThan
    whens = [When(before(expr, _dt(edge)), then=Value(i)) for i, edge in enumerate(edges[1:])]
    return IntCase(*whens, default=Value(len(edges) - 2), output_field=IntegerField())


def _dt(value: datetime) -> Value:
    return Value(value, output_field=DateTimeField())
