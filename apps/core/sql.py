"""SQL expressions more than one app needs, written once per database."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise
from typing import Any

from django.db import connections
from django.db.models import (
    Case,
    Count,
    DateTimeField,
    Expression,
    FloatField,
    Func,
    IntegerField,
    QuerySet,
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


# --- Seconds spread over periods, in SQL ------------------------------------------------------


def spread_sums(grouped: QuerySet[Any], groups: Sequence[str], weights: Sequence[str],
                rel: Sequence[float]) -> list[tuple[Any, ...]]:
    """Seconds per group and period, spread in SQL: ``apps.analysis.periods.spread`` summed.

    ``grouped`` is a ``values(*groups, "sd", "ed").annotate(...)`` GROUP BY whose rows are
    jobs sharing a first (``sd``) and last (``ed``) period, with, per weight ``w`` of
    ``weights``, ``w_g`` (the weights' sum) and ``w_s``/``w_e`` (their weighted starts and
    ends, seconds from the first edge); ``rel`` are the edges as such seconds. An outer
    query joins each row to its periods and sums each weight's seconds there, so a report
    fetches one row per group and period instead of one per (group, first, last) with the
    spreading done per row in Python (issue 30: the larger part of a user x day report's
    Python time). Returns ``(*groups, period, *seconds per weight)`` tuples, the group
    columns through their fields' converters (GPU types: dicts)."""
    compiler = grouped.query.get_compiler(using=grouped.db)
    inner, inner_params = compiler.as_sql()
    query = grouped.query
    names = [*query.extra_select, *query.values_select, *query.annotation_select]
    cols = [f"c{i}" for i in range(len(names))]
    col = dict(zip(names, cols, strict=True))
    last = len(rel) - 2
    periods = ", ".join(["(%s, CAST(%s AS double precision), CAST(%s AS double precision))"]
                        * (last + 1))
    period_params = [v for i in range(last + 1) for v in (i, rel[i], rel[i + 1])]
    group_cols = ", ".join(col[g] for g in groups)
    sums = ", ".join(_spread_sum(col[f"{w}_g"], col[f"{w}_s"], col[f"{w}_e"])
                     for w in weights)
    # every name is ours (c0.., p, t, u, v, x, y) and every value a parameter
    sql = (f"WITH p(i, a, b) AS (VALUES {periods}), t({', '.join(cols)}) AS ({inner}), "  # noqa: S608
           f"u AS (SELECT t.*, CASE WHEN {col['sd']} < 0 THEN 0 WHEN {col['sd']} > {last} "
           f"THEN {last} ELSE {col['sd']} END AS x FROM t), "
           f"v AS (SELECT u.*, CASE WHEN {col['ed']} < x THEN x WHEN {col['ed']} > {last} "
           f"THEN {last} ELSE {col['ed']} END AS y FROM u) "
           f"SELECT {group_cols + ', ' if groups else ''}p.i, {sums} "
           f"FROM v JOIN p ON p.i BETWEEN v.x AND v.y "
           f"GROUP BY {group_cols + ', ' if groups else ''}p.i")
    with connections[grouped.db].cursor() as cur:
        cur.execute(sql, [*period_params, *inner_params])
        rows: list[Any] = cur.fetchall()
    # the compiler's select list is in ``names``' order (Django's own values() mapping)
    converters = compiler.get_converters([compiler.select[names.index(g)][0] for g in groups])
    if converters:
        rows = [tuple(r) for r in compiler.apply_converters(rows, converters)]
    return rows


def _spread_sum(g: str, s: str, e: str) -> str:
    """One weight's seconds in period ``p`` of a row running from period x to y: the
    whole span when x = y, else from the start to the end of x, whole periods between,
    and from the start of y to the end (``periods.spread``). NULL sums are no seconds."""
    return (f"COALESCE(SUM(CASE WHEN x = y THEN {e} - {s} WHEN p.i = x THEN p.b * {g} - {s} "
            f"WHEN p.i = y THEN {e} - p.a * {g} ELSE (p.b - p.a) * {g} END), 0.0)")
