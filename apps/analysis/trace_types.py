"""What the Kineto trace reader hands to the phase analysis: one rank's kept events.

The reader (``apps/jobs/adapters/kineto.py``) keeps only the events the analysis needs and
sorts each into a ``Kind``; the analysis decides what they mean (phases, collectives).
Times are microseconds, as in the trace (``ts`` relative to ``base_time_ns``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Kind(StrEnum):
    """How the reader sorted a kept event."""

    STEP = "step"  # CPU user_annotation ProfilerStep#N on the training thread
    ANNOTATION = "annotation"  # other CPU user_annotation (record_function, DataLoader, DDP...)
    GPU_ANNOTATION = "gpu_annotation"  # gpu_user_annotation on a CUDA stream
    CPU_OP = "cpu_op"  # autograd engine ops, c10d:: ops, record_param_comms
    KERNEL = "kernel"  # GPU kernels, memcpy and memset
    LAUNCH = "launch"  # cuda_runtime / cuda_driver call that carries a correlation id


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One kept complete (``ph: X``) event.

    ``thread`` is the OS thread id for CPU events and the stream for GPU events;
    ``correlation`` links a kernel to its launch; ``collective`` is the ``Collective name``
    argument that Kineto copies onto NCCL kernels and ``record_param_comms``.
    """

    kind: Kind
    name: str
    ts: float
    dur: float
    thread: int | str = 0
    correlation: int | None = None
    collective: str = ""

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True)
class DistributedInfo:
    """The ``distributedInfo`` block: which rank of which process group wrote the file."""

    rank: int
    world_size: int
    backend: str = ""
    group_ranks: tuple[int, ...] = ()


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

    @property
    def rank(self) -> int | None:
        return self.distributed.rank if self.distributed else None
