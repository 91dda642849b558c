"""The Slurm adapter's types: the frozen dataclasses every backend returns, and the interface.

Every backend returns these, parsed at the boundary by ``parse``/``parse_cluster`` (pure
functions, shared by all backends and by ``import_sacct``). Failures are ``AdapterError``; a
daemon that is down or slow is a ``TransientAdapterError``. No other module of the package is
imported here, so every one of them can import this one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol

# --- Value types ----------------------------------------------------------------------


@dataclass(frozen=True)
class ExitStatus:
    """A job's exit as sacct prints it (``3:0`` = exit code 3, ``0:9`` = killed by signal 9)."""

    code: int
    signal: int

    @classmethod
    def from_wait_status(cls, raw: int) -> ExitStatus:
        """Decode a raw wait(2) status (squeue/slurm REST ``exit_code``: 768 = exit 3)."""
        return cls(code=(raw >> 8) & 0xFF, signal=raw & 0x7F)

    def __str__(self) -> str:
        return f"{self.code}:{self.signal}"


@dataclass(frozen=True)
class ResourceRequest:
    """What a job asked for (issue 26): a pending job holds nothing yet, so its page shows
    this rather than "GPUs 0, CPUs 0". Read by ``requested`` from every data parser's
    request fields. None is "Slurm did not say", 0 a request of none; ``memory_mb`` is the
    whole job's (Slurm's ``--mem`` is per node: the page divides by ``nodes``)."""

    gpus: int | None = None
    cpus: int | None = None
    memory_mb: int | None = None
    nodes: int | None = None
    time_limit_min: int | None = None
    tres: str = ""  # the request as Slurm prints TRES: ``cpu=16,mem=64G,node=1,gres/gpu=8``

    @property
    def is_known(self) -> bool:
        return any(v is not None for v in (self.gpus, self.cpus, self.memory_mb, self.nodes))


@dataclass(frozen=True)
class SlurmJob:
    """One job record from accounting (sacct / slurmdbd): everything ``Job`` stores.

    ``exit`` is ``None`` while the job is active, and also when the source cannot be
    trusted for this record (``exit_unresolved``): Slurm 22.05's JSON reports
    ``SUCCESS/0`` for a job that exited 3, so the sync asks another source
    (``SlurmClient.exit_codes``). GPU counts come from the *allocated* TRES only.
    """

    job_id: int
    display_id: str
    cluster: str
    submit_time: datetime
    name: str = ""
    user_name: str = ""
    account: str = ""
    partition: str = ""
    qos: str = ""
    work_dir: str = ""
    comment: str = ""
    state: str = "UNKNOWN"
    reason: str = ""
    # After a job started: the last pending reason Slurm kept (sacct ``state.reason``), which
    # tells whose wait it was (the queue-wait SLO, apps/analysis/pending.wait_cause).
    wait_reason: str = ""
    exit: ExitStatus | None = None
    exit_unresolved: bool = False
    eligible_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    time_limit_min: int | None = None
    array_job_id: int | None = None
    array_task_id: int | None = None
    array_tasks_pending: str = ""
    het_job_id: int | None = None
    het_job_offset: int | None = None
    nodes: str = ""
    node_count: int = 0
    cpus: int = 0
    memory_mb: int = 0
    mem_peak_mb: float | None = None  # MaxRSS: the largest task's peak over the steps
    gpus: int = 0
    gpu_shards: int = 0
    gpu_types: Mapping[str, int] = field(default_factory=dict)
    tres_alloc: str = ""
    # where ``gpus``/``gpu_types`` came from (``GpuSource``): accounting's allocated TRES, or,
    # on a site whose accounting does not track gres/gpu, the job's request or gres_detail
    gpu_source: str = ""
    requested: ResourceRequest = field(default_factory=ResourceRequest)

    @property
    def is_finished(self) -> bool:
        return self.state not in ACTIVE_STATES

    @property
    def last_change(self) -> datetime:
        """The latest time Slurm recorded for this job (the sync's watermark source)."""
        return change_time(self.submit_time, self.start_time, self.end_time)


def change_time(submit: datetime, start: datetime | None, end: datetime | None) -> datetime:
    """When Slurm last changed a job record: the latest of its submit, start and end.

    The eligible time is left out on purpose. For a job that has not started it is a plan,
    not an event: ``--begin=now+1hour``, or a requeued job's hold-off, lies in the future,
    and a watermark taken from it would start the next windows in the future and lose every
    short job in between. For a job that has started it is never after the start.
    """
    return max(t for t in (submit, start, end) if t is not None)


@dataclass(frozen=True)
class RecordError:
    """A record that could not be parsed: which one (index, job id when known) and why."""

    index: int
    job_id: int | None
    message: str

    def __str__(self) -> str:
        who = f"job {self.job_id}" if self.job_id is not None else "job id unknown"
        return f"record #{self.index} ({who}): {self.message}"


@dataclass(frozen=True)
class QueueEntry:
    """A job as slurmctld sees it now (squeue / slurm REST): live fields only."""

    job_id: int
    state: str
    reason: str = ""
    estimated_start: datetime | None = None
    exit: ExitStatus | None = None
    array_job_id: int | None = None
    array_task_id: int | None = None
    user_name: str = ""
    # the GPUs slurmctld says the job holds (or asked for), for a site whose accounting does
    # not count them (``GpuSource``: "accounting" when slurmctld's allocated TRES has them)
    gpus: int = 0
    gpu_types: Mapping[str, int] = field(default_factory=dict)
    gpu_source: str = ""
    # what it asks for now (``scontrol update`` may change a pending job's request)
    requested: ResourceRequest = field(default_factory=ResourceRequest)


@dataclass(frozen=True)
class GpuBinding:
    """GPU indices (node-local, as DCGM numbers them) one job holds on one node."""

    job_id: int
    node: str
    gpu_indices: tuple[int, ...]
    gpu_type: str = ""


@dataclass(frozen=True)
class SlurmNode:
    """A node from sinfo / slurm REST."""

    name: str
    state: str
    partitions: tuple[str, ...] = ()
    cpus: int = 0
    memory_mb: int = 0
    gpu_type: str = ""
    gpu_count: int = 0
    gpus_used: int = 0
    reason: str = ""
    # GPUs per model: a node may hold several (``gpu:h100:2,gpu:h200:4``); ``gpu_type`` is
    # then the models joined with "+" and ``gpu_count`` their sum
    gpu_types: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SlurmPartition:
    """A partition: its state, default flag and maximum wall time (minutes, None = unlimited)."""

    name: str
    state: str = ""
    is_default: bool = False
    max_time_min: int | None = None
    nodes: str = ""


@dataclass(frozen=True)
class Association:
    """One row of ``sacctmgr show assoc``: an account (user empty) or a user in an account.

    TRES limits are kept as Slurm prints them (``gres/gpu=16``) and parsed into dicts.
    """

    cluster: str
    account: str
    user: str = ""
    parent: str = ""
    shares: str = ""
    grp_tres: Mapping[str, int] = field(default_factory=dict)
    grp_tres_mins: Mapping[str, int] = field(default_factory=dict)
    grp_tres_run_mins: Mapping[str, int] = field(default_factory=dict)
    max_tres: Mapping[str, int] = field(default_factory=dict)
    grp_jobs: int | None = None
    max_wall_min: int | None = None
    qos: tuple[str, ...] = ()
    default_qos: str = ""


@dataclass(frozen=True)
class ShareRow:
    """One row of ``sshare -a -P``: fairshare and (decayed) usage of an account or user."""

    account: str
    user: str = ""
    raw_shares: int | None = None
    norm_shares: float | None = None
    raw_usage: int = 0
    effective_usage: float | None = None
    fairshare: float | None = None
    level_fs: float | None = None
    grp_tres_mins: Mapping[str, int] = field(default_factory=dict)
    tres_run_mins: Mapping[str, int] = field(default_factory=dict)
    grp_tres_raw: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Reservation:
    """A reservation (``scontrol show reservation``, ``/slurm/<v>/reservations``): nodes set
    aside from ``start`` to ``end`` for the users and accounts it names (issue 30)."""

    name: str
    start: datetime | None = None
    end: datetime | None = None
    nodes: str = ""  # a Slurm host list, ``gpu[01-02]``
    node_count: int = 0
    partition: str = ""
    flags: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    tres: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Qos:
    """A QOS and its limits (``sacctmgr show qos``, ``/slurmdb/<v>/qos``), TRES limits as
    Slurm names them (``{"gres/gpu": 16}``); None is "no limit" (issue 30)."""

    name: str
    description: str = ""
    priority: int | None = None
    flags: tuple[str, ...] = ()
    grp_tres: Mapping[str, int] = field(default_factory=dict)  # GrpTRES
    grp_jobs: int | None = None  # GrpJobs
    max_tres_per_job: Mapping[str, int] = field(default_factory=dict)  # MaxTRES
    max_tres_per_node: Mapping[str, int] = field(default_factory=dict)  # MaxTRESPerNode
    max_tres_per_user: Mapping[str, int] = field(default_factory=dict)  # MaxTRESPU
    max_tres_per_account: Mapping[str, int] = field(default_factory=dict)  # MaxTRESPA
    max_jobs_per_user: int | None = None  # MaxJobsPU (running)
    max_submit_per_user: int | None = None  # MaxSubmitPU
    max_wall_min: int | None = None  # MaxWall
    preempt: tuple[str, ...] = ()


@dataclass(frozen=True)
class UsageRow:
    """One row of ``sreport cluster AccountUtilizationByUser``: TRES-minutes of an account
    (``user`` empty) or of a user in an account, as sreport prints them (whole minutes)."""

    account: str
    user: str
    tres: str
    minutes: float


@dataclass(frozen=True)
class JobAllocation:
    """One job's allocation inside a window (``sacct -X -T``: times truncated to it)."""

    job_id: int
    account: str
    user: str
    gpus: int
    gpu_shards: int
    elapsed_s: int
    start: datetime | None = None
    end: datetime | None = None
    state: str = ""


@dataclass(frozen=True)
class LimitChange:
    """A limit written (or rehearsed) with sacctmgr: the exact command and what Slurm said."""

    command: str
    output: str
    applied: bool


class GpuSource(StrEnum):
    """Where a job's GPU count came from, said on the job page.

    Accounting's allocated TRES is the truth when slurmdbd tracks ``gres/gpu``
    (``AccountingStorageTRES``). A site that does not track it still says which GPUs a job
    holds: in the request (``tres_per_job`` ``gres/gpu:4``, ``tres_per_node``,
    ``tres_per_task`` times tasks, ``gpus_per_node``) or in slurmctld's ``gres_detail``.
    """

    ACCOUNTING = "accounting"
    TRES_PER_JOB = "tres_per_job"
    TRES_PER_NODE = "tres_per_node"
    TRES_PER_TASK = "tres_per_task"
    GPUS_PER_NODE = "gpus_per_node"
    GRES_DETAIL = "gres_detail"
    SUBMIT_LINE = "submit_line"


ACTIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED", "CONFIGURING", "RESIZING"})
"""States in which a job still holds (or waits for) resources."""


class Action(StrEnum):
    """What a page may ask of a backend beyond reading jobs: asked with
    ``SlurmClient.cannot(action)`` before the button is shown, so a backend that cannot do
    it is said so on the page, never found out by pressing the button."""

    QUOTA_PREVIEW = "quota_preview"  # account_limits + set_account_limit(dry_run=True)
    QUOTA_WRITE = "quota_write"  # set_account_limit
    RECONCILE = "reconcile"  # usage_report + job_allocations
    CANCEL = "cancel"  # cancel_job (the idle-job policy)


# --- The interface --------------------------------------------------------------------


class SlurmClient(Protocol):
    """What Beacon asks of a Slurm cluster. Every backend implements all of it."""

    def change_marker(self) -> str:
        """One cheap scheduler call whose answer changes when jobs are submitted, start or end.

        The sync skips the accounting query while it stays the same (``sdiag`` counters).
        """
        ...

    def jobs_since(self, since: datetime | None) -> Iterator[SlurmJob | RecordError]:
        """Accounting records of every job active at or after ``since`` (all jobs if None)."""
        ...

    def jobs_by_id(self, job_ids: Iterable[int]) -> Iterator[SlurmJob | RecordError]:
        """Accounting records of these jobs (all array tasks of an array id)."""
        ...

    def exit_codes(self, job_ids: Iterable[int]) -> dict[int, ExitStatus]:
        """Trustworthy exit statuses for these job ids (where the backend has one)."""
        ...

    def queue(self) -> list[QueueEntry]:
        """The live queue from slurmctld, finished jobs filtered out."""
        ...

    def gpu_bindings(self) -> list[GpuBinding]:
        """GPU indices per node of every running job."""
        ...

    def nodes(self) -> list[SlurmNode]:
        ...

    def partitions(self) -> list[SlurmPartition]:
        ...

    def associations(self) -> list[Association]:
        ...

    def shares(self) -> list[ShareRow]:
        ...

    def reservations(self) -> list[Reservation]:
        """Every reservation slurmctld holds now, active or to come."""
        ...

    def qos(self) -> list[Qos]:
        """Every QOS with its limits, from accounting."""
        ...

    def job_scripts(self, job_ids: Iterable[int]) -> dict[str, str]:
        """Stored batch scripts by display id ("21", "4_0"); jobs without one are absent."""
        ...

    def job_environments(self, job_ids: Iterable[int]) -> dict[str, str]:
        """The environments batch jobs were launched with (``VAR=value`` lines), stored when
        ``AccountingStoreFlags=job_env``, by display id; jobs without one are absent."""
        ...

    def usage_report(self, start: datetime, end: datetime, tres: str) -> list[UsageRow]:
        """Slurm's own usage report over ``[start, end)`` (whole hours: sreport's rollups)."""
        ...

    def job_allocations(self, start: datetime, end: datetime) -> list[JobAllocation]:
        """Every job's allocation inside ``[start, end)``, times truncated to the window."""
        ...

    def account_limits(self, account: str) -> Association | None:
        """The account's association row as Slurm holds it now (None: no such account)."""
        ...

    def set_account_limit(self, account: str, tres: str, minutes: int | None,
                          dry_run: bool = False) -> LimitChange:
        """Set (``None``: remove) the account's ``GrpTRESMins`` for ``tres``; ``dry_run``
        asks Slurm to check the change and discard it. Refusals are ``AdapterError``."""
        ...

    def cancel_job(self, job_id: int) -> None:
        """End a pending or running job, as ``scancel <id>`` does (the idle-job policy).

        A job that has already ended is not an error. Refusals are ``AdapterError``; a
        backend that ``cannot(Action.CANCEL)`` raises one too."""
        ...

    def cannot(self, action: Action) -> str:
        """Why this backend cannot do ``action`` as configured, in words for the page (what
        to use instead); "" when it can. Cheap: no call to Slurm."""
        ...

    def accounted_until(self) -> datetime | None:
        """Where this backend's accounting ends: None for a live Slurm (its reports reach the
        last rolled-up hour); for saved output, the end of the latest saved usage report,
        so a reconciliation asks for a window the saved reports cover."""
        ...

