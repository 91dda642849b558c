"""Plausibility at the door (issue 25): could this Slurm job record have happened?

A record Slurm should never produce (more GPUs than the cluster has, an end before its start,
times centuries away) is stored, flagged with the reasons this module returns, and kept out
of chargeback and SLOs until an admin accepts it. ``reasons`` is called once per imported
record, so it is plain comparisons, and returns an empty list for everything real sites
produce. Each threshold says why it cannot flag a real record:

- **Counts** above what the cluster has: GPUs (Slurm's device count, a MIG slice is one
  device, as in the nodes' ``gres``) and GPU shards (in GPUs' worth) above the GPUs of the
  cluster's synced nodes, nodes above its node count. Slurm cannot allocate what it does not
  have. When the capacity is not known (no nodes synced, or none with GPUs: a node sync that
  cannot read ``gres`` must not flag every GPU job) a bound above every cluster on earth is
  used instead, and the reason says so. CPUs and memory have only such absolute bounds.
  Negative counts are garbage.
- **Times** before 2000 (older than Slurm) or more than a year ahead of Beacon's clock. Only
  events are checked (submit, start, end): the eligible time is a plan (``--begin`` may lie
  years ahead, and Slurm stores INFINITE, year 2106, for tasks held by an array's task limit),
  so it is checked only against the past.
- **Order**: a start before the submit or an end before the start, by more than five
  minutes. MUNGE refuses credentials older than five minutes, so Slurm's hosts cannot run
  with clocks further apart; seconds of skew never flag. A job cancelled before it started
  (start = end, or no start) and a requeued job (submitted again when its previous run
  ended) are in order.
- **Run time** longer than the job's time limit plus the longest finite ``OverTimeLimit``
  Slurm accepts (65533 minutes). UNLIMITED (no limit, or Slurm's 0xffffffff) and a limit of
  0 ("no limit imposed") are never checked, so services running for months pass.

An admin may accept a flagged record as right (a cluster that has since shrunk, a job
suspended for weeks), except one that ``cannot_be_right`` (negative counts, or more than
any cluster has): accepting 10^12 GPUs would put them on a statement, so such a record is
corrected at its source and imported again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)  # no Slurm record is older (Slurm began in 2002)
AHEAD = timedelta(days=366)  # submit, start and end later than this past now are impossible
SKEW = timedelta(minutes=5)  # MUNGE's credential lifetime: Slurm's clocks agree within it
OVERTIME_MAX_MIN = 65533  # Slurm's longest finite OverTimeLimit, in minutes
# Above every machine on earth (Frontier: 9,408 nodes, 75k GPU dies; Fugaku: 159k nodes):
# the bounds when the cluster's own capacity is not known
ANY_CLUSTER_GPUS = 1_000_000
ANY_CLUSTER_NODES = 1_000_000
ANY_CLUSTER_CPUS = 100_000_000
ANY_CLUSTER_MEMORY_MB = 100 * 1024**3  # 100 PiB
TIME_FORMAT = "%Y-%m-%d %H:%M"


class Record(Protocol):
    """What the check reads: a parsed ``SlurmJob``, a stored ``Job`` or a ``Claim``."""

    @property
    def gpus(self) -> int: ...
    @property
    def gpu_shards(self) -> int: ...
    @property
    def cpus(self) -> int: ...
    @property
    def node_count(self) -> int: ...
    @property
    def memory_mb(self) -> int: ...
    @property
    def submit_time(self) -> datetime: ...
    @property
    def eligible_time(self) -> datetime | None: ...
    @property
    def start_time(self) -> datetime | None: ...
    @property
    def end_time(self) -> datetime | None: ...
    @property
    def time_limit_min(self) -> int | None: ...


@dataclass(frozen=True)
class Claim:
    """A record's values, for callers that hold no ``SlurmJob`` (tests, stored jobs)."""

    submit_time: datetime
    eligible_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    time_limit_min: int | None = None
    gpus: int = 0
    gpu_shards: int = 0
    cpus: int = 0
    node_count: int = 0
    memory_mb: int = 0


@dataclass(frozen=True)
class Capacity:
    """What the cluster has, from its synced nodes; ``None``: not known."""

    gpus: int | None = None
    nodes: int | None = None
    shards_per_gpu: int = 1


def reasons(record: Record, capacity: Capacity, now: datetime) -> list[str]:
    """Why ``record`` cannot be right, one short sentence each; ``[]``: plausible."""
    found: list[str] = []
    _counts(record, capacity, found)
    _times(record, now, found)
    return found


def cannot_be_right(record: Record, shards_per_gpu: int = 1) -> str:
    """Why no admin may accept ``record`` as it stands ("": it may be accepted)."""
    counts = (record.gpus, record.gpu_shards, record.cpus, record.node_count, record.memory_mb)
    if min(counts) < 0:
        return "it claims a negative count"
    if record.gpus > ANY_CLUSTER_GPUS or record.node_count > ANY_CLUSTER_NODES \
            or record.gpu_shards / max(shards_per_gpu, 1) > ANY_CLUSTER_GPUS \
            or record.cpus > ANY_CLUSTER_CPUS or record.memory_mb > ANY_CLUSTER_MEMORY_MB:
        return "it claims more than any cluster has"
    return ""


# --- Counts ------------------------------------------------------------------------------


def _counts(r: Record, capacity: Capacity, found: list[str]) -> None:
    gpus_known = bool(capacity.gpus)
    gpu_limit = capacity.gpus if capacity.gpus else ANY_CLUSTER_GPUS
    if r.gpus > gpu_limit:
        found.append(f"claims {r.gpus:,} GPUs; {_has(capacity.gpus, 'GPUs', gpus_known)}")
    worth = r.gpu_shards / max(capacity.shards_per_gpu, 1)
    if worth > gpu_limit:
        found.append(f"claims {r.gpu_shards:,} GPU shards ({worth:,.0f} GPUs' worth); "
                     f"{_has(capacity.gpus, 'GPUs', gpus_known)}")
    nodes_known = bool(capacity.nodes)
    if r.node_count > (capacity.nodes if capacity.nodes else ANY_CLUSTER_NODES):
        found.append(f"claims {r.node_count:,} nodes; "
                     f"{_has(capacity.nodes, 'nodes', nodes_known)}")
    if r.cpus > ANY_CLUSTER_CPUS:
        found.append(f"claims {r.cpus:,} CPUs, more than any cluster has")
    if r.memory_mb > ANY_CLUSTER_MEMORY_MB:
        found.append(f"claims {r.memory_mb:,} MB of memory, more than any cluster has")
    if min(r.gpus, r.gpu_shards, r.cpus, r.node_count, r.memory_mb) < 0:
        _negatives(r, found)


def _has(count: int | None, what: str, known: bool) -> str:
    if known:
        return f"the cluster has {count:,}"
    return (f"more than any cluster has (this cluster's {what} are not known: "
            "none of its synced nodes reports them)")


def _negatives(r: Record, found: list[str]) -> None:
    for what, value in (("GPUs", r.gpus), ("GPU shards", r.gpu_shards), ("CPUs", r.cpus),
                        ("nodes", r.node_count), ("MB of memory", r.memory_mb)):
        if value < 0:
            found.append(f"claims {value:,} {what}, a negative count")


# --- Times -------------------------------------------------------------------------------


def _times(r: Record, now: datetime, found: list[str]) -> None:
    latest = now + AHEAD
    submit, start, end = r.submit_time, r.start_time, r.end_time
    for verb, when in (("submitted", submit), ("starts", start), ("ends", end)):
        if when is not None and not EARLIEST <= when <= latest:
            found.append(_out_of_era(verb, when, now))
    if r.eligible_time is not None and r.eligible_time < EARLIEST:
        found.append(_out_of_era("eligible", r.eligible_time, now))
    if start is not None and start < submit - SKEW:
        found.append(f"starts before it was submitted (start {start:{TIME_FORMAT}}, "
                     f"submitted {submit:{TIME_FORMAT}} UTC)")
    if end is not None and start is not None and end < start - SKEW:
        found.append(f"ends before it starts (end {end:{TIME_FORMAT}}, "
                     f"start {start:{TIME_FORMAT}} UTC)")
    elif end is not None and start is None and end < submit - SKEW:
        found.append(f"ends before it was submitted (end {end:{TIME_FORMAT}}, "
                     f"submitted {submit:{TIME_FORMAT}} UTC)")
    limit = r.time_limit_min
    if start is not None and limit is not None and limit > 0:
        ran_min = ((end or now) - start).total_seconds() / 60
        if ran_min > limit + OVERTIME_MAX_MIN:
            found.append(f"ran {_span(ran_min)}, longer than its time limit of "
                         f"{_span(limit)} allows (even with Slurm's longest OverTimeLimit)")


def _out_of_era(verb: str, when: datetime, now: datetime) -> str:
    if when < EARLIEST:
        return f"{verb} in {when.year}, before {EARLIEST.year} (no Slurm record is that old)"
    return f"{verb} in {when.year}, {_distance(when - now)} from now"


def _distance(ahead: timedelta) -> str:
    """Coarse words, so a reason reads the same for years (an accepted flag whose reasons
    change is no longer accepted)."""
    years = ahead.days / 365.25
    if years >= 200:
        return "centuries"
    if years >= 100:
        return "a century or more"
    if years >= 10:
        return "decades"
    return "years" if years >= 2 else "more than a year"


def _span(minutes: float) -> str:
    if minutes >= 2 * 1440:
        count, unit = round(minutes / 1440), "day"
    elif minutes >= 2 * 60:
        count, unit = round(minutes / 60), "hour"
    else:
        count, unit = round(minutes), "minute"
    return f"{count:,} {unit}{'' if count == 1 else 's'}"
