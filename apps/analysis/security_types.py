"""The values security rules read and return (``security_rules.py`` holds the rules).

Everything is a frozen dataclass built by the services from telemetry, Slurm records,
logs, probes and inventories: the rules never see where a number came from.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from apps.analysis.recurrence import Recurrence

SEVERITIES = ("info", "low", "medium", "high", "critical")
CONFIDENCES = ("low", "medium", "high")


def severity_rank(severity: str) -> int:
    """0 (info) .. 4 (critical); unknown strings rank as info."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else 0


# --- Telemetry --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuPoint:
    """One GPU over one time bucket ``(t - step, t]``: who held it and what it did.

    ``owners`` are the job ids holding the GPU (the ``hpc_job`` label, or a GPU binding);
    empty means no job held it. ``bound`` is False when that cannot be known (a node
    without job mapping or bindings while jobs ran on it). ``together`` are the jobs seen
    holding it *at the same instant* (two or more: shared; one job ending and the next
    starting within a bucket are owners, not together). Ratios are 0..1; memory in MiB.
    """

    t: float
    owners: tuple[str, ...] = ()
    bound: bool = True
    util: float | None = None
    fb_mib: float | None = None
    sm: float | None = None
    tensor: float | None = None
    power_w: float | None = None
    nvlink_bps: float | None = None
    mig: bool = False
    together: tuple[str, ...] = ()

    @property
    def free(self) -> bool:
        """Known to be held by no job."""
        return self.bound and not self.owners


@dataclass(frozen=True)
class GpuTrack:
    """One physical GPU's points in time order."""

    host: str
    gpu: int
    uuid: str = ""
    model: str = ""
    points: tuple[GpuPoint, ...] = ()


@dataclass(frozen=True, slots=True)
class NodePoint:
    """One node over one time bucket: InfiniBand and Ethernet rates (per second), error
    counts, and CPU: ``cpu_busy`` cores busy (not idle) of ``cpu_cores``. Node-level: every
    job on the node shares these numbers."""

    t: float
    ib_bps: float | None = None
    ib_device: str = ""
    egress_bps: float | None = None
    transport_errors_ps: float | None = None
    link_errors_ps: float | None = None
    pkey_errors: float | None = None
    cpu_busy: float | None = None
    cpu_cores: float | None = None

    @property
    def cpu_share(self) -> float | None:
        """Busy share of the node's CPU, 0..1 (None when not collected)."""
        if self.cpu_busy is None or not self.cpu_cores:
            return None
        return min(max(self.cpu_busy / self.cpu_cores, 0.0), 1.0)


@dataclass(frozen=True)
class NodeTrack:
    host: str
    points: tuple[NodePoint, ...] = ()


@dataclass(frozen=True)
class Allocation:
    """A job's hold on nodes over time (``end`` is +inf while it runs)."""

    job_id: int
    user: str
    team: str
    nodes: frozenset[str]
    start: float
    end: float = math.inf
    gpus: int = 0
    display_id: str = ""

    @property
    def multi_node(self) -> bool:
        return len(self.nodes) > 1

    @property
    def gpus_per_node(self) -> float:
        return self.gpus / max(1, len(self.nodes))

    def overlaps(self, host: str, start: float, end: float, grace: float = 0.0) -> bool:
        """Held ``host`` at some time in ``[start - grace, end + grace]``."""
        return host in self.nodes and self.start - grace <= end and self.end + grace >= start


@dataclass(frozen=True)
class Frame:
    """The telemetry of a detection window: GPU and node tracks on buckets of ``step``
    seconds. Tracks may start before the window (a look-back, to see what preceded a run);
    rules report only runs that end inside it."""

    step: float
    gpus: tuple[GpuTrack, ...] = ()
    nodes: tuple[NodeTrack, ...] = ()


# --- Host inputs -------------------------------------------------------------------------


@dataclass(frozen=True)
class JobText:
    """A job's stored batch script or environment, to scan for secrets."""

    job_id: int
    user: str
    team: str
    source: str  # "batch script" or "environment"
    text: str
    submitted: float = 0.0


@dataclass(frozen=True)
class ProbeResult:
    """One GET of a service port on a compute node (collector output or Beacon's probe)."""

    t: float
    node: str
    port: int
    status: int | None
    auth_required: bool | None
    service: str = ""
    url: str = ""
    job_id: int | None = None
    user: str = ""
    team: str = ""


@dataclass(frozen=True)
class NodeSoftware:
    """A node's software versions as its inventory reported them."""

    node: str
    collected_at: float
    software: Mapping[str, str]


@dataclass(frozen=True)
class SshEvent:
    """One sshd event (``apps.analysis.sshd_log`` parses them): accepted, failed, denied
    (``pam_slurm_adopt``) or closed_preauth."""

    t: float
    host: str
    kind: str
    user: str = ""
    source: str = ""
    method: str = ""


# --- Allow-lists and site configuration ---------------------------------------------------


@dataclass(frozen=True)
class QuietWindow:
    """Nodes (a glob) where telemetry rules stay quiet for a while: maintenance, drain,
    burn-in, health checks. ``None`` ends are open.

    ``gpus`` narrows it to single GPUs (indices as text, or UUIDs): then only those GPUs'
    points are quiet, and node-level rules (InfiniBand) are not. ``every`` makes it
    recurring (daily at 04:00 for 5 minutes) between ``start`` and ``end``.
    """

    hosts: str
    start: float | None = None
    end: float | None = None
    reason: str = ""
    gpus: frozenset[str] = frozenset()
    every: Recurrence | None = None

    def covers(self, host: str, t: float, gpu: int | None = None, uuid: str = "") -> bool:
        """Whether the point of ``host`` (and GPU ``gpu``/``uuid``, None for the node) at
        ``t`` is quiet."""
        if self.gpus and (gpu is None or (str(gpu) not in self.gpus
                                          and (not uuid or uuid not in self.gpus))):
            return False
        return (fnmatch.fnmatchcase(host, self.hosts)
                and (self.start is None or t >= self.start)
                and (self.end is None or t <= self.end)
                and (self.every is None or self.every.active(t)))


@dataclass(frozen=True)
class SshSource:
    """A network logins may come from, and for whom: ``everyone``, ``admins`` (the admin
    bastion) or ``service`` (service accounts)."""

    network: str
    who: str = "everyone"
    name: str = ""


@dataclass(frozen=True)
class IbBaseline:
    """The storage traffic (bytes/s) InfiniBand carries on a node group (``hosts`` glob)
    or a Slurm partition without any multi-node job: rule 3's baseline there."""

    bps: float
    hosts: str = ""
    partition: str = ""
    name: str = ""

    def matches(self, host: str, partitions: frozenset[str]) -> bool:
        return bool((self.hosts and fnmatch.fnmatchcase(host, self.hosts))
                    or (self.partition and self.partition in partitions))


@dataclass(frozen=True)
class Allow:
    """What admins allow and configure: admin users (SSH anywhere), exempt users
    (health-check and burn-in accounts), quiet windows, version strings known to be
    patched (distribution backports: ``(software, version)``), where SSH logins may come
    from per kind of user, InfiniBand baselines per node group or partition (with each
    node's partitions), and the site's component aliases (normalised, built-ins included:
    ``components.alias_table``; empty: the built-ins)."""

    admin_users: frozenset[str] = frozenset()
    exempt_users: frozenset[str] = frozenset()
    quiet: tuple[QuietWindow, ...] = ()
    versions: frozenset[tuple[str, str]] = frozenset()
    ssh_sources: tuple[SshSource, ...] = ()
    ib_baselines: tuple[IbBaseline, ...] = ()
    partitions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    aliases: Mapping[str, str] = field(default_factory=dict)

    def quiet_reason(self, host: str, t: float, gpu: int | None = None, uuid: str = "") -> str:
        """Why ``host`` (or its GPU ``gpu``) is quiet at ``t`` ('' when it is not)."""
        for window in self.quiet:
            if window.covers(host, t, gpu, uuid):
                return window.reason or "allow-listed"
        return ""

    def user_kind(self, user: str) -> str:
        """``admins``, ``service`` or ``users``: whom an SSH source may be for."""
        if user in self.admin_users:
            return "admins"
        return "service" if user in self.exempt_users else "users"

    def ib_baseline(self, host: str, default: float) -> tuple[float, str]:
        """The InfiniBand baseline of ``host`` and where it comes from. A node in several
        groups gets the largest: each group's storage traffic is expected there."""
        found = [b for b in self.ib_baselines
                 if b.matches(host, self.partitions.get(host, frozenset()))]
        if not found:
            return default, "rule default"
        best = max(found, key=lambda b: b.bps)
        return best.bps, best.name or (f"partition {best.partition}" if best.partition
                                       else f"nodes {best.hosts}")


# --- Everything a detection run reads ------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    """One detection run's inputs over the window ``(start, end]`` (unix seconds).

    ``frame`` is None when no telemetry could be read; the other inputs are empty when
    their source had nothing (the run records which sources it skipped).
    """

    start: float
    end: float
    frame: Frame | None = None
    allocations: tuple[Allocation, ...] = ()
    texts: tuple[JobText, ...] = ()
    ssh: tuple[SshEvent, ...] = ()
    probes: tuple[ProbeResult, ...] = ()
    software: tuple[NodeSoftware, ...] = ()
    advisories: tuple[Any, ...] = ()  # apps.analysis.versions.Advisory
    secret_key: bytes = b""
    timezone: str = "UTC"
    user_teams: Mapping[str, str] = field(default_factory=dict)  # Slurm user -> team

    @cached_property
    def _by_job(self) -> dict[str, Allocation]:
        index: dict[str, Allocation] = {}
        for a in self.allocations:
            index[str(a.job_id)] = a
            if a.display_id:
                index.setdefault(a.display_id, a)
        return index

    def allocation(self, job: str) -> Allocation | None:
        """The allocation whose raw or display id is ``job`` (an ``hpc_job`` label)."""
        return self._by_job.get(job)

    def inside(self, t: float) -> bool:
        return self.start < t <= self.end


# --- Rules and their output ------------------------------------------------------------------


@dataclass(frozen=True)
class RuleConfig:
    """A rule as admins configured it: on or off, its severity, its thresholds."""

    enabled: bool = True
    severity: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Hit:
    """One finding as a rule reports it, before storage.

    ``dedup`` identifies the condition within the rule (a GPU, a job, a node and user):
    the same condition updates one stored finding. ``merge_gap`` is how far apart two
    sightings may be and still count as one occurrence.
    """

    rule: str
    severity: str
    dedup: str
    title: str
    start: float
    end: float
    node: str = ""
    gpu: int | None = None
    uuid: str = ""
    job_id: int | None = None
    user: str = ""
    team: str = ""
    confidence: str = ""
    merge_gap: float = 0.0
    evidence: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    """A rule's hits and what it could not read (recorded on the detection run)."""

    hits: list[Hit] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def extend(self, other: Outcome) -> None:
        self.hits.extend(other.hits)
        self.skipped.extend(other.skipped)
