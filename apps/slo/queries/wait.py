"""The queue-wait SLI in SQL: jobs **started** in the window, own-limit waits apart."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from datetime import datetime
from itertools import chain
from typing import TYPE_CHECKING, Any

from django.db.models import (
    F,
    IntegerField,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.functions import (
    Coalesce,
    Greatest,
)

from apps.analysis import pending
from apps.analysis import slo as maths
from apps.analysis.slo import Counts
from apps.chargeback.usage import Seconds
from apps.core.sql import IntCase, IntCount
from apps.jobs.models import Job
from apps.slo.models import Objective
from apps.slo.queries.common import (
    Grouping,
    SortedValues,
    SubjectCounts,
    _add_day,
    _bucket,
    _burn_starts,
    _day,
    _subjects,
    _top,
    by_subject,
    population,
)

if TYPE_CHECKING:
    from apps.slo.queries.common import Waits


OWN_Q = Q(wait_reason__in=sorted(pending.OWN_REASONS)) | Q(
    *(Q(wait_reason__startswith=p) for p in pending.OWN_PREFIXES), _connector=Q.OR)


def _waits(objective: Objective, window: maths.Window, jobs: QuerySet[Job] | None = None,
           grouping: Grouping | None = None) -> Waits:
    """Started jobs with ``wait_s`` (eligible to start), ``before_s`` (submit to eligible),
    ``own`` (1: Slurm's last reason was one of the team's own limits) and ``pct_s``, the wait
    the percentiles describe: the wait for resources, or for own-limit jobs their whole wait
    (one sort key for both, so each group sorts once)."""
    ready = Coalesce(F("eligible_time"), F("submit_time"))
    own = IntCase(When(OWN_Q, then=Value(1)), default=Value(0), output_field=IntegerField())
    return (population(objective, jobs, grouping)
            .filter(start_time__gte=window.start, start_time__lt=window.observed_end)
            .annotate(wait_s=Greatest(Seconds(F("start_time"), ready), Value(0.0)),
                      before_s=Greatest(Seconds(ready, F("submit_time")), Value(0.0)),
                      own=own)
            .annotate(pct_s=F("wait_s") + F("before_s") * F("own")))


# Grouped by ``own`` as well, so the (costly) reason test runs once per job: rows with
# own=0 are the counted jobs (their waits for resources), own=1 the jobs held by their own
# limits (their whole wait, reported apart).
def _wait_cells(grouping: Grouping, qs: Waits,
                target: float) -> list[tuple[Hashable, str, str, int, Mapping[str, Any]]]:
    """(key, partition, GPU bucket, own, cell): jobs, on time, waited before eligible, and
    the sorted waits (``pct_s``). Rows of one key may repeat (the key merges them)."""
    breakdown = ("partition", "bucket") if grouping.scorecard else ()
    rows = (qs.annotate(bucket=_bucket())
            .values(*grouping.names, *breakdown, "own")
            .annotate(n=IntCount("pk"), good=IntCount("pk", filter=Q(wait_s__lte=target)),
                      before_jobs=IntCount("pk", filter=Q(before_s__gt=0)),
                      waits=SortedValues("pct_s"))
            .order_by())
    return [(grouping.key(r), r.get("partition", ""), r.get("bucket", ""), r["own"], r)
            for r in rows]


def _wait_figures(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One group's figures from the cells it is made of: counts added, nearest-rank
    percentiles over all their waits (sorted runs: ``sorted`` merges them in linear time)."""
    if len(cells) == 1:  # the usual case: one cell's waits, already sorted by SQL
        c = cells[0]
        n, good, before, waits = c["n"], c["good"], c["before_jobs"], c["waits"]
    else:
        waits = sorted(chain.from_iterable(c["waits"] for c in cells))
        n, good = sum(c["n"] for c in cells), sum(c["good"] for c in cells)
        before = sum(c["before_jobs"] for c in cells)
    pct = maths.percentile_of_sorted
    return {"n": n, "good": good, "before_jobs": before, "p50": pct(waits, 0.5),
            "p90": pct(waits, 0.9), "p95": pct(waits, 0.95)}


def _wait_row(counted: Sequence[Mapping[str, Any]],
              own: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One subject's (or breakdown row's) figures from its own=0 and own=1 cells."""
    c, o = _wait_figures(counted), _wait_figures(own)
    return {"total": c["n"], "good": c["good"], "p50": c["p50"], "p90": c["p90"],
            "p95": c["p95"], "before_jobs": c["before_jobs"], "own_jobs": o["n"],
            "own_p50": o["p50"], "own_p90": o["p90"]}


def _wait_days(grouping: Grouping, qs: Waits, window: maths.Window,
               edges: Sequence[datetime], target: float,
               out: dict[Hashable, SubjectCounts]) -> None:
    """The counted jobs per subject and day (the trend), with the burn windows as filtered
    counts added up over the days (a parallel hash aggregate in PostgreSQL)."""
    burn = {}
    for s, start in _burn_starts(window).items():
        burn[f"t{s}"] = IntCount("pk", filter=Q(start_time__gte=start))
        burn[f"g{s}"] = IntCount("pk", filter=Q(start_time__gte=start, wait_s__lte=target))
    for sc in out.values():
        sc.burn = {s: Counts(0, 0) for s in maths.BURN_WINDOWS}
    rows: Iterable[Mapping[str, Any]] = (  # Mapping: the burn columns are named at run time
        qs.filter(own=0).annotate(day=_day(F("start_time"), edges))
        .values(*grouping.names, "day")
        .annotate(n=IntCount("pk"), good=IntCount("pk", filter=Q(wait_s__lte=target)), **burn)
        .order_by())
    for r in rows:
        sc = out[grouping.key(r)]
        _add_day(sc, r["day"], Counts(r["good"], r["n"]))
        for s in maths.BURN_WINDOWS:
            if r[f"t{s}"]:
                sc.burn[s] = sc.burn[s].plus(Counts(r[f"g{s}"], r[f"t{s}"]))


def queue_wait(objective: Objective, window: maths.Window, edges: Sequence[datetime],
               jobs: QuerySet[Job] | None = None,
               grouping: Grouping | None = None) -> dict[Any, SubjectCounts]:
    """Two GROUP BYs: by subject, partition, GPU-count bucket and own (the breakdown; the
    subject's figures add its cells up), and by subject and day (the trend, burn windows).
    ``grouping`` replaces the objective's subjects (the usage reports' groups)."""
    target = float((objective.wait_minutes or 0) * 60)
    grouping = grouping or by_subject(objective)
    qs = _waits(objective, window, jobs, grouping)
    Cells = tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]  # own=0, own=1
    by_key: dict[Hashable, Cells] = {}
    by_row: dict[tuple[Hashable, str, str], Cells] = {}
    for key, partition, bucket, own, cell in _wait_cells(grouping, qs, target):
        by_key.setdefault(key, ([], []))[own].append(cell)
        if grouping.scorecard:  # the breakdown's rows: a report reads none
            by_row.setdefault((key, partition, bucket), ([], []))[own].append(cell)
    # trend days only for a scorecard (``_wait_days``); a report's keys carry their period
    out = _subjects(by_key, len(edges) - 1 if grouping.scorecard else 0)
    for key, (counted, own_limits) in by_key.items():
        sc = out[key]
        sc.details = _wait_row(counted, own_limits)
        sc.window = Counts(sc.details["good"], sc.details["total"])
    if not grouping.scorecard:
        return out
    _wait_days(grouping, qs, window, edges, target, out)
    for (key, partition, bucket), (counted, own_limits) in sorted(
            by_row.items(), key=lambda kv: (str(kv[0][0]), kv[0][1], _bucket_order(kv[0][2]))):
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
