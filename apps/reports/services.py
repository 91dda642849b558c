"""Usage reports (issue 30, item 3): GPU-hours, useful GPU-hours, waits, job counts,
success and efficiency of the jobs a user may see, grouped by any of user, team, account,
partition, GPU model and job size, per day, week or month of any range.

Nothing here counts on its own: every figure comes from the query that prints it elsewhere,
called with the report's groups, so the same figure reads the same everywhere.

| figure | query | also read by |
|---|---|---|
| GPU-hours, useful GPU-hours | ``chargeback.usage.usage_sums`` | statements, quotas |
| jobs started, waits p50/p90/p95 | ``slo.queries.queue_wait`` | the queue-wait SLO |
| jobs ended, success rate | ``slo.queries.job_success`` (the ending rules) | the job-success SLO |
| efficiency | ``slo.queries.gpu_efficiency`` | the GPU-efficiency SLO |

The jobs are ``Job.objects.visible_to(user)`` (a researcher's own, a lead's teams, all for
admins), countable only (each query keeps ``COUNTABLE``), optionally one team's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, cast

from django.db.models import F, QuerySet
from django.utils import timezone

from apps.accounts.models import Team
from apps.analysis import reports as rp
from apps.analysis import slo as maths
from apps.analysis.chargeback import model_shares
from apps.analysis.periods import Granularity, period_edges
from apps.chargeback.usage import usage_sums
from apps.core.sql import period_index
from apps.jobs.models import Job
from apps.slo import queries
from apps.slo import services as slo_services
from apps.slo.models import Objective

# Each dimension's SQL column on the jobs (named apart from the model's fields).
COLUMNS: dict[str, Callable[[], Any]] = {
    "team": lambda: F("team_id"), "user": lambda: F("user_name"),
    "account": lambda: F("account"), "partition": lambda: F("partition"),
    "gpu_model": lambda: F("gpu_types"), "size": queries.bucket_expression,
}


@dataclass(frozen=True)
class Params:
    """A report's typed parameters (``apps/reports/filters.py`` reads them)."""

    first: date
    last: date  # inclusive
    group: tuple[str, ...] = ("team",)
    period: Granularity | None = None
    team: Team | None = None


@dataclass(frozen=True)
class Report:
    params: Params
    edges: list[datetime]
    labels: list[str]
    rows: list[rp.Row]
    total: rp.Row
    as_of: datetime

    @property
    def columns(self) -> list[str]:
        return [rp.DIMENSIONS[d] for d in self.params.group]


def _col(dim: str) -> str:
    return f"g_{dim}"


def _value(dim: str, value: Any) -> Hashable:
    """A group's column value as the report's key (GPU types: the dominant model)."""
    if dim == "gpu_model":
        return rp.dominant_model(value)
    return cast(Hashable, value)


def _grouping(dims: Sequence[str], extra: Mapping[str, Any] | None = None) -> queries.Grouping:
    columns = {_col(d): COLUMNS[d]() for d in dims} | dict(extra or {})
    names = [_col(d) for d in dims]
    by_period = "g_period" in columns

    # called once per fetched row (~100k a report): the plain columns read as they are
    def key(row: Mapping[str, Any]) -> Hashable:
        if "gpu_model" in dims:
            group = tuple(_value(d, row[n]) for d, n in zip(dims, names, strict=True))
        else:
            group = tuple([row[n] for n in names])
        return (group, row["g_period"]) if by_period else group

    return queries.Grouping(columns, key, scorecard=False)


def _objective(sli: str) -> Objective:
    """An unsaved platform-wide objective: the SLI's population and rules, no narrowing
    (the jobs handed in are already the reader's)."""
    return Objective(name="report", sli=sli, target=0.5, scope=Objective.Scope.PLATFORM,
                     wait_minutes=0 if sli == Objective.Sli.QUEUE_WAIT else None)


def jobs_for(user: Any, params: Params) -> QuerySet[Job]:
    jobs = Job.objects.visible_to(user)
    return jobs.filter(team=params.team) if params.team is not None else jobs


def build(user: Any, params: Params, now: datetime | None = None) -> Report:
    """The report of the jobs ``user`` may see (four GROUP BYs, one per source)."""
    now = now or timezone.now()
    tz = timezone.get_current_timezone()
    edges = period_edges(params.first, params.last, params.period, tz)
    lo, hi = edges[0], edges[-1]
    window = maths.Window(lo, hi, min(max(now, lo), hi))
    jobs = jobs_for(user, params)
    rows: dict[tuple[Hashable, int], rp.Row] = {}

    def row(group: Hashable, period: int) -> rp.Row:
        """The group's row in the period, made on first use (later sources fill it in)."""
        found = rows.get((group, period))
        if found is None:
            values = cast(tuple[Any, ...], group)
            found = rows[(group, period)] = rp.Row(group=tuple(map(str, values)), period=period)
        return found

    _hours(jobs, params.group, edges, now, rows, row)
    _waits(jobs, params.group, window, edges, rows, row)
    _success_and_efficiency(jobs, params.group, window, edges, rows, row)
    table = rp.table(_named(list(rows.values()), params.group))
    labels = [rp.period_label(e.astimezone(tz).date(), params.period) for e in edges[:-1]]
    return Report(params, edges, labels, table, rp.total(table), now)


Rows = dict[tuple[Hashable, int], rp.Row]
RowOf = Callable[[Hashable, int], rp.Row]


def _hours(jobs: QuerySet[Job], dims: Sequence[str], edges: Sequence[datetime],
           now: datetime, rows: Rows, row: RowOf) -> None:
    """GPU-hours through the statements' GROUP BY; GPU-hours of several models split by
    share as statements price them (``model_shares``)."""
    columns = {_col(d): COLUMNS[d]() for d in dims}
    names = list(columns)
    by_model = "gpu_model" in dims
    for values, period, hours in usage_sums(jobs, edges[0], edges[-1], now, columns, edges,
                                            parts=("useful",)):
        if not by_model:
            rp.add_hours(row(tuple([values[n] for n in names]), period), hours.allocated,
                         hours.useful)
            continue
        for model, share in model_shares(values[_col("gpu_model")] or {}).items():
            group = tuple(model if d == "gpu_model" else values[_col(d)] for d in dims)
            rp.add_hours(row(group, period), hours.allocated * share, hours.useful * share)


def _waits(jobs: QuerySet[Job], dims: Sequence[str], window: maths.Window,
           edges: Sequence[datetime], rows: Rows, row: RowOf) -> None:
    """Jobs started and their waits per group and period of their start (the queue-wait
    SLO's query and percentiles)."""
    grouping = _grouping(dims, {"g_period": period_index(F("start_time"), edges)})
    parts = queries.queue_wait(_objective(Objective.Sli.QUEUE_WAIT), window,
                               [window.start, window.observed_end], jobs, grouping)
    for key, sc in parts.items():
        group, period = cast(tuple[Hashable, int], key)  # the grouping's key with g_period
        d, r = sc.details, row(group, period)
        r.started = d["total"] + d["own_jobs"]
        r.wait_p50, r.wait_p90, r.wait_p95 = d["p50"], d["p90"], d["p95"]


def _success_and_efficiency(jobs: QuerySet[Job], dims: Sequence[str], window: maths.Window,
                            edges: Sequence[datetime], rows: Rows, row: RowOf) -> None:
    """Endings and efficiency per group, their periods as the SLOs' trend days."""
    grouping = _grouping(dims)
    success = queries.job_success(_objective(Objective.Sli.JOB_SUCCESS), window, edges,
                                  slo_services.ending_rules(), jobs, grouping)
    for group, sc in success.items():
        for period, counts in enumerate(sc.days):
            if counts.total:
                r = row(group, period)
                r.ended, r.success = int(counts.total), counts
    efficiency = queries.gpu_efficiency(_objective(Objective.Sli.GPU_EFFICIENCY), window,
                                        edges, jobs, grouping)
    for group, sc in efficiency.items():
        for period, counts in enumerate(sc.days):
            if counts.total:
                row(group, period).efficiency = counts


def _named(rows: list[rp.Row], dims: Sequence[str]) -> list[rp.Row]:
    """Team ids as slugs, empty values as words."""
    slugs: dict[str, str] = {}
    if "team" in dims:
        slugs = {str(pk): slug for pk, slug in Team.objects.values_list("pk", "slug")}

    def name(dim: str, value: str) -> str:
        if dim == "team":
            return slugs.get(value, rp.NO_TEAM)
        if dim == "gpu_model" and value in ("", "None"):
            return "(unknown)"
        return value or "(none)"

    for r in rows:  # in place: the rows are this report's own (thousands of them)
        r.group = tuple([name(d, v) for d, v in zip(dims, r.group, strict=True)])
    return rows
