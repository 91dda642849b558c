"""The SLIs in SQL: a few GROUP BYs per objective, never a loop over jobs.

Each function takes an objective's population (``population``), its window and the
trend's day edges, and returns plain numbers per subject (``team:<id>``, ``platform``,
``partition:<name>``) for ``apps.analysis.slo.assess``. They count exactly what the pure
reference (``apps.analysis.slo.event_counts``) counts job by job; tests/slo compares both,
and both with hand-written SQL.

- queue wait: jobs **started** in the window; own-limit waits apart (``pending.wait_cause``
  as SQL: ``OWN_REASONS`` and the ``Assoc``/``QOS`` prefixes);
- job success: jobs **ended** in the window, each ending classified by the first matching
  ``EndingRule`` in one SQL ``CASE``;
- GPU efficiency: GPU-seconds **prorated** to the window and to each trend day. Days come
  from one GROUP BY on (first day, last day) of each job's run inside the window: a job's
  seconds in its first day are ``first day's end - start``, in its last ``end - last day's
  start`` and full days in between, so three sums per group give every day exactly.

Percentiles are nearest-rank (``apps.analysis.slo.percentile``, PostgreSQL's ``percentile_disc``)
over each breakdown cell's waits, fetched sorted (``SortedValues``; on SQLite an aggregate in
Python registered on each connection by ``apps.slo.apps``), so a subject's percentiles come
from its cells without a second sorted pass over the jobs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import chain, pairwise
from typing import TYPE_CHECKING, Any, TypedDict

from django.db.models import (
    Aggregate,
    Case,
    Count,
    DateTimeField,
    Expression,
    F,
    Field,
    FilteredRelation,
    FloatField,
    IntegerField,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
    Window,
)
from django.db.models.expressions import Combinable
from django.db.models.functions import (
    Cast,
    Ceil,
    Coalesce,
    Floor,
    Greatest,
    Least,
    NullIf,
    RowNumber,
)
from django.db.models.lookups import LessThan, LessThanOrEqual

from apps.analysis import pending
from apps.analysis import slo as maths
from apps.analysis.slo import Counts
from apps.chargeback.usage import MEASURED, Seconds
from apps.jobs.models import Job
from apps.slo.models import Objective

WORST = 5  # worst offending jobs kept per scorecard
DAY_S = 86400.0


class SortedValues(Aggregate):
    """Every value of an expression in the group, ascending (a list of floats):
    ``ARRAY_AGG(x ORDER BY x)`` in PostgreSQL, ``BEACON_SORTED(x)`` (JSON text) on SQLite.

    The queue-wait breakdown fetches each cell's sorted waits so that the cell's and the
    whole subject's nearest-rank percentiles both come from one GROUP BY (issue 7: a second
    sorted pass over the jobs for the subjects' percentiles cost as much as the breakdown).
    """

    function = "ARRAY_AGG"
    output_field = Field()  # no converter of its own: ``convert_value`` below

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        if self.filter is not None:
            raise ValueError("SortedValues takes no filter")
        sql, params = compiler.compile(self.get_source_expressions()[0])
        return f"ARRAY_AGG({sql} ORDER BY {sql})", (*params, *params)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return super().as_sql(compiler, connection, function="BEACON_SORTED", **extra)

    def convert_value(self, value: Any, expression: Any, connection: Any) -> list[float]:
        return json.loads(value) if isinstance(value, str) else list(value or [])


class SqliteSorted:
    """``BEACON_SORTED(x)`` for SQLite: the group's values, ascending, as JSON."""

    def __init__(self) -> None:
        self.values: list[float] = []

    def step(self, value: float | None) -> None:
        if value is not None:
            self.values.append(value)

    def finalize(self) -> str:
        return json.dumps(sorted(self.values))


def _dt(value: datetime) -> Value:
    return Value(value, output_field=DateTimeField())


# --- Who a result is about -----------------------------------------------------------------


class _Subject(TypedDict):
    """What ``population`` annotates on the jobs (and the plugin checks lookups against)."""

    subject: Any


class _Waits(_Subject):
    wait_s: float
    before_s: float
    own: int
    pct_s: float


class _Endings(_Subject):
    rule: str


class _Efficiency(_Subject):
    s0: datetime
    e0: datetime
    meas: float
    frac: float


if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations

    Subjects = QuerySet[WithAnnotations[Job, _Subject]]
    Waits = QuerySet[WithAnnotations[Job, _Waits]]
    Endings = QuerySet[WithAnnotations[Job, _Endings]]
    Efficiency = QuerySet[WithAnnotations[Job, _Efficiency]]


def subject_expression(objective: Objective) -> Combinable:
    if objective.scope == Objective.Scope.TEAM:
        return F("team_id")
    if objective.scope == Objective.Scope.PARTITION:
        return F("partition")
    return Value("platform")


def subject_key(objective: Objective, value: Any) -> str:
    if objective.scope == Objective.Scope.TEAM:
        return f"team:{value}"
    if objective.scope == Objective.Scope.PARTITION:
        return f"partition:{value}"
    return "platform"


def population(objective: Objective, jobs: QuerySet[Job] | None = None) -> Subjects:
    """The objective's GPU jobs: allocated (a job cancelled while pending has no nodes),
    with GPUs, narrowed to its cluster, partition and team."""
    qs = (Job.objects.all() if jobs is None else jobs).filter(
        gpu_equivalent__gt=0, node_count__gt=0, start_time__isnull=False)
    if objective.cluster_id:
        qs = qs.filter(cluster_id=objective.cluster_id)
    if objective.partition:
        qs = qs.filter(partition=objective.partition)
    if objective.scope == Objective.Scope.TEAM:
        qs = qs.filter(team__isnull=False)
        if objective.team_id:
            qs = qs.filter(team_id=objective.team_id)
    return qs.annotate(subject=subject_expression(objective))


def _day(expr: Combinable, edges: Sequence[datetime], *, end: bool = False) -> Expression:
    """The trend day holding instant ``expr`` (``end``: an instant on an edge belongs to the
    day before). Arithmetic for 24 h days; a CASE over local midnights for calendar months."""
    lengths = [(b - a).total_seconds() for a, b in pairwise(edges)]
    if all(n == DAY_S for n in lengths[:-1]) and lengths[-1] <= DAY_S:
        offset = Seconds(expr, _dt(edges[0])) / Value(DAY_S)
        rounded = Ceil(offset) - Value(1.0) if end else Floor(offset)
        return Cast(rounded, IntegerField())
    before = LessThanOrEqual if end else LessThan
    whens = [When(before(expr, _dt(edge)), then=Value(i)) for i, edge in enumerate(edges[1:])]
    return Case(*whens, default=Value(len(edges) - 2), output_field=IntegerField())


def _bucket() -> Case:
    whens = [When(gpu_equivalent__lte=limit, then=Value(label))
             for limit, label in maths.GPU_BUCKETS if limit != float("inf")]
    return Case(*whens, default=Value(maths.GPU_BUCKETS[-1][1]))


def _burn_starts(window: maths.Window) -> dict[int, datetime]:
    """Each trailing burn window's start, clipped to the SLO window's start."""
    now = window.observed_end
    return {s: max(window.start, now - timedelta(seconds=s)) for s in maths.BURN_WINDOWS}


# --- Results ---------------------------------------------------------------------------------


@dataclass
class SubjectCounts:
    """One subject's counts: the window, its burn windows, its trend days, and details."""

    window: Counts = field(default_factory=Counts)
    burn: dict[int, Counts] = field(default_factory=dict)
    days: list[Counts] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


def _subjects(keys: Iterable[str], n_days: int) -> dict[str, SubjectCounts]:
    return {k: SubjectCounts(days=[Counts()] * n_days) for k in keys}


def _add_day(sc: SubjectCounts, day: int, counts: Counts) -> None:
    if 0 <= day < len(sc.days):
        sc.days[day] = sc.days[day].plus(counts)


# --- Queue wait ------------------------------------------------------------------------------

OWN_Q = Q(wait_reason__in=sorted(pending.OWN_REASONS)) | Q(
    *(Q(wait_reason__startswith=p) for p in pending.OWN_PREFIXES), _connector=Q.OR)


def _waits(objective: Objective, window: maths.Window,
           jobs: QuerySet[Job] | None = None) -> Waits:
    """Started jobs with ``wait_s`` (eligible to start), ``before_s`` (submit to eligible),
    ``own`` (1: Slurm's last reason was one of the team's own limits) and ``pct_s``, the wait
    the percentiles describe: the wait for resources, or for own-limit jobs their whole wait
    (one sort key for both, so each group sorts once)."""
    ready = Coalesce(F("eligible_time"), F("submit_time"))
    own = Case(When(OWN_Q, then=Value(1)), default=Value(0), output_field=IntegerField())
    return (population(objective, jobs)
            .filter(start_time__gte=window.start, start_time__lt=window.observed_end)
            .annotate(wait_s=Greatest(Seconds(F("start_time"), ready), Value(0.0)),
                      before_s=Greatest(Seconds(ready, F("submit_time")), Value(0.0)),
                      own=own)
            .annotate(pct_s=F("wait_s") + F("before_s") * F("own")))


# Grouped by ``own`` as well, so the (costly) reason test runs once per job: rows with
# own=0 are the counted jobs (their waits for resources), own=1 the jobs held by their own
# limits (their whole wait, reported apart).
def _wait_cells(objective: Objective, qs: Waits,
                target: float) -> dict[tuple[str, str, str, int], Mapping[str, Any]]:
    """(subject, partition, GPU bucket, own) -> jobs, on time, waited before eligible, and
    the sorted waits (``pct_s``)."""
    rows = (qs.annotate(bucket=_bucket()).values("subject", "partition", "bucket", "own")
            .annotate(n=Count("pk"), good=Count("pk", filter=Q(wait_s__lte=target)),
                      before_jobs=Count("pk", filter=Q(before_s__gt=0)),
                      waits=SortedValues("pct_s"))
            .order_by())
    return {(subject_key(objective, r["subject"]), r["partition"], r["bucket"], r["own"]): r
            for r in rows}


def _wait_figures(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One group's figures from the cells it is made of: counts added, nearest-rank
    percentiles over all their waits (sorted runs: ``sorted`` merges them in linear time)."""
    waits = sorted(chain.from_iterable(c["waits"] for c in cells))
    return {"n": sum(c["n"] for c in cells), "good": sum(c["good"] for c in cells),
            "before_jobs": sum(c["before_jobs"] for c in cells),
            "p50": maths.percentile(waits, 0.5), "p90": maths.percentile(waits, 0.9)}


def _wait_row(counted: Sequence[Mapping[str, Any]],
              own: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One subject's (or breakdown row's) figures from its own=0 and own=1 cells."""
    c, o = _wait_figures(counted), _wait_figures(own)
    return {"total": c["n"], "good": c["good"], "p50": c["p50"], "p90": c["p90"],
            "before_jobs": c["before_jobs"], "own_jobs": o["n"], "own_p50": o["p50"],
            "own_p90": o["p90"]}


def _wait_days(objective: Objective, qs: Waits, window: maths.Window,
               edges: Sequence[datetime], target: float, out: dict[str, SubjectCounts]) -> None:
    """The counted jobs per subject and day (the trend), with the burn windows as filtered
    counts added up over the days (a parallel hash aggregate in PostgreSQL)."""
    burn = {}
    for s, start in _burn_starts(window).items():
        burn[f"t{s}"] = Count("pk", filter=Q(start_time__gte=start))
        burn[f"g{s}"] = Count("pk", filter=Q(start_time__gte=start, wait_s__lte=target))
    for sc in out.values():
        sc.burn = {s: Counts(0, 0) for s in maths.BURN_WINDOWS}
    rows: Iterable[Mapping[str, Any]] = (  # Mapping: the burn columns are named at run time
        qs.filter(own=0).annotate(day=_day(F("start_time"), edges)).values("subject", "day")
        .annotate(n=Count("pk"), good=Count("pk", filter=Q(wait_s__lte=target)), **burn)
        .order_by())
    for r in rows:
        sc = out[subject_key(objective, r["subject"])]
        _add_day(sc, r["day"], Counts(r["good"], r["n"]))
        for s in maths.BURN_WINDOWS:
            if r[f"t{s}"]:
                sc.burn[s] = sc.burn[s].plus(Counts(r[f"g{s}"], r[f"t{s}"]))


def queue_wait(objective: Objective, window: maths.Window, edges: Sequence[datetime],
               jobs: QuerySet[Job] | None = None) -> dict[str, SubjectCounts]:
    """Two GROUP BYs: by subject, partition, GPU-count bucket and own (the breakdown; the
    subject's figures add its cells up), and by subject and day (the trend, burn windows)."""
    target = float((objective.wait_minutes or 0) * 60)
    qs = _waits(objective, window, jobs)
    cells = _wait_cells(objective, qs, target)
    Cells = tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]  # own=0, own=1
    by_subject: dict[str, Cells] = {}
    by_row: dict[tuple[str, str, str], Cells] = {}
    for (key, partition, bucket, own), cell in cells.items():
        by_subject.setdefault(key, ([], []))[own].append(cell)
        by_row.setdefault((key, partition, bucket), ([], []))[own].append(cell)
    out = _subjects(by_subject, len(edges) - 1)
    for key, (counted, own_limits) in by_subject.items():
        sc = out[key]
        sc.details = _wait_row(counted, own_limits)
        sc.window = Counts(sc.details["good"], sc.details["total"])
    _wait_days(objective, qs, window, edges, target, out)
    for (key, partition, bucket), (counted, own_limits) in sorted(
            by_row.items(), key=lambda kv: (kv[0][0], kv[0][1], _bucket_order(kv[0][2]))):
        out[key].details.setdefault("breakdown", []).append(
            {"partition": partition, "bucket": bucket, **_wait_row(counted, own_limits)})
    for sc in out.values():
        sc.details.setdefault("breakdown", [])
    return out


def _bucket_order(label: str) -> int:
    return [b for _, b in maths.GPU_BUCKETS].index(label)


def worst_waits(objective: Objective, window: maths.Window,
                jobs: QuerySet[Job] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The longest waits for resources past the target, per subject."""
    target = float((objective.wait_minutes or 0) * 60)
    qs = _waits(objective, window, jobs).filter(own=0, wait_s__gt=target)
    return _top(objective, qs, F("wait_s"), "wait_s")


# --- Job success -----------------------------------------------------------------------------

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
             jobs: QuerySet[Job] | None = None) -> Endings:
    whens = [When(rule_q(rule) or Q(pk__isnull=False), then=Value(rule.key)) for rule in rules]
    return (population(objective, jobs)
            .filter(end_time__gte=window.start, end_time__lt=window.observed_end)
            .exclude(state__in=Job.ACTIVE_STATES)
            .annotate(rule=Case(*whens, default=Value(maths.UNCLASSIFIED.key))))


def _success_sums(n_days: int) -> dict[str, Any]:
    """One subject's running sums (the day past the last holds out-of-range endings)."""
    return {"endings": defaultdict(int), "good": [0] * (n_days + 1),
            "total": [0] * (n_days + 1), "bg": defaultdict(int), "bt": defaultdict(int)}


def job_success(objective: Objective, window: maths.Window, edges: Sequence[datetime],
                rules: Sequence[maths.EndingRule],
                jobs: QuerySet[Job] | None = None) -> dict[str, SubjectCounts]:
    """One GROUP BY on (subject, rule, day), with the burn windows as filtered counts."""
    causes = {r.key: r.cause for r in rules} | {maths.UNCLASSIFIED.key: maths.Cause.EXCLUDED}
    burn = {f"n{s}": Count("pk", filter=Q(end_time__gte=start))
            for s, start in _burn_starts(window).items()}
    rows: Iterable[Mapping[str, Any]] = (  # Mapping: the burn columns are named at run time
        _endings(objective, window, rules, jobs)
        .annotate(day=_day(F("end_time"), edges)).values("subject", "rule", "day")
        .annotate(n=Count("pk"), **burn).order_by())
    n_days = len(edges) - 1
    # Burn windows are nested (each starts at or before the next shorter one), so a row with
    # nothing in the widest has nothing in any: most rows (days before the last three) skip
    # the inner loop.
    burn_columns = [(s, f"n{s}") for s in maths.BURN_WINDOWS]
    widest = f"n{max(maths.BURN_WINDOWS)}"
    # plain numbers while summing (thousands of rows); Counts at the end
    acc: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = subject_key(objective, r["subject"])
        a = acc.get(key) or acc.setdefault(key, _success_sums(n_days))
        n, cause = r["n"], causes[r["rule"]]
        a["endings"][r["rule"]] += n
        if cause is maths.Cause.EXCLUDED:
            continue
        good = cause is not maths.Cause.PLATFORM
        day = r["day"] if 0 <= r["day"] < n_days else n_days  # out of range: window only
        a["total"][day] += n
        a["good"][day] += n if good else 0
        if not r[widest]:
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


# --- GPU efficiency --------------------------------------------------------------------------


def _efficiency(objective: Objective, window: maths.Window,
                jobs: QuerySet[Job] | None = None) -> Efficiency:
    lo, now = _dt(window.start), _dt(window.observed_end)
    frac = Coalesce(F("m__useful_hours") / NullIf(F("m__allocated_gpu_hours"), Value(0.0)),
                    Value(0.0), output_field=FloatField())
    measured = Case(When(m__status__isnull=False, then=Value(1.0)), default=Value(0.0),
                    output_field=FloatField())
    return (population(objective, jobs)
            .filter(start_time__lt=window.observed_end)
            .filter(Q(end_time__isnull=True) | Q(end_time__gt=window.start))
            .annotate(m=FilteredRelation("metrics", condition=MEASURED & Q(
                metrics__allocated_gpu_hours__gt=0)))
            .annotate(s0=Greatest(F("start_time"), lo),
                      e0=Least(Coalesce(F("end_time"), now), now),
                      meas=measured, frac=frac))


def gpu_efficiency(objective: Objective, window: maths.Window, edges: Sequence[datetime],
                   jobs: QuerySet[Job] | None = None) -> dict[str, SubjectCounts]:
    """GROUP BY (subject, first day, last day) for the window and its days; one more
    GROUP BY by subject over the jobs running in the last burn window."""
    lo = _dt(window.start)
    qs = _efficiency(objective, window, jobs).annotate(
        rs=Seconds(F("s0"), lo), re=Seconds(F("e0"), lo))
    weights: dict[str, Combinable] = {
        "a": F("gpu_equivalent"), "m": F("gpu_equivalent") * F("meas"),
        "u": F("gpu_equivalent") * F("meas") * F("frac")}
    sums: dict[str, Sum] = {}
    for name, w in weights.items():
        sums |= {f"{name}g": Sum(w), f"{name}s": Sum(w * F("rs")), f"{name}e": Sum(w * F("re"))}
    rows = (qs.annotate(sd=_day(F("s0"), edges), ed=_day(F("e0"), edges, end=True))
            .values("subject", "sd", "ed").annotate(**sums).order_by())
    sums_of, allocated = _efficiency_days(objective, rows, edges, window.start)
    out: dict[str, SubjectCounts] = {}
    for key, (useful, measured) in sums_of.items():
        sc = out[key] = SubjectCounts(days=[Counts(u, m) for u, m in zip(useful, measured,
                                                                       strict=True)],
                                      details={"allocated_s": allocated[key]})
        sc.window = maths.add_up(sc.days)
        sc.details["coverage"] = (sc.window.total / sc.details["allocated_s"]
                                  if sc.details["allocated_s"] > 0 else None)
    for key, burn in _efficiency_burn(objective, window, jobs).items():
        out.setdefault(key, SubjectCounts(days=[Counts()] * (len(edges) - 1),
                                          details={"allocated_s": 0.0, "coverage": None}))
        out[key].burn = burn
    for sc in out.values():
        sc.burn = {s: sc.burn.get(s, Counts()) for s in maths.BURN_WINDOWS}
    return out


def _efficiency_days(objective: Objective, rows: Iterable[Mapping[str, Any]],
                     edges: Sequence[datetime], start: datetime,
                     ) -> tuple[dict[str, tuple[list[float], list[float]]], dict[str, float]]:
    """Each subject's (useful, measured) GPU-seconds per day and its allocated seconds,
    from the (subject, first day, last day) groups. Plain floats while summing (thousands
    of rows), added in the rows' order: the same additions as one ``Counts`` at a time."""
    rel = [(e - start).total_seconds() for e in edges]
    n_days = len(edges) - 1
    sums_of: dict[str, tuple[list[float], list[float]]] = {}
    allocated: dict[str, float] = defaultdict(float)
    for r in rows:
        key = subject_key(objective, r["subject"])
        useful, measured = sums_of.get(key) or sums_of.setdefault(
            key, ([0.0] * n_days, [0.0] * n_days))
        parts = {n: _spread(r[f"{n}g"] or 0.0, r[f"{n}s"] or 0.0, r[f"{n}e"] or 0.0,
                            r["sd"], r["ed"], rel) for n in ("a", "m", "u")}
        first = parts["u"][0]  # the same days for every weight
        for day, (u, m) in enumerate(zip(parts["u"][1], parts["m"][1], strict=True),
                                     start=first):
            useful[day] += u
            measured[day] += m
        allocated[key] += sum(parts["a"][1])
    return sums_of, allocated


def _spread(g: float, s: float, e: float, sd: int, ed: int,
            rel: Sequence[float]) -> tuple[int, list[float]]:
    """Per-day seconds of a group of jobs that all run from day ``sd`` to day ``ed``:
    ``g`` = sum of weights, ``s``/``e`` = weighted sums of start/end (seconds from the
    window's start). Weights are GPUs, times 0/1 for measured, times the useful share.
    Returns the first day and one value per day up to the last (other days have none)."""
    last = len(rel) - 2
    sd, ed = min(max(sd, 0), last), min(max(ed, sd, 0), last)
    if sd == ed:
        return sd, [e - s]
    full = [(rel[i + 1] - rel[i]) * g for i in range(sd + 1, ed)]
    return sd, [rel[sd + 1] * g - s, *full, e - rel[ed] * g]


def _efficiency_burn(objective: Objective, window: maths.Window,
                     jobs: QuerySet[Job] | None = None) -> dict[str, dict[int, Counts]]:
    starts = _burn_starts(window)
    earliest = min(starts.values())
    qs = _efficiency(objective, window, jobs).filter(
        Q(end_time__isnull=True) | Q(end_time__gt=earliest))
    sums = {}
    for s, start in starts.items():
        overlap = Greatest(Seconds(F("e0"), Greatest(F("s0"), _dt(start))), Value(0.0))
        sums[f"m{s}"] = Sum(F("gpu_equivalent") * F("meas") * overlap)
        sums[f"u{s}"] = Sum(F("gpu_equivalent") * F("meas") * F("frac") * overlap)
    rows: Iterable[Mapping[str, Any]] = qs.values("subject").annotate(**sums).order_by()
    return {subject_key(objective, r["subject"]): {
        s: Counts(r[f"u{s}"] or 0.0, r[f"m{s}"] or 0.0) for s in maths.BURN_WINDOWS}
        for r in rows}


def worst_efficiency(objective: Objective, window: maths.Window,
                     jobs: QuerySet[Job] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Measured jobs that wasted at least half their GPU-time, most wasted GPU-hours in the
    window first, per subject."""
    waste = (F("gpu_equivalent") * (Value(1.0) - F("frac"))
             * Greatest(Seconds(F("e0"), F("s0")), Value(0.0)))
    qs = (_efficiency(objective, window, jobs).filter(meas=1.0, frac__lte=0.5)
          .annotate(waste=waste).filter(waste__gt=0))
    return _top(objective, qs, F("waste"), "waste", extra=("frac",))


# --- Worst jobs ------------------------------------------------------------------------------


def _top(objective: Objective, qs: Subjects, order: Any, value: str,
         extra: Sequence[str] = ()) -> dict[str, list[dict[str, Any]]]:
    ranked = qs.annotate(rank=Window(RowNumber(), partition_by=[F("subject")],
                                     order_by=[order.desc(), F("pk").asc()]))
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in (ranked.filter(rank__lte=WORST)
              .values("pk", "cluster__name", "job_id", "display_id", "name", "user_name",
                      "partition", "subject", "rank", value, *extra)
              .order_by("subject", "rank")):
        out[subject_key(objective, r.pop("subject"))].append(
            {"job": r.pop("pk"), "cluster": r.pop("cluster__name"), "value": r.pop(value),
             **{k: v for k, v in r.items() if k != "rank"}})
    return dict(out)


def merge_counts(parts: Mapping[str, SubjectCounts]) -> Counts:
    return maths.add_up(sc.window for sc in parts.values())
