"""The GPU-efficiency SLI in SQL: GPU-seconds prorated to the window and to each trend day."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db.models import (
    Case,
    F,
    FilteredRelation,
    FloatField,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.expressions import Combinable
from django.db.models.functions import (
    Coalesce,
    Greatest,
    Least,
    NullIf,
)

from apps.analysis import slo as maths
from apps.analysis.slo import Counts
from apps.chargeback.usage import MEASURED, Seconds
from apps.core.sql import FloatSum, spread_sums
from apps.jobs.models import Job
from apps.slo.models import Objective
from apps.slo.queries.common import (
    Grouping,
    SubjectCounts,
    _burn_starts,
    _day,
    _dt,
    _top,
    by_subject,
    population,
)

if TYPE_CHECKING:
    from apps.slo.queries.common import Efficiency


def _efficiency(objective: Objective, window: maths.Window, jobs: QuerySet[Job] | None = None,
                grouping: Grouping | None = None) -> Efficiency:
    lo, now = _dt(window.start), _dt(window.observed_end)
    frac = Coalesce(F("m__useful_hours") / NullIf(F("m__allocated_gpu_hours"), Value(0.0)),
                    Value(0.0), output_field=FloatField())
    measured = Case(When(m__status__isnull=False, then=Value(1.0)), default=Value(0.0),
                    output_field=FloatField())
    return (population(objective, jobs, grouping)
            .filter(start_time__lt=window.observed_end)
            .filter(Q(end_time__isnull=True) | Q(end_time__gt=window.start))
            .annotate(m=FilteredRelation("metrics", condition=MEASURED & Q(
                metrics__allocated_gpu_hours__gt=0)))
            .annotate(s0=Greatest(F("start_time"), lo),
                      e0=Least(Coalesce(F("end_time"), now), now),
                      meas=measured, frac=frac))


def gpu_efficiency(objective: Objective, window: maths.Window, edges: Sequence[datetime],
                   jobs: QuerySet[Job] | None = None,
                   grouping: Grouping | None = None) -> dict[Any, SubjectCounts]:
    """GROUP BY (subject, first day, last day) for the window and its days; one more
    GROUP BY by subject over the jobs running in the last burn window. ``grouping``
    replaces the objective's subjects (the usage reports' groups; their days are periods)."""
    lo = _dt(window.start)
    grouping = grouping or by_subject(objective)
    qs = _efficiency(objective, window, jobs, grouping).annotate(
        rs=Seconds(F("s0"), lo), re=Seconds(F("e0"), lo))
    weights: dict[str, Combinable] = {
        "a": F("gpu_equivalent"), "m": F("gpu_equivalent") * F("meas"),
        "u": F("gpu_equivalent") * F("meas") * F("frac")}
    sums: dict[str, FloatSum] = {}
    for name, w in weights.items():
        sums |= {f"{name}_g": FloatSum(w), f"{name}_s": FloatSum(w * F("rs")),
                 f"{name}_e": FloatSum(w * F("re"))}
    grouped = (qs.annotate(sd=_day(F("s0"), edges), ed=_day(F("e0"), edges, end=True))
               .values(*grouping.names, "sd", "ed").annotate(**sums).order_by())
    rel = [(e - window.start).total_seconds() for e in edges]
    rows = spread_sums(grouped, grouping.names, ("a", "m", "u"), rel)
    sums_of, allocated = _efficiency_days(grouping, rows, len(edges) - 1)
    out: dict[Hashable, SubjectCounts] = {}
    for key, (useful, measured) in sums_of.items():
        sc = out[key] = SubjectCounts(days=[Counts(u, m) for u, m in zip(useful, measured,
                                                                       strict=True)],
                                      details={"allocated_s": allocated[key]})
        sc.window = maths.add_up(sc.days)
        sc.details["coverage"] = (sc.window.total / sc.details["allocated_s"]
                                  if sc.details["allocated_s"] > 0 else None)
    burns = _efficiency_burn(objective, window, jobs, grouping) if grouping.scorecard else {}
    for key, burn in burns.items():
        out.setdefault(key, SubjectCounts(days=[Counts()] * (len(edges) - 1),
                                          details={"allocated_s": 0.0, "coverage": None}))
        out[key].burn = burn
    for sc in out.values():
        sc.burn = {s: sc.burn.get(s, Counts()) for s in maths.BURN_WINDOWS}
    return out


def _efficiency_days(grouping: Grouping, rows: Iterable[tuple[Any, ...]], n_days: int,
                     ) -> tuple[dict[Hashable, tuple[list[float], list[float]]],
                                dict[Hashable, float]]:
    """Each subject's (useful, measured) GPU-seconds per day and its allocated seconds, from
    the (group columns, day, allocated, measured, useful) rows of ``spread_sums``. Several
    rows may make one key (the reports' GPU models): their seconds add up."""
    names = grouping.names
    sums_of: dict[Hashable, tuple[list[float], list[float]]] = {}
    allocated: dict[Hashable, float] = defaultdict(float)
    for r in rows:
        key = grouping.key(dict(zip(names, r, strict=False)))
        useful, measured = sums_of.get(key) or sums_of.setdefault(
            key, ([0.0] * n_days, [0.0] * n_days))
        day, a, m, u = r[len(names):]
        useful[day] += u
        measured[day] += m
        allocated[key] += a
    return sums_of, allocated


def _efficiency_burn(objective: Objective, window: maths.Window, jobs: QuerySet[Job] | None,
                     grouping: Grouping) -> dict[Hashable, dict[int, Counts]]:
    """Each subject's measured and useful seconds in each burn window (rows of one key add
    up)."""
    starts = _burn_starts(window)
    earliest = min(starts.values())
    qs = _efficiency(objective, window, jobs, grouping).filter(
        Q(end_time__isnull=True) | Q(end_time__gt=earliest))
    sums = {}
    for s, start in starts.items():
        overlap = Greatest(Seconds(F("e0"), Greatest(F("s0"), _dt(start))), Value(0.0))
        sums[f"m{s}"] = Sum(F("gpu_equivalent") * F("meas") * overlap)
        sums[f"u{s}"] = Sum(F("gpu_equivalent") * F("meas") * F("frac") * overlap)
    rows: Iterable[Mapping[str, Any]] = qs.values(*grouping.names).annotate(**sums).order_by()
    out: dict[Hashable, dict[int, Counts]] = {}
    for r in rows:
        burn = out.setdefault(grouping.key(r), {s: Counts() for s in maths.BURN_WINDOWS})
        for s in maths.BURN_WINDOWS:
            burn[s] = burn[s].plus(Counts(r[f"u{s}"] or 0.0, r[f"m{s}"] or 0.0))
    return out


def worst_efficiency(objective: Objective, window: maths.Window,
                     jobs: QuerySet[Job] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Measured jobs that wasted at least half their GPU-time, most wasted GPU-hours in the
    window first, per subject."""
    waste = (F("gpu_equivalent") * (Value(1.0) - F("frac"))
             * Greatest(Seconds(F("e0"), F("s0")), Value(0.0)))
    qs = (_efficiency(objective, window, jobs).filter(meas=1.0, frac__lte=0.5)
          .annotate(waste=waste).filter(waste__gt=0))
    return _top(objective, qs, F("waste"), "waste", extra=("frac",))
