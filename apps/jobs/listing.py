"""The job list's query: scope, filters, sort and page, shared by the page and its CSV export.

Sorting is by a whitelisted column name (``?sort=gpus``, ``?sort=-wait``); an unknown name
falls back to the default, newest submitted first, so a stale bookmark still opens the page.
Every order ends on the primary key in the same direction, so rows with equal values keep
one order across pages. The default order keeps the keyset cursor (constant cost at any
depth, docs/joblist.md); other orders are numbered pages read with OFFSET, which costs more
deep in a long list but lets a page be named.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from django.db.models import (
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Q,
    QuerySet,
    Value,
)
from django.db.models.expressions import Combinable, OrderBy
from django.db.models.functions import Coalesce
from django.http import QueryDict
from django.utils import timezone

from apps.accounts.permissions import lead_team_ids
from apps.core.filtering import page_filterset
from apps.core.paging import split_slice
from apps.core.sql import Seconds
from apps.jobs import presenters
from apps.jobs.filters import JobFilterSet
from apps.jobs.forms import JobListForm, ListChoices, default_scope
from apps.jobs.models import Job


def _wait() -> Combinable:
    """Eligible (or submitted) to start, as the Wait column shows it; null until it starts."""
    return ExpressionWrapper(F("start_time") - Coalesce(F("eligible_time"), F("submit_time")),
                             output_field=DurationField())


def _run_time() -> Combinable:
    """Start to end, or to now while it runs, as the Run time column shows it."""
    return ExpressionWrapper(Coalesce(F("end_time"), Value(timezone.now())) - F("start_time"),
                             output_field=DurationField())


def _gpu_hours() -> Combinable:
    """GPUs x run time, as the GPU-h column (``Job.gpu_hours``) shows it; null until it starts."""
    end = Coalesce(F("end_time"), Value(timezone.now()))
    return ExpressionWrapper(F("gpu_equivalent") * Seconds(end, F("start_time")),
                             output_field=FloatField())


def _diagnoses() -> Combinable:
    return Coalesce(F("finding_count"), Value(0))


# column -> (its values, first click descending?): the table's columns, left to right
COLUMNS: dict[str, tuple[str, Callable[[], list[Any]], bool]] = {
    "job": ("Job", lambda: [F("job_id")], False),
    "name": ("Name", lambda: [F("name")], False),
    "user": ("User", lambda: [F("user_name")], False),
    "team": ("Team", lambda: [F("team__slug"), F("account")], False),
    "partition": ("Partition", lambda: [F("partition")], False),
    "state": ("State", lambda: [F("state")], False),
    "gpus": ("GPUs", lambda: [F("gpu_equivalent")], True),
    "gpu_hours": ("GPU-h", lambda: [_gpu_hours()], True),
    "computing": ("Computing", lambda: [F("useful")], True),
    "diagnosis": ("Diagnosis", lambda: [_diagnoses()], True),
    "submitted": ("Submitted", lambda: [F("submit_time")], True),
    "wait": ("Wait", lambda: [_wait()], True),
    "runtime": ("Run time", lambda: [_run_time()], True),
}
NUMERIC = {"gpus", "gpu_hours", "computing", "wait", "runtime"}  # right-aligned cells
EFFICIENCY_ONLY = {"computing", "diagnosis"}  # columns of the job list, not every job table
DEFAULT_SORT = "-submitted"


@dataclass(frozen=True)
class Sort:
    column: str  # a key of COLUMNS
    descending: bool

    @property
    def param(self) -> str:
        return f"-{self.column}" if self.descending else self.column

    @property
    def is_default(self) -> bool:
        """The order the keyset cursor pages through (newest submitted first)."""
        return self.param == DEFAULT_SORT

    def order_by(self) -> list[OrderBy]:
        """The ORDER BY: the column's values, nulls last either way, then the id."""
        exprs = [e.desc(nulls_last=True) if self.descending else e.asc(nulls_last=True)
                 for e in COLUMNS[self.column][1]()]
        return [*exprs, F("pk").desc() if self.descending else F("pk").asc()]


def parse_sort(value: str) -> Sort:
    """``?sort=`` as a Sort; anything outside the whitelist is the default order."""
    column = value.removeprefix("-")
    if column not in COLUMNS:
        return parse_sort(DEFAULT_SORT)
    return Sort(column, value.startswith("-"))


@dataclass(frozen=True)
class NumberedPage:
    rows: list[Job]
    number: int
    has_next: bool

    @property
    def has_previous(self) -> bool:
        return self.number > 1


def numbered_page(qs: QuerySet[Job], sort: Sort, number: int, size: int,
                  split: list[Q] | None = None) -> NumberedPage:
    """Page ``number`` (from 1) of ``qs`` in ``sort`` order; one row more tells if there is
    a next page, so no COUNT over the whole list is needed. ``split``: as ``keyset_page``."""
    start = (number - 1) * size
    rows = split_slice(qs.order_by(*sort.order_by()), start, start + size + 1, split)
    return NumberedPage(rows=rows[:size], number=number, has_next=len(rows) > size)


@dataclass(frozen=True)
class Listing:
    """The jobs a request's list asks for, before paging: the page and the export read it."""

    choices: ListChoices
    sort: Sort
    led: list[int]
    filterset: JobFilterSet
    rows: QuerySet[Job]  # filtered, scoped, with the columns' annotations; not ordered yet
    # the scope as parts an index each serves (core.paging.split_slice); None: read it whole
    split: list[Q] | None


def listing(user: Any, query: QueryDict) -> Listing:
    """Scope (``visible_to`` first), filters and annotations for ``query``."""
    led = lead_team_ids(user)
    choices = JobListForm(query, default_scope(user.is_staff, bool(led))).choices()
    jobs = Job.objects.visible_to(user)
    if choices.scope == "mine":
        jobs = jobs.filter(user=user)
    elif choices.scope == "team":
        jobs = jobs.filter(team_id__in=led)
    filterset = page_filterset(JobFilterSet, query, queryset=jobs)
    return Listing(choices=choices, sort=parse_sort(choices.sort), led=led,
                   filterset=filterset, split=_split(user, choices.scope, led),
                   rows=presenters.list_rows(filterset.qs, choices.grouped))


def _split(user: Any, scope: str, led: list[int]) -> list[Q] | None:
    """The scope's parts: each led team for "team"; for "all" the user and each led team
    (``visible_parts``; nothing for an admin); "mine" is one index already."""
    if scope == "team":
        return [Q(team_id=team) for team in led]
    if scope == "all":
        return Job.objects.visible_parts(user, led)
    return None


def header_cells(sort: Sort, query: str, efficiency: bool) -> list[dict[str, Any]]:
    """The table's headers as links that sort by their column (again: the other way)."""
    cells = []
    for column, (label, _, first_descending) in COLUMNS.items():
        if column in EFFICIENCY_ONLY and not efficiency:
            continue
        active = sort.column == column
        descending = not sort.descending if active else first_descending
        param = f"-{column}" if descending else column
        cells.append({"label": label, "href": f"?{query}&sort={param}" if query else
                      f"?sort={param}", "numeric": column in NUMERIC,
                      "aria_sort": ("descending" if sort.descending else "ascending")
                      if active else ""})
    return cells


# --- The CSV export ------------------------------------------------------------------------

CSV_HEADER = ("job", "cluster", "name", "user", "team", "account", "partition", "state",
              "gpus", "gpu_hours", "computing_percent", "diagnoses", "submitted_utc", "wait_s",
              "run_time_s", "array_job", "array_task")


def csv_rows(jobs: QuerySet[Job], limit: int) -> Iterator[tuple[Any, ...]]:
    """The listed jobs as CSV rows, in the list's order and with its columns' values; past
    ``limit`` rows, one last row saying the list was cut."""
    for n, job in enumerate(jobs[:limit + 1].iterator(chunk_size=2000)):
        if n == limit:
            yield (f"(cut at {limit} rows: narrow the filters to export the rest)",)
            return
        yield _csv_row(job)


def _csv_row(job: Job) -> tuple[Any, ...]:
    useful = getattr(job, "useful", None)
    wait, run = job.queue_wait, job.run_time
    return (job.display_id, job.cluster.name, job.name, job.user_name,
            job.team.slug if job.team is not None else "", job.account, job.partition, job.state,
            f"{job.gpu_equivalent:g}", round(job.gpu_hours, 2),
            "" if useful is None else round(useful * 100, 1),
            getattr(job, "finding_count", None) or 0,
            job.submit_time.astimezone(UTC).isoformat(timespec="seconds"),
            "" if wait is None else int(wait.total_seconds()),
            "" if run is None else int(run.total_seconds()),
            job.array_job_id or "", "" if job.array_task_id is None else job.array_task_id)
