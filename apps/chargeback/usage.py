"""Reading GPU-hours out of the job archive, two ways that must agree.

- ``grouped_rows``: one SQL GROUP BY per rate segment (team, user, partition, GPU types),
  summing ``gpu_equivalent x overlap`` and the same weighted by the archived split. This is
  what statements use: a month of a million jobs is one aggregate query, not a loop. It is
  ``usage_sums`` with the statement's columns; the usage reports (``apps/reports``) call
  ``usage_sums`` with theirs, and with periods, so a figure reads the same in both.
- ``job_usages``: the jobs one by one as ``apps.analysis.chargeback.JobUsage``, for the
  reconciliation job by job and for tests that check the SQL against the pure maths.

Overlap is ``min(end, hi) - max(start, lo)`` in seconds, where a job that has not ended
(``end_time`` empty) ends "now". Only archived metrics with a measure count as measured
(``live`` snapshots and ``complete`` archives); everything else is unmeasured. Implausible
records no admin has accepted (``Job.objects.countable``, issue 25) count nowhere: not in
statements, quotas' usage or the reconciliation (which then lists them as differences).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db.models import (
    DateTimeField,
    Expression,
    F,
    FilteredRelation,
    FloatField,
    Q,
    QuerySet,
    Value,
)
from django.db.models.functions import Coalesce, Greatest, Least, NullIf

from apps.accounts.models import Team
from apps.analysis.chargeback import GroupRow, Hours, JobUsage, Split
from apps.core.sql import FloatSum, Seconds, period_index, spread_sums
from apps.jobs.models import Job, JobMetrics
from apps.jobs.models.jobs import COUNTABLE

# Archived metrics that count as measured: joined with this condition, others are NULL
MEASURED = Q(metrics__status__in=JobMetrics.MEASURED) & \
    ~Q(metrics__measure="")
SPLIT_PARTS = ("useful", "waiting", "held_idle", "no_process")


def _dt(value: datetime) -> Value:
    return Value(value, output_field=DateTimeField())


def overlapping(jobs: QuerySet[Job], lo: datetime, hi: datetime) -> QuerySet[Job]:
    """Jobs that held GPUs at some time in ``[lo, hi)`` and count (``countable``)."""
    return _in_window(jobs, lo, hi).filter(COUNTABLE)


def held_back(jobs: QuerySet[Job], lo: datetime, hi: datetime) -> QuerySet[Job]:
    """The implausible records ``overlapping`` leaves out: what pages say they left out."""
    return _in_window(jobs, lo, hi).exclude(COUNTABLE)


def _in_window(jobs: QuerySet[Job], lo: datetime, hi: datetime) -> QuerySet[Job]:
    return jobs.filter(start_time__isnull=False, start_time__lt=hi, gpu_equivalent__gt=0).filter(
        Q(end_time__isnull=True) | Q(end_time__gt=lo))


def gpu_seconds(lo: datetime, hi: datetime, now: datetime,
                gpus: str = "gpu_equivalent") -> Expression:
    """``gpus x`` seconds of the job inside ``[lo, hi)`` (GPUs counting shards by fraction,
    or ``gpus``: whole ``gres/gpu`` only, as Slurm's gres/gpu TRES counts them)."""
    end = Least(Coalesce(F("end_time"), _dt(now)), _dt(hi))
    start = Greatest(F("start_time"), _dt(lo))
    seconds = Greatest(Seconds(end, start), Value(0.0))
    return F(gpus) * seconds


def _fraction(part: str) -> Expression:
    """The part's share of the job's archived hours; 0 when not measured (no joined row)."""
    share = F(f"measured__{part}_hours") / NullIf(F("measured__allocated_gpu_hours"),
                                                  Value(0.0))
    return Coalesce(share, Value(0.0), output_field=FloatField())


STATEMENT_COLUMNS = ("team_id", "user_name", "partition", "gpu_types")


def grouped_rows(jobs: QuerySet[Job], lo: datetime, hi: datetime,
                 now: datetime) -> list[GroupRow]:
    """One GROUP BY over ``jobs`` for ``[lo, hi)``: allocated and split GPU-hours per
    (team, user, partition, GPU types): a statement's rows (``usage_sums``)."""
    rows = [row | {"hours": hours}
            for row, _period, hours in usage_sums(jobs, lo, hi, now, STATEMENT_COLUMNS)]
    slugs = dict(Team.objects.filter(pk__in={r["team_id"] for r in rows})
                 .values_list("pk", "slug"))
    return [_group_row(row, slugs) for row in rows]


UsageSums = tuple[dict[str, Any], int, Hours]  # (group's columns, period, GPU-hours)


def usage_sums(jobs: QuerySet[Job], lo: datetime, hi: datetime, now: datetime,
               columns: Sequence[str] | Mapping[str, Any],
               edges: Sequence[datetime] | None = None,
               parts: Sequence[str] = SPLIT_PARTS) -> list[UsageSums]:
    """Allocated and split GPU-hours of ``jobs`` inside ``[lo, hi)`` per group of
    ``columns`` (field names, or names to SQL expressions) and, given ``edges``
    (``[lo, ..., hi]``), per period between them: what statements (one period, their
    columns), quotas and the usage reports (any columns, days to months) all read.

    One period: one GROUP BY summing ``gpus x overlap``, shaped like the hand-written floor
    of ``bench/chargeback.py`` (grouped on ids, the archive joined only where it counts as
    measured). Several: the GROUP BY adds each job's first and last period and sums the
    weighted starts and ends, which ``apps.core.sql.spread_sums`` turns into seconds per
    period exactly in an outer query (``apps.analysis.periods.spread`` summed; the SLO
    efficiency trend's method). ``parts``: the split parts
    summed (others stay 0: a report reading useful hours only saves their sums).
    """
    exprs = dict(columns) if isinstance(columns, Mapping) else {}
    names = tuple(columns)
    qs = (overlapping(jobs, lo, hi)
          .annotate(measured=FilteredRelation("metrics", condition=MEASURED)).annotate(**exprs))
    if edges is None or len(edges) <= 2:
        seconds = gpu_seconds(lo, hi, now)
        sums = {"allocated": FloatSum(seconds)}
        sums |= {part: FloatSum(seconds * _fraction(part)) for part in parts}
        return [({k: row[k] for k in names}, 0, _hours(row))
                for row in qs.values(*names).annotate(**sums).order_by()]
    return _period_sums(qs, names, lo, hi, now, edges, parts)


def _hours(row: Mapping[str, Any]) -> Hours:
    return Hours(*((row.get(k) or 0.0) / 3600 for k in ("allocated", *SPLIT_PARTS)))


def _period_sums(qs: QuerySet[Job], names: tuple[str, ...], lo: datetime, hi: datetime,
                 now: datetime, edges: Sequence[datetime],
                 parts: Sequence[str]) -> list[UsageSums]:
    """``usage_sums`` over several periods: GROUP BY (columns, first period, last period)."""
    s0 = Greatest(F("start_time"), _dt(lo))
    e0 = Greatest(Least(Coalesce(F("end_time"), _dt(now)), _dt(hi)), s0)
    qs = qs.annotate(rs=Seconds(s0, _dt(lo)), re=Seconds(e0, _dt(lo)),
                     sd=period_index(s0, edges), ed=period_index(e0, edges, end=True))
    weights: dict[str, Any] = {"allocated": F("gpu_equivalent")}
    weights |= {part: F("gpu_equivalent") * _fraction(part) for part in parts}
    sums: dict[str, FloatSum] = {}
    for name, w in weights.items():
        sums |= {f"{name}_g": FloatSum(w), f"{name}_s": FloatSum(w * F("rs")),
                 f"{name}_e": FloatSum(w * F("re"))}
    rel = [(e - lo).total_seconds() for e in edges]
    grouped = qs.values(*names, "sd", "ed").annotate(**sums).order_by()
    out = []
    for row in spread_sums(grouped, names, list(weights), rel):
        values = dict(zip(weights, row[len(names) + 1:], strict=True))
        if values["allocated"] > 0:
            out.append((dict(zip(names, row, strict=False)), row[len(names)], _hours(values)))
    return out


def _group_row(row: Mapping[str, Any], slugs: dict[int, str]) -> GroupRow:
    return GroupRow(slugs.get(row["team_id"], ""), row["user_name"], row["partition"],
                    dict(row["gpu_types"] or {}), row["hours"])


def job_usages(jobs: QuerySet[Job], lo: datetime, hi: datetime,
               now: datetime) -> Iterator[JobUsage]:
    """The jobs in ``[lo, hi)`` one by one, with their archived split."""
    rows = (overlapping(jobs, lo, hi).select_related("team", "metrics")
            .only("job_id", "team__slug", "user_name", "partition", "gpu_equivalent",
                  "gpu_types", "start_time", "end_time", "metrics__status",
                  "metrics__measure", *(f"metrics__{p}_hours" for p in SPLIT_PARTS),
                  "metrics__allocated_gpu_hours")
            .order_by("pk"))
    for job in rows.iterator(chunk_size=2000):
        assert job.start_time is not None  # overlapping() keeps started jobs only
        yield JobUsage(job.job_id, job.team.slug if job.team else "", job.user_name,
                       job.partition, job.gpu_equivalent, job.start_time,
                       job.end_time or now, dict(job.gpu_types or {}), _split(job))


def _split(job: Job) -> Split | None:
    metrics = getattr(job, "metrics", None)
    if metrics is None or not metrics.measure or metrics.allocated_gpu_hours <= 0 or \
            metrics.status not in JobMetrics.MEASURED:
        return None
    total = metrics.allocated_gpu_hours
    return Split(*(getattr(metrics, f"{p}_hours") / total for p in SPLIT_PARTS))


def gpu_seconds_by_job(jobs: QuerySet[Job], lo: datetime, hi: datetime,
                       now: datetime) -> Iterable[Mapping[str, Any]]:
    """(job id, account, user, whole-GPU seconds in the window) per job: Beacon's side of
    the reconciliation (Slurm's ``gres/gpu`` TRES has no shards)."""
    return (overlapping(jobs, lo, hi).filter(gpus__gt=0)
            .annotate(seconds=gpu_seconds(lo, hi, now, gpus="gpus"))
            .values("job_id", "account", "user_name", "seconds").order_by("job_id")
            .iterator(chunk_size=5000))


def wasteful_jobs(jobs: QuerySet[Job], lo: datetime, hi: datetime, now: datetime,
                  min_share: float = 0.5, limit: int = 20) -> list[tuple[Job, Hours]]:
    """Measured jobs that wasted at least ``min_share`` of their measured GPU-hours inside
    ``[lo, hi)``, most wasted GPU-hours first, with their hours in the window.

    "Wasted" is waiting + held idle + no process: the statement's "where the waste came from".
    """
    seconds = gpu_seconds(lo, hi, now)
    waste = sum((_fraction(p) for p in ("waiting", "held_idle", "no_process")),
                start=Value(0.0))
    measured = sum((_fraction(p) for p in SPLIT_PARTS), start=Value(0.0))
    rows = (overlapping(jobs, lo, hi)
            .annotate(measured=FilteredRelation("metrics", condition=MEASURED))
            .annotate(gpu_s=seconds, waste_share=waste, measured_share=measured)
            .filter(measured_share__gt=0, gpu_s__gt=0)
            .annotate(ratio=F("waste_share") / F("measured_share"))
            .filter(ratio__gte=min_share)
            .annotate(wasted=F("gpu_s") * F("waste_share"))
            .select_related("cluster", "metrics").order_by("-wasted", "pk")[:limit])
    return [(job, _job_hours(job)) for job in rows]


def _job_hours(job: Any) -> Hours:
    fractions = [getattr(job.metrics, f"{p}_hours") / job.metrics.allocated_gpu_hours
                 for p in SPLIT_PARTS]
    allocated = job.gpu_s / 3600
    return Hours(allocated, *(allocated * f for f in fractions))
