"""Reconciliation: Beacon's allocated GPU-hours against what Slurm itself reports.

Two Slurm sources are compared with Beacon's job records over one window:

- the **report** (``sreport cluster AccountUtilizationByUser -T gres/gpu``): GPU-minutes per
  account from slurmdbd's hourly rollups, printed as whole minutes rounded to the nearest, so
  an account agrees when Beacon is within ``tolerance_min`` (1 GPU-minute by default);
- the **jobs** (``sacct -X -T`` over the same window: times truncated to it): GPU-seconds per
  job, the "equivalent from sacct", which says *which* jobs differ. A job differs when it is
  missing on one side or its GPU-seconds differ by more than ``job_tolerance_s``.

Pure: the adapters read Slurm, the services read the database, this compares.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum


class Difference(StrEnum):
    MISSING_IN_BEACON = "missing_in_beacon"
    MISSING_IN_SLURM = "missing_in_slurm"
    HOURS = "hours"
    ACCOUNT = "account"


@dataclass(frozen=True)
class JobSeconds:
    """One job's allocated GPU-seconds inside the window, on one side."""

    job_id: int
    account: str
    user: str
    gpu_seconds: float


@dataclass(frozen=True)
class JobDifference:
    job_id: int
    kind: Difference
    account: str
    user: str
    beacon_minutes: float | None
    slurm_minutes: float | None

    @property
    def delta_minutes(self) -> float:
        return (self.beacon_minutes or 0.0) - (self.slurm_minutes or 0.0)


@dataclass(frozen=True)
class AccountCheck:
    """One account: Beacon's GPU-minutes, the report's, and sacct's job sum."""

    account: str
    beacon_minutes: float
    report_minutes: float | None
    jobs_minutes: float

    @property
    def delta_minutes(self) -> float:
        reference = self.report_minutes if self.report_minutes is not None else self.jobs_minutes
        return self.beacon_minutes - reference


@dataclass(frozen=True)
class Reconciliation:
    accounts: tuple[AccountCheck, ...]
    jobs: tuple[JobDifference, ...]
    tolerance_min: float

    def account_ok(self, check: AccountCheck) -> bool:
        return abs(check.delta_minutes) <= self.tolerance_min

    @property
    def ok(self) -> bool:
        return all(self.account_ok(a) for a in self.accounts)

    @property
    def beacon_hours(self) -> float:
        return sum(a.beacon_minutes for a in self.accounts) / 60

    @property
    def report_hours(self) -> float:
        return sum(a.report_minutes or 0.0 for a in self.accounts) / 60


def _by_id(rows: Iterable[JobSeconds]) -> dict[int, JobSeconds]:
    out: dict[int, JobSeconds] = {}
    for row in rows:
        if row.gpu_seconds > 0:
            out[row.job_id] = row
    return out


def job_differences(beacon: Iterable[JobSeconds], slurm: Iterable[JobSeconds],
                    job_tolerance_s: float = 1.0) -> list[JobDifference]:
    """Jobs that differ, by job id: missing on a side, other account, or other GPU-seconds."""
    ours, theirs = _by_id(beacon), _by_id(slurm)
    out = []
    for job_id in sorted(ours.keys() | theirs.keys()):
        a, b = ours.get(job_id), theirs.get(job_id)
        kind = _kind(a, b, job_tolerance_s)
        if kind is not None:
            ref = b or a
            assert ref is not None
            out.append(JobDifference(job_id, kind, ref.account, ref.user,
                                     a.gpu_seconds / 60 if a else None,
                                     b.gpu_seconds / 60 if b else None))
    return out


def _kind(a: JobSeconds | None, b: JobSeconds | None, tolerance: float) -> Difference | None:
    if b is None:
        return Difference.MISSING_IN_SLURM
    if a is None:
        return Difference.MISSING_IN_BEACON
    if a.account != b.account:
        return Difference.ACCOUNT
    if abs(a.gpu_seconds - b.gpu_seconds) > tolerance:
        return Difference.HOURS
    return None


def minutes_by_account(rows: Iterable[JobSeconds]) -> dict[str, float]:
    out: dict[str, float] = {}
    for row in rows:
        out[row.account] = out.get(row.account, 0.0) + row.gpu_seconds / 60
    return out


def direct_minutes(account_rows: Mapping[str, float],
                   parent_of: Mapping[str, str]) -> dict[str, float]:
    """An account row of sreport includes its child accounts: subtract them, so each account
    keeps the usage of its own jobs (what Beacon's job records carry). ``root`` is dropped."""
    out = dict(account_rows)
    for child, parent in parent_of.items():
        if parent in out and child in account_rows and child != parent:
            out[parent] -= account_rows[child]
    out.pop("root", None)
    return out


def reconcile(beacon: Iterable[JobSeconds], slurm_jobs: Iterable[JobSeconds],
              report: Mapping[str, float] | None, tolerance_min: float = 1.0,
              job_tolerance_s: float = 1.0) -> Reconciliation:
    """Compare per account (against ``report`` when given, else the sacct sum) and per job.

    ``report`` maps account -> GPU-minutes as sreport printed them (account rows only).
    """
    ours, theirs = list(beacon), list(slurm_jobs)
    mine, jobs_sum = minutes_by_account(ours), minutes_by_account(theirs)
    names = sorted(mine.keys() | jobs_sum.keys() | set(report or {}))
    accounts = tuple(
        AccountCheck(name, mine.get(name, 0.0),
                     None if report is None else float(report.get(name, 0.0)),
                     jobs_sum.get(name, 0.0))
        for name in names)
    return Reconciliation(accounts, tuple(job_differences(ours, theirs, job_tolerance_s)),
                          tolerance_min)
