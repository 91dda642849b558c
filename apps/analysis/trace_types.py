"""What the Kineto trace reader hands to the phase analysis: one rank's kept events.

The reader (``apps/jobs/adapters/kineto.py``) keeps only the events the analysis needs and
sorts each into a ``Kind``; the analysis decides what they mean (phases, collectives).
Times are microseconds, as in the trace (``ts`` relative to ``base_time_ns``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class Kind(StrEnum):
    """How the reader sorted a kept event."""

    STEP = "step"  # CPU user_annotation ProfilerStep#N on the training thread
    ANNOTATION = "annotation"  # other CPU user_annotation (record_function, DataLoader, DDP...)
    GPU_ANNOTATION = "gpu_annotation"  # gpu_user_annotation on a CUDA stream
    CPU_OP = "cpu_op"  # autograd engine ops, c10d:: ops, record_param_comms
    KERNEL = "kernel"  # GPU kernels (compute, or NCCL/RCCL communication)
    MEMORY = "memory"  # GPU memcpy and memset: the GPU is busy, neither computing nor talking
    LAUNCH = "launch"  # cuda_runtime / cuda_driver call that carries a correlation id
    # (the reader keeps launches in RankTrace.launches; events of this kind come from tests)


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One kept complete (``ph: X``) event.

    ``thread`` is the OS thread id for CPU events and the stream for GPU events; ``device``
    is the GPU index of GPU events (their ``pid``), -1 for CPU events; ``correlation`` links
    a kernel to its launch; ``collective`` is the ``Collective name`` argument that Kineto
    copies onto NCCL kernels and ``record_param_comms``.
    """

    kind: Kind
    name: str
    ts: float
    dur: float
    thread: int | str = 0
    correlation: int | None = None
    collective: str = ""
    device: int = -1

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def on_gpu(self) -> bool:
        return self.kind in (Kind.KERNEL, Kind.MEMORY)


@dataclass(frozen=True)
class DistributedInfo:
    """The ``distributedInfo`` block: which rank of which process group wrote the file.

    ``world_size`` is ``None`` when the block gives a rank but no world size (some
    benchmark harnesses write ``{"rank": 0}``): the analysis then counts the ranks it has.
    """

    rank: int
    world_size: int | None
    backend: str = ""
    group_ranks: tuple[int, ...] = ()
    nccl_version: str = ""


@dataclass(frozen=True)
class Origin:
    """Where a trace was recorded, as far as the file says: what tells two runs apart.

    ``host`` comes from Kineto's ``host_name`` or from ``tensorboard_trace_handler``'s
    default file name ``<host>_<pid>.<ns>.pt.trace.json`` when its pid is the trace's;
    ``pid`` is the training process (the one that carries ``ProfilerStep#N``); ``device``
    the GPU index most kernels ran on and ``device_name`` its model from
    ``deviceProperties``; ``devices`` every GPU model the file lists.
    """

    host: str = ""
    host_source: str = ""  # "host_name", "file name" or ""
    pid: int | None = None
    device: int | None = None
    device_name: str = ""
    devices: tuple[str, ...] = ()


@dataclass(frozen=True)
class RankTrace:
    """One trace file, read: its rank (``None`` without ``distributedInfo``) and kept events.

    ``sha256`` is the digest of the file's bytes as stored (compressed or not), so the same
    upload imported twice is recognised. ``dropped`` counts events ignored as unusable
    (negative durations, non-numeric times).
    """

    source: str
    distributed: DistributedInfo | None
    events: tuple[TraceEvent, ...]
    base_time_ns: int | None = None
    sha256: str = ""
    dropped: int = 0
    notes: tuple[str, ...] = field(default=())
    origin: Origin = field(default_factory=Origin)
    # correlation id -> when the CPU launched it (the reader keeps launches only so)
    launches: Mapping[int, float] = field(default_factory=dict)

    @property
    def rank(self) -> int | None:
        return self.distributed.rank if self.distributed else None
