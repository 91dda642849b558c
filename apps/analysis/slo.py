"""SLO maths over populations of GPU jobs: SLIs, error budgets, burn rates (docs/slo.md).

Pure functions over frozen dataclasses (no Django). The services count events in SQL and hand
the counts to :func:`assess`; the per-job functions below (:func:`job_wait`,
:func:`classify_ending`, :func:`efficiency_seconds`, :func:`reference_counts`) are the
reference the SQL is tested against, and the table tests' subject.

**Events and window edges.** An SLI is ``good / total`` over the events of a window
``[start, end)``. Each SLI counts its events where they happen, so nothing is counted twice
across windows:

- *queue wait*: one event per job that **started** in the window (its start time decides);
  good when its wait for resources was within the target. A job still waiting is counted
  when it starts.
- *job success*: one event per job that **ended** in the window (its end time decides); good
  unless the platform caused the ending.
- *GPU efficiency*: GPU-seconds, **prorated**: a job counts with the part of its run inside
  the window (GPUs x overlap, as chargeback counts them), good for the useful share the job
  archive measured over the whole run (assumed uniform over the run).

Every array task is a job of its own (an allocation the scheduler had to serve); the pending
remainder of an array has no allocation and is never counted.

**Budgets.** With target ``t`` the budget is ``(1 - t) x total`` bad events; ``remaining`` is
``1 - bad / budget`` (1.0 = untouched, 0 = spent, negative = overspent). An empty window has
no SLI and an untouched budget. Burn rate over a window = ``(bad / total) / (1 - t)``: 1.0
spends exactly the budget over the SLO's window. Alerts are the Google SRE workbook's
multiwindow, multi-burn-rate pairs (:data:`WORKBOOK_ALERTS`): an alert fires when both its
long and its short window burn faster than ``budget share x SLO window / long window``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum
from itertools import pairwise

from apps.analysis.pending import OWN, wait_cause

MINUTE, HOUR, DAY = 60, 3600, 86400


class SloError(ValueError):
    """An objective or window the maths cannot evaluate (a target outside (0, 1), ...)."""


class Sli(StrEnum):
    QUEUE_WAIT = "queue_wait"
    JOB_SUCCESS = "job_success"
    GPU_EFFICIENCY = "gpu_efficiency"


class WindowKind(StrEnum):
    ROLLING_7D = "rolling_7d"
    ROLLING_28D = "rolling_28d"
    CALENDAR_MONTH = "calendar_month"


class Status(StrEnum):
    NO_DATA = "no_data"
    OK = "ok"
    SLOW_BURN = "slow_burn"
    FAST_BURN = "fast_burn"
    BREACHED = "breached"


class Cause(StrEnum):
    """Whose ending it was: only ``platform`` endings spend the success budget."""

    PLATFORM = "platform"
    USER = "user"
    SUCCESS = "success"
    EXCLUDED = "excluded"


# --- Windows -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """The SLO's window ``[start, end)`` (aware datetimes) and how much of it has passed.

    A rolling window ends now; a calendar month ends at the next month's local midnight while
    ``observed_end`` is now. Budgets and burn rates use the full length. ``calendar`` windows
    have local days (23 h or 25 h where the clocks change); rolling ones 24 h steps.
    """

    start: datetime
    end: datetime
    observed_end: datetime
    calendar: bool = False

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise SloError("window edges must be aware datetimes")
        if not self.start < self.end:
            raise SloError(f"window ends ({self.end}) before it starts ({self.start})")
        if not self.start <= self.observed_end <= self.end:
            raise SloError("the observed end must lie inside the window")

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def month_start(year: int, month: int, tz: tzinfo) -> datetime:
    """Local midnight of the month's first day, as an aware UTC datetime."""
    return datetime(year, month, 1, tzinfo=tz).astimezone(UTC)


def calendar_month(now: datetime, tz: tzinfo) -> Window:
    """The calendar month holding ``now`` in ``tz``: [local midnight of the 1st, next 1st).

    Months where the clocks change are an hour shorter or longer (743 h, 745 h in Europe).
    """
    local = now.astimezone(tz)
    start = month_start(local.year, local.month, tz)
    nxt = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
    return Window(start, month_start(*nxt, tz), now, calendar=True)


def rolling(now: datetime, days: int) -> Window:
    return Window(now - timedelta(days=days), now, now)


def slo_window(kind: WindowKind | str, now: datetime, tz: tzinfo) -> Window:
    """The window of an objective evaluated at ``now``."""
    kind = WindowKind(kind)
    if kind is WindowKind.CALENDAR_MONTH:
        return calendar_month(now, tz)
    return rolling(now, 7 if kind is WindowKind.ROLLING_7D else 28)


def month_window(year: int, month: int, tz: tzinfo, now: datetime) -> Window:
    """A whole calendar month (history snapshots); observed up to ``now`` if still open."""
    full = calendar_month(month_start(year, month, tz), tz)
    return Window(full.start, full.end, min(max(now, full.start), full.end), calendar=True)


def day_edges(window: Window, tz: tzinfo) -> list[datetime]:
    """Trend days from the window's start to its observed end: local midnights for calendar
    months (23 h and 25 h days where the clocks change), 24 h steps for rolling windows."""
    edges, t = [window.start], window.start
    local = window.start.astimezone(tz)
    day = 0
    while t < window.observed_end:
        day += 1
        if window.calendar:
            d = (local.replace(tzinfo=None) + timedelta(days=day)).replace(tzinfo=tz)
            t = min(d.astimezone(UTC), window.observed_end)
        else:
            t = min(window.start + timedelta(days=day), window.observed_end)
        edges.append(t)
    return edges


# --- Counting ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    """Good and total events (jobs, or GPU-seconds for efficiency)."""

    good: float = 0.0
    total: float = 0.0

    @property
    def bad(self) -> float:
        return self.total - self.good

    @property
    def sli(self) -> float | None:
        return self.good / self.total if self.total > 0 else None

    def plus(self, other: Counts) -> Counts:
        return Counts(self.good + other.good, self.total + other.total)


def add_up(counts: Iterable[Counts]) -> Counts:
    total = Counts()
    for c in counts:
        total = total.plus(c)
    return total


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (PostgreSQL's ``percentile_disc``): the first value whose
    rank reaches ``ceil(q x n)``; None for no values."""
    if not 0 <= q <= 1:
        raise SloError(f"percentile {q} is not in [0, 1]")
    return percentile_of_sorted(sorted(values), q)


def percentile_of_sorted(ordered: Sequence[float], q: float) -> float | None:
    """``percentile`` of values already ascending (the queries fetch them sorted: no copy
    and sort per percentile, which cost a report of 14k groups x 3 percentiles)."""
    if not 0 <= q <= 1:
        raise SloError(f"percentile {q} is not in [0, 1]")
    if not ordered:
        return None
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


GPU_BUCKETS: tuple[tuple[float, str], ...] = (
    (1, "1"), (4, "2-4"), (8, "5-8"), (32, "9-32"), (math.inf, "33+"))


def gpu_bucket(gpus: float) -> str:
    """The GPU-count bucket of an allocation (shards count by their fraction: "1")."""
    return next(label for limit, label in GPU_BUCKETS if gpus <= limit)


# --- Per-job facts (the reference path) -----------------------------------------------------


@dataclass(frozen=True)
class JobFacts:
    """What the SLIs read of one job (``Job`` plus its archive)."""

    job_id: int
    team: str
    submit: datetime
    state: str
    start: datetime | None = None
    end: datetime | None = None
    eligible: datetime | None = None
    partition: str = "gpu"
    gpus: float = 1.0
    allocated: bool = True  # node_count > 0: a job cancelled while pending has none
    wait_reason: str = ""
    hardware_fault: bool = False  # hardware XID or uncorrectable ECC during the job
    measured: bool = False
    useful_fraction: float = 0.0
    array_job_id: int | None = None

    @property
    def gpu_job(self) -> bool:
        return self.allocated and self.gpus > 0 and self.start is not None


@dataclass(frozen=True)
class Wait:
    """A started job's wait: for resources (charged), on its own limits (reported apart)."""

    resource_s: float
    own_s: float
    own_limited: bool


def job_wait(job: JobFacts) -> Wait | None:
    """1. before eligibility (dependency, hold, begin time) the wait is the job's own;
    2. from eligible to start it is the platform's, unless Slurm's last pending reason was
    one of the team's own limits (``pending.wait_cause``). None: not a started GPU job."""
    if not job.gpu_job or job.start is None:
        return None
    ready = job.eligible or job.submit
    before = max((ready - job.submit).total_seconds(), 0.0)
    after = max((job.start - ready).total_seconds(), 0.0)
    if wait_cause(job.wait_reason) == OWN:
        return Wait(0.0, before + after, True)
    return Wait(after, before, False)


@dataclass(frozen=True)
class EndingRule:
    """One row of the ending classification (admins edit them; first match wins).

    Empty ``states`` match any state; ``started`` and ``hardware_fault`` None match either;
    ``reason_pattern`` is a case-insensitive regular expression searched in Slurm's reason.
    """

    key: str
    cause: Cause
    label: str = ""
    states: frozenset[str] = frozenset()
    started: bool | None = None
    hardware_fault: bool | None = None
    reason_pattern: str = ""

    def matches(self, job: JobFacts) -> bool:
        if self.states and job.state not in self.states:
            return False
        if self.started is not None and (job.start is not None and job.allocated) != self.started:
            return False
        if self.hardware_fault is not None and job.hardware_fault != self.hardware_fault:
            return False
        return not self.reason_pattern or bool(
            re.search(self.reason_pattern, job.wait_reason, re.IGNORECASE))


UNCLASSIFIED = EndingRule("unclassified", Cause.EXCLUDED, "no rule matched")
_UNSUCCESSFUL = frozenset({"FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY",
                           "PREEMPTED", "BOOT_FAIL", "DEADLINE"})
# The defaults (a data migration copies them into the table admins edit).
DEFAULT_ENDING_RULES: tuple[EndingRule, ...] = (
    EndingRule("never_started", Cause.EXCLUDED, "ended before it got an allocation",
               started=False),
    EndingRule("gpu_fault", Cause.PLATFORM, "GPU hardware XID or uncorrectable ECC error "
               "during the job", states=_UNSUCCESSFUL, hardware_fault=True),
    EndingRule("node_fail", Cause.PLATFORM, "a node of the job failed",
               states=frozenset({"NODE_FAIL"})),
    EndingRule("preempted", Cause.PLATFORM, "preempted and not requeued",
               states=frozenset({"PREEMPTED"})),
    EndingRule("boot_fail", Cause.PLATFORM, "the nodes failed to boot (launch failure)",
               states=frozenset({"BOOT_FAIL"})),
    EndingRule("launch_failed", Cause.PLATFORM, "the job failed to launch (prolog, "
               "slurmd)", states=frozenset({"FAILED"}),
               reason_pattern=r"launch|prolog|SystemFailure"),
    EndingRule("completed", Cause.SUCCESS, "completed", states=frozenset({"COMPLETED"})),
    EndingRule("exit_nonzero", Cause.USER, "non-zero exit or signal",
               states=frozenset({"FAILED"})),
    EndingRule("out_of_memory", Cause.USER, "out of memory",
               states=frozenset({"OUT_OF_MEMORY"})),
    EndingRule("cancelled", Cause.USER, "cancelled", states=frozenset({"CANCELLED"})),
    EndingRule("timeout", Cause.USER, "reached its time limit",
               states=frozenset({"TIMEOUT", "DEADLINE"})),
)


def classify_ending(job: JobFacts, rules: Sequence[EndingRule]) -> EndingRule:
    """The first rule the ending matches, or :data:`UNCLASSIFIED` (counted apart)."""
    return next((rule for rule in rules if rule.matches(job)), UNCLASSIFIED)


def overlap_seconds(start: datetime, end: datetime, lo: datetime, hi: datetime) -> float:
    return max((min(end, hi) - max(start, lo)).total_seconds(), 0.0)


def efficiency_seconds(job: JobFacts, lo: datetime, hi: datetime,
                       now: datetime) -> tuple[float, float, float]:
    """(allocated, measured allocated, useful) GPU-seconds of the job inside ``[lo, hi)``;
    a job still running ends ``now``."""
    if not job.gpu_job or job.start is None:
        return 0.0, 0.0, 0.0
    allocated = job.gpus * overlap_seconds(job.start, job.end or now, lo, hi)
    if not job.measured:
        return allocated, 0.0, 0.0
    return allocated, allocated, allocated * job.useful_fraction


def event_counts(sli: Sli, jobs: Iterable[JobFacts], lo: datetime, hi: datetime,
                 now: datetime, *, target_wait_s: float = 0.0,
                 rules: Sequence[EndingRule] = DEFAULT_ENDING_RULES) -> Counts:
    """The SLI's good and total events of ``jobs`` in ``[lo, hi)``, job by job."""
    good = total = 0.0
    for job in jobs:
        if sli is Sli.QUEUE_WAIT:
            wait = job_wait(job)
            if wait is None or wait.own_limited or not (job.start and lo <= job.start < hi):
                continue
            total += 1
            good += wait.resource_s <= target_wait_s
        elif sli is Sli.JOB_SUCCESS:
            if not job.gpu_job or job.end is None or not lo <= job.end < hi:
                continue
            cause = classify_ending(job, rules).cause
            if cause is not Cause.EXCLUDED:
                total += 1
                good += cause is not Cause.PLATFORM
        else:
            _, measured, useful = efficiency_seconds(job, lo, hi, now)
            total += measured
            good += useful
    return Counts(good, total)


# --- Budgets and burn rates -------------------------------------------------------------------


def check_target(target: float) -> None:
    if not 0 < target < 1:
        raise SloError(f"target {target} must be between 0 and 1 (exclusive)")


def budget_remaining(counts: Counts, target: float) -> float:
    """Share of the error budget left: 1.0 untouched (also for an empty window), 0 spent,
    negative overspent."""
    check_target(target)
    allowed = (1 - target) * counts.total
    return 1.0 if allowed <= 0 else 1 - counts.bad / allowed


def burn_rate(counts: Counts, target: float) -> float | None:
    """Bad share over allowed share; None for a window without events."""
    check_target(target)
    return None if counts.total <= 0 else (counts.bad / counts.total) / (1 - target)


@dataclass(frozen=True)
class BurnAlert:
    """One multiwindow alert: ``budget_share`` of the budget spent over ``long_s``, confirmed
    by a short window (1/12 of the long one) still burning as fast."""

    name: str
    severity: str  # "page" (fast burn) or "ticket" (slow burn)
    budget_share: float
    long_s: int
    short_s: int

    def threshold(self, window_s: float) -> float:
        """The burn rate that spends ``budget_share`` in ``long_s``: 14.4, 6, 3, 1 for 30 days."""
        return self.budget_share * window_s / self.long_s


# The SRE workbook, chapter 5, "Multiwindow, multi-burn-rate alerts" (table 5-8).
WORKBOOK_ALERTS: tuple[BurnAlert, ...] = (
    BurnAlert("page-1h", "page", 0.02, HOUR, 5 * MINUTE),
    BurnAlert("page-6h", "page", 0.05, 6 * HOUR, 30 * MINUTE),
    BurnAlert("ticket-1d", "ticket", 0.10, DAY, 2 * HOUR),
    BurnAlert("ticket-3d", "ticket", 0.10, 3 * DAY, 6 * HOUR),
)
BURN_WINDOWS: tuple[int, ...] = tuple(sorted({s for a in WORKBOOK_ALERTS
                                              for s in (a.long_s, a.short_s)}))
EXHAUSTION_WINDOW = DAY  # time to exhaustion runs at the last day's burn rate


def window_label(seconds: int) -> str:
    """5m, 30m, 1h, 2h, 6h, 1d, 3d."""
    for unit, size in (("d", DAY), ("h", HOUR), ("m", MINUTE)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def firing(rates: Mapping[int, float | None], window_s: float,
           alerts: Sequence[BurnAlert] = WORKBOOK_ALERTS) -> list[BurnAlert]:
    """Alerts whose long and short windows both burn at or above the threshold."""
    out = []
    for alert in alerts:
        long, short = rates.get(alert.long_s), rates.get(alert.short_s)
        limit = alert.threshold(window_s)
        if long is not None and short is not None and long >= limit and short >= limit:
            out.append(alert)
    return out


def time_to_exhaustion(remaining: float, rate: float | None, window_s: float) -> float | None:
    """Seconds until the budget is spent at ``rate`` (0 if spent; None if not burning)."""
    if remaining <= 0:
        return 0.0
    if rate is None or rate <= 0:
        return None
    return remaining * window_s / rate


@dataclass(frozen=True)
class Assessment:
    """Everything a scorecard shows about one objective for one team (or the platform)."""

    counts: Counts
    target: float
    remaining: float
    burn_rates: dict[int, float | None]
    alerts: tuple[BurnAlert, ...]
    status: Status
    exhaustion_s: float | None
    trend: tuple[TrendPoint, ...] = ()

    @property
    def sli(self) -> float | None:
        return self.counts.sli


@dataclass(frozen=True)
class TrendPoint:
    """One day: its own SLI and the budget left from the window's start to its end."""

    start: datetime
    end: datetime
    counts: Counts
    remaining: float

    @property
    def sli(self) -> float | None:
        return self.counts.sli


def trend(days: Sequence[tuple[datetime, datetime, Counts]], target: float) -> list[TrendPoint]:
    """Daily points with the cumulative budget (the window's budget as it was spent)."""
    out, running = [], Counts()
    for start, end, counts in days:
        running = running.plus(counts)
        out.append(TrendPoint(start, end, counts, budget_remaining(running, target)))
    return out


def status_of(counts: Counts, remaining: float, alerts: Sequence[BurnAlert]) -> Status:
    if counts.total <= 0:
        return Status.NO_DATA
    if remaining <= 0:
        return Status.BREACHED
    if any(a.severity == "page" for a in alerts):
        return Status.FAST_BURN
    if alerts:
        return Status.SLOW_BURN
    return Status.OK


def assess(counts: Counts, target: float, window: Window,
           burn: Mapping[int, Counts] | None = None,
           days: Sequence[tuple[datetime, datetime, Counts]] = ()) -> Assessment:
    """The derived figures of one objective: budget, burn rates, alerts, status, exhaustion.

    ``burn`` holds the counts of the trailing burn windows (seconds -> counts), ``days`` the
    trend's days; both may be empty (history snapshots have neither).
    """
    remaining = budget_remaining(counts, target)
    rates = {s: burn_rate(c, target) for s, c in sorted((burn or {}).items())}
    alerts = tuple(firing(rates, window.seconds))
    exhaustion = time_to_exhaustion(remaining, rates.get(EXHAUSTION_WINDOW), window.seconds)
    return Assessment(counts, target, remaining, rates, alerts,
                      status_of(counts, remaining, alerts),
                      exhaustion if counts.total > 0 else None, tuple(trend(days, target)))


@dataclass(frozen=True)
class Reference:
    """The reference path's counts for a window, its burn windows and its days."""

    window: Counts
    burn: dict[int, Counts] = field(default_factory=dict)
    days: list[tuple[datetime, datetime, Counts]] = field(default_factory=list)


def reference_counts(sli: Sli, jobs: Sequence[JobFacts], window: Window, tz: tzinfo, *,
                     target_wait_s: float = 0.0,
                     rules: Sequence[EndingRule] = DEFAULT_ENDING_RULES) -> Reference:
    """Job by job, what the services count in SQL: the window (up to its observed end), each
    trailing burn window (clipped to the window: a calendar month's budget starts afresh)
    and each trend day."""
    now = window.observed_end

    def count(lo: datetime, hi: datetime) -> Counts:
        return event_counts(sli, jobs, lo, hi, now, target_wait_s=target_wait_s, rules=rules)

    burn = {s: count(max(window.start, now - timedelta(seconds=s)), now) for s in BURN_WINDOWS}
    edges = day_edges(window, tz)
    days = [(lo, hi, count(lo, hi)) for lo, hi in pairwise(edges)]
    return Reference(count(window.start, now), burn, days)
