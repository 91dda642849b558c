"""Slurm's accounting reports of the simulated month, as 22.05 prints them: what the
reconciliation reads through the ``files`` backend.

For each calendar month (UTC) the simulation overlaps, up to the last hour slurmdbd has
rolled up at "now", two files named by their window (``slurm.files.window_name``):

- ``sreport_<start>_<end>.txt``: ``TZ=UTC sreport -P -T gres/gpu -t minutes cluster
  AccountUtilizationByUser start=<start> end=<end>``: the banner, then ``root``, each account
  and its users, GPU-minutes rounded to the nearest whole minute (the recorded
  ``tests/fixtures/slurm/sreport_account_user.txt`` has the same lines);
- ``sacct_alloc_<start>_<end>.txt``: ``sacct -a -X -P -n -T -S <start> -E <end> -o
  JobIDRaw,Account,User,AllocTRES,Start,End,ElapsedRaw,State``: every job that held
  resources in the window, its times truncated to it (``sacct_alloc_window.txt``).

Both are computed from the same job records as ``sacct.json``, so a reconciliation of the
demo agrees, as it does on a healthy cluster.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from apps.simulator.cluster import Cluster
from apps.simulator.slurm_json import gpu_type, in_window
from apps.simulator.workload import Job

ROLLUP_MARGIN = 600  # seconds: slurmdbd rolls an hour up a little after it ends (as the portal)
TIME = "%Y-%m-%dT%H:%M:%S"
NAME_TIME = "%Y%m%dT%H%M%S"
RULE = "-" * 80


def rolled_up_until(now: int) -> int:
    """The end of the last hour slurmdbd has surely rolled up at ``now``."""
    hour = now - now % 3600
    return hour - 3600 if now - hour < ROLLUP_MARGIN else hour


def month_windows(start: int, now: int) -> Iterator[tuple[int, int]]:
    """``[month start, min(month end, rolled up))`` for each UTC month from ``start``."""
    end = rolled_up_until(now)
    day = datetime.fromtimestamp(start, UTC)
    month = datetime(day.year, day.month, 1, tzinfo=UTC)
    while int(month.timestamp()) < end:
        nxt = datetime(month.year + (month.month == 12), month.month % 12 + 1, 1, tzinfo=UTC)
        yield int(month.timestamp()), min(int(nxt.timestamp()), end)
        month = nxt


def _overlap(job: Job, lo: int, hi: int, now: int) -> tuple[int, int] | None:
    if job.start is None or not job.alloc or not in_window(job):
        return None
    start, end = max(job.start, lo), min(job.end if job.end is not None else now, hi)
    return (start, end) if end > start else None


def _text(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime(TIME)


def file_name(kind: str, lo: int, hi: int) -> str:
    return (f"{kind}_{datetime.fromtimestamp(lo, UTC).strftime(NAME_TIME)}_"
            f"{datetime.fromtimestamp(hi, UTC).strftime(NAME_TIME)}.txt")


def sreport(cluster: Cluster, jobs: list[Job], lo: int, hi: int, now: int) -> str:
    seconds: dict[tuple[str, str], float] = defaultdict(float)
    for job in jobs:
        span = _overlap(job, lo, hi, now)
        if span:
            seconds[(job.account, job.user)] += job.gpus * (span[1] - span[0])
    lines = [RULE, f"Cluster/Account/User Utilization {_text(lo)} - {_text(hi - 1)} "
                   f"({hi - lo} secs)", "Usage reported in TRES Minutes", RULE,
             "Cluster|Account|Login|Proper Name|TRES Name|Used",
             f"{cluster.name}|root|||gres/gpu|{_minutes(sum(seconds.values()))}"]
    for team in sorted(cluster.teams, key=lambda t: t.account):
        users = sorted(team.users)
        total = sum(seconds[(team.account, u)] for u in users)
        lines.append(f"{cluster.name}|{team.account}|||gres/gpu|{_minutes(total)}")
        lines += [f"{cluster.name}|{team.account}|{u}||gres/gpu|"
                  f"{_minutes(seconds[(team.account, u)])}" for u in users]
    return "\n".join(lines) + "\n"


def _minutes(seconds: float) -> int:
    return int(seconds / 60 + 0.5)  # sreport rounds to the nearest minute


def sacct_allocations(cluster: Cluster, jobs: list[Job], lo: int, hi: int, now: int) -> str:
    lines = []
    for job in sorted(jobs, key=lambda j: j.job_id):
        span = _overlap(job, lo, hi, now)
        if span is None:
            continue
        kind = gpu_type(cluster, job)
        gres = f"gres/gpu:{kind}={job.gpus},gres/gpu={job.gpus}," if job.gpus else ""
        tres = (f"billing={job.cpus + 8 * job.gpus},cpu={job.cpus},{gres}"
                f"mem={job.memory_mb}M,node={max(1, len(job.alloc))}")
        state = "RUNNING" if job.end is None or job.end > now else job.state
        lines.append("|".join((str(job.job_id), job.account, job.user, tres, _text(span[0]),
                               _text(span[1]), str(span[1] - span[0]), state)))
    return "\n".join(lines) + ("\n" if lines else "")


def write_reports(directory: Path, cluster: Cluster, jobs: list[Job], start: int,
                  now: int) -> int:
    """Both files for every month window; returns how many windows were written."""
    count = 0
    for lo, hi in month_windows(start, now):
        (directory / file_name("sreport", lo, hi)).write_text(sreport(cluster, jobs, lo, hi,
                                                                      now))
        (directory / file_name("sacct_alloc", lo, hi)).write_text(
            sacct_allocations(cluster, jobs, lo, hi, now))
        count += 1
    return count
