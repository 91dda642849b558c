"""What one rank's GPU did in each training step: idle, compute, communication (pure).

A busy GPU is not necessarily a computing GPU, and a computing GPU is not necessarily the
one a CPU phase suggests. So beside the CPU phases, every step of a GPU trace gets the
GPU's own account, from the kernels of the rank's device (all its streams):

- **idle**: the step window minus the union of every kernel, memcpy and memset;
- **compute**: the union of the kernels that are not collectives;
- **communication**: the union of the NCCL/RCCL kernels (a waiting rank spins inside them);
- **exposed communication**: communication not under a compute kernel, the part that
  costs the step (DDP and FSDP run collectives on their own stream beside compute).

The step window is the GPU's, not the CPU's: the CPU runs ahead, so step N runs from the
first kernel launched in CPU step N (kernels are matched to their launch by
``correlation``) to the first kernel launched in step N+1. Memcpy and memset keep the GPU
busy but are neither compute nor communication (HTA's "memory" kernels).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from apps.analysis.intervals import Interval, IntervalSet, subtract, total
from apps.analysis.trace_types import Kind, RankTrace, TraceEvent

# NCCL up to 2.18 "ncclKernel_*", newer "ncclDevKernel_*", RCCL the same prefixes (and
# older RCCL "ncclAllReduceRingLLKernel_*"); HTA matches ^nccl.*Kernel
COMM_KERNEL_RE = re.compile(r"^[nr]ccl\w*?Kernel", re.IGNORECASE)

GPU_FIELDS = ("idle_ms", "compute_ms", "communication_ms", "exposed_communication_ms")


def is_comm_kernel(event: TraceEvent) -> bool:
    """A collective kernel: Kineto's ``Collective name`` first, the kernel's name second."""
    return event.kind is Kind.KERNEL and bool(event.collective
                                               or COMM_KERNEL_RE.match(event.name))


@dataclass(frozen=True)
class GpuStep:
    """One step of one rank on its GPU, in ms; ``window_ms`` is the GPU step's length."""

    window_ms: float
    idle_ms: float
    compute_ms: float
    communication_ms: float
    exposed_communication_ms: float

    def as_dict(self) -> dict[str, float]:
        return {f: getattr(self, f) for f in GPU_FIELDS}


def mean_gpu(steps: Sequence[GpuStep]) -> GpuStep | None:
    """Per-step means; ``None`` when no step has a GPU account."""
    if not steps:
        return None
    n = len(steps)
    return GpuStep(*(sum(getattr(s, f) for s in steps) / n
                     for f in ("window_ms", *GPU_FIELDS)))


class DeviceKernels:
    """The kernels of the rank's main device, as interval sets ready to be cut per step."""

    def __init__(self, trace: RankTrace) -> None:
        device = trace.origin.device
        self.events = [e for e in trace.events
                       if e.on_gpu and (device is None or e.device in (device, -1))]
        self.comm_events: list[TraceEvent] = []
        self.compute_events: list[TraceEvent] = []
        self.memory_events: list[TraceEvent] = []
        for event in self.events:
            if event.kind is Kind.MEMORY:
                self.memory_events.append(event)
            elif is_comm_kernel(event):
                self.comm_events.append(event)
            else:
                self.compute_events.append(event)
        self.busy = IntervalSet((e.ts, e.ts + e.dur) for e in self.events)
        self.compute = IntervalSet((e.ts, e.ts + e.dur) for e in self.compute_events)
        self.comm = IntervalSet((e.ts, e.ts + e.dur) for e in self.comm_events)

    def __bool__(self) -> bool:
        return bool(self.events)

    def step(self, window: Interval) -> GpuStep:
        lo, hi = window
        comm = self.comm.within(lo, hi)
        return GpuStep(
            window_ms=(hi - lo) / 1000,
            idle_ms=max(hi - lo - total(self.busy.within(lo, hi)), 0.0) / 1000,
            compute_ms=total(self.compute.within(lo, hi)) / 1000,
            communication_ms=total(comm) / 1000,
            exposed_communication_ms=total(subtract(comm, self.compute.within(lo, hi))) / 1000,
        )


def launch_times(trace: RankTrace) -> dict[int, float]:
    """``correlation`` -> when the CPU launched it (cudaLaunchKernel, hipLaunchKernel...)."""
    launches = {e.correlation: e.ts for e in trace.events
                if e.kind is Kind.LAUNCH and e.correlation is not None}
    return {**launches, **trace.launches} if launches else dict(trace.launches)


def kernels_by_step(kernels: Sequence[TraceEvent], steps: Sequence[tuple[int, Interval]],
                    launches: Mapping[int, float]) -> dict[int, list[TraceEvent]]:
    """GPU events grouped by the CPU step that launched them (by ``correlation``)."""
    starts = [w[0] for _, w in steps]
    by_step: dict[int, list[TraceEvent]] = {n: [] for n, _ in steps}
    for kernel in kernels:
        launched = launches.get(kernel.correlation) if kernel.correlation is not None else None
        if launched is None:
            continue
        index = bisect_right(starts, launched) - 1
        if index >= 0 and launched < steps[index][1][1]:
            by_step[steps[index][0]].append(kernel)
    return by_step


def gpu_windows(steps: Sequence[tuple[int, Interval]],
                by_step: Mapping[int, Sequence[TraceEvent]]) -> list[tuple[int, Interval]]:
    """Step N on the GPU: from its first kernel to the first kernel of step N+1.

    The last step given is not analysed (it only closes the one before). When step N+1
    launched nothing, step N ends when its CPU step ends or its last kernel does, whichever
    is later. Steps that launched nothing have no GPU window.
    """
    firsts = [min((k.ts for k in by_step[n]), default=None) for n, _ in steps]
    windows = []
    for i, (n, (_, cpu_end)) in enumerate(steps[:-1]):
        lo = firsts[i]
        if lo is None:
            continue
        hi = firsts[i + 1]
        if hi is None:
            hi = max(cpu_end, max(k.end for k in by_step[n]))
        windows.append((n, (lo, hi)))
    return windows
