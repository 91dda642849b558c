"""The job-success SLI in SQL: jobs **ended** in the window, each ending classified by the
first matching ``EndingRule`` in one SQL ``CASE``."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db.models import (
    Case,
    F,
    Q,
    QuerySet,
    Value,
    When,
)

from apps.analysis import slo as maths
from apps.analysis.slo import Counts
from apps.chargeback.usage import Seconds
from apps.core.sql import IntCount
from apps.jobs.models import Job
from apps.slo.models import Objective
from apps.slo.queries.common import (
    Grouping,
    SubjectCounts,
    _burn_starts,
    _day,
    _top,
    by_subject,
    population,
)

if TYPE_CHECKING:
    from apps.slo.queries.common import Endings


FAULT_Q = Q(metrics__xid_gpus__gt=0) | Q(metrics__ecc_dbe__gt=0)


def rule_q(rule: maths.EndingRule) -> Q:
    """An ending rule as a SQL condition (the same test as ``EndingRule.matches``)."""
    q = Q()
    if rule.states:
        q &= Q(state__in=sorted(rule.states))
    if rule.started is not None:
        ran = Q(start_time__isnull=False, node_count__gt=0)
        q &= ran if rule.started else ~ran
    if rule.hardware_fault is not None:
        q &= FAULT_Q if rule.hardware_fault else ~FAULT_Q
    if rule.reason_pattern:
        q &= Q(wait_reason__iregex=rule.reason_pattern)
    return q


def _endings(objective: Objective, window: maths.Window, rules: Sequence[maths.EndingRule],
             jobs: QuerySet[Job] | None = None, grouping: Grouping | None = None) -> Endings:
    whens = [When(rule_q(rule) or Q(pk__isnull=False), then=Value(rule.key)) for rule in rules]
    return (population(objective, jobs, grouping)
            .filter(end_time__gte=window.start, end_time__lt=window.observed_end)
            .exclude(state__in=Job.ACTIVE_STATES)
            .annotate(rule=Case(*whens, default=Value(maths.UNCLASSIFIED.key))))


def _success_sums(n_days: int) -> dict[str, Any]:
    """One subject's running sums (the day past the last holds out-of-range endings)."""
    return {"endings": defaultdict(int), "good": [0] * (n_days + 1),
            "total": [0] * (n_days + 1), "bg": defaultdict(int), "bt": defaultdict(int)}


def job_success(objective: Objective, window: maths.Window, edges: Sequence[datetime],
                rules: Sequence[maths.EndingRule], jobs: QuerySet[Job] | None = None,
                grouping: Grouping | None = None) -> dict[Any, SubjectCounts]:
    """One GROUP BY on (subject, rule, day), with the burn windows as filtered counts.
    ``grouping`` replaces the objective's subjects (the usage reports' groups)."""
    grouping = grouping or by_subject(objective)
    causes = {r.key: r.cause for r in rules} | {maths.UNCLASSIFIED.key: maths.Cause.EXCLUDED}
    burn = {f"n{s}": IntCount("pk", filter=Q(end_time__gte=start))
            for s, start in _burn_starts(window).items()} if grouping.scorecard else {}
    rows: Iterable[Mapping[str, Any]] = (  # Mapping: the burn columns are named at run time
        _endings(objective, window, rules, jobs, grouping)
        .annotate(day=_day(F("end_time"), edges)).values(*grouping.names, "rule", "day")
        .annotate(n=IntCount("pk"), **burn).order_by())
    n_days = len(edges) - 1
    # Burn windows are nested (each starts at or before the next shorter one), so a row with
    # nothing in the widest has nothing in any: most rows (days before the last three) skip
    # the inner loop.
    burn_columns = [(s, f"n{s}") for s in maths.BURN_WINDOWS]
    widest = f"n{max(maths.BURN_WINDOWS)}"
    # plain numbers while summing (thousands of rows); Counts at the end
    acc: dict[Hashable, dict[str, Any]] = {}
    for r in rows:
        key = grouping.key(r)
        a = acc.get(key) or acc.setdefault(key, _success_sums(n_days))
        n, cause = r["n"], causes[r["rule"]]
        a["endings"][r["rule"]] += n
        if cause is maths.Cause.EXCLUDED:
            continue
        good = cause is not maths.Cause.PLATFORM
        day = r["day"] if 0 <= r["day"] < n_days else n_days  # out of range: window only
        a["total"][day] += n
        a["good"][day] += n if good else 0
        if not r.get(widest):  # none in the widest burn window, or no burn columns
            continue
        for s, column in burn_columns:
            a["bt"][s] += r[column]
            a["bg"][s] += r[column] if good else 0
    out = {}
    for key, a in acc.items():
        by_cause: dict[str, int] = defaultdict(int)
        for rule, n in a["endings"].items():
            by_cause[causes[rule].value] += n
        out[key] = SubjectCounts(
            window=Counts(sum(a["good"]), sum(a["total"])),
            burn={s: Counts(a["bg"][s], a["bt"][s]) for s in maths.BURN_WINDOWS},
            days=[Counts(g, t) for g, t in zip(a["good"][:n_days], a["total"][:n_days],
                                               strict=True)],
            details={"endings": dict(a["endings"]), "causes": dict(by_cause)})
    return out


def worst_endings(objective: Objective, window: maths.Window,
                  rules: Sequence[maths.EndingRule],
                  jobs: QuerySet[Job] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Platform-caused endings, most GPU-hours lost first, per subject."""
    platform = [r.key for r in rules if r.cause is maths.Cause.PLATFORM]
    lost = F("gpu_equivalent") * Seconds(F("end_time"), F("start_time"))
    qs = _endings(objective, window, rules, jobs).filter(rule__in=platform).annotate(lost=lost)
    return _top(objective, qs, F("lost"), "lost", extra=("rule", "state"))
