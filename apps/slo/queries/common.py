"""What every SLI query shares: who a result is about, trend days, the sorted-values
aggregate, per-subject results and the worst jobs (the package docstring says how)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict, cast

from django.db.models import (
    Aggregate,
    Case,
    DateTimeField,
    Expression,
    F,
    Field,
    QuerySet,
    Value,
    When,
    Window,
)
from django.db.models.expressions import Combinable
from django.db.models.functions import (
    RowNumber,
)

from apps.analysis import slo as maths
from apps.analysis.slo import Counts
from apps.core.sql import period_index
from apps.jobs.models import Job
from apps.jobs.models.jobs import COUNTABLE
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


@dataclass(frozen=True)
class Grouping:
    """What SLI results are grouped by: SQL expressions annotated on the jobs (``columns``)
    and the key a row of their values makes (``key``). Several rows may make one key (the
    usage reports map GPU-type sets to one model): their counts add up, their waits merge.

    An objective groups by its subject (``by_subject``); the usage reports by any of user,
    team, account, partition, GPU model, size and period (``apps/reports/services.py``).
    """

    columns: Mapping[str, Any]
    key: Callable[[Mapping[str, Any]], Hashable]
    # the scorecard's extras: burn windows, the queue-wait breakdown and trend days; a
    # report reads none of them and saves their GROUP BYs (False)
    scorecard: bool = True

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.columns)


def by_subject(objective: Objective) -> Grouping:
    """The objective's own grouping: ``team:<id>``, ``partition:<name>`` or ``platform``."""
    return Grouping({"subject": subject_expression(objective)},
                    lambda row: subject_key(objective, row["subject"]))


def population(objective: Objective, jobs: QuerySet[Job] | None = None,
               grouping: Grouping | None = None) -> Subjects:
    """The objective's GPU jobs: allocated (a job cancelled while pending has no nodes),
    with GPUs, countable (implausible records wait for an admin, issue 25), narrowed to its
    cluster, partition and team; annotated with ``grouping``'s columns (its subject when
    none is given)."""
    qs = (Job.objects.all() if jobs is None else jobs).filter(
        COUNTABLE, gpu_equivalent__gt=0, node_count__gt=0, start_time__isnull=False)
    if objective.cluster_id:
        qs = qs.filter(cluster_id=objective.cluster_id)
    if objective.partition:
        qs = qs.filter(partition=objective.partition)
    if objective.scope == Objective.Scope.TEAM:
        qs = qs.filter(team__isnull=False)
        if objective.team_id:
            qs = qs.filter(team_id=objective.team_id)
    return cast("Subjects", qs.annotate(**(grouping or by_subject(objective)).columns))


def _day(expr: Combinable, edges: Sequence[datetime], *, end: bool = False) -> Expression:
    """The trend day holding instant ``expr`` (``apps.core.sql.period_index``)."""
    return period_index(expr, edges, end=end)


def _bucket() -> Case:
    """The GPU-count bucket of a job (``apps.analysis.slo.GPU_BUCKETS``) in SQL."""
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


def _subjects(keys: Iterable[Hashable], n_days: int) -> dict[Hashable, SubjectCounts]:
    return {k: SubjectCounts(days=[Counts()] * n_days) for k in keys}


def _add_day(sc: SubjectCounts, day: int, counts: Counts) -> None:
    if 0 <= day < len(sc.days):
        sc.days[day] = sc.days[day].plus(counts)


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


bucket_expression = _bucket  # the usage reports' "job size"


def merge_counts(parts: Mapping[str, SubjectCounts]) -> Counts:
    return maths.add_up(sc.window for sc in parts.values())
