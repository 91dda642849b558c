"""One rank's trace cut into training steps, and each step into phases (pure).

Every instant of a step goes to exactly one phase, so the phases add up to the step:
communication first (the union of collective spans, on any thread or stream, so a wait
inside a collective is never counted as compute), then user annotations mapped through
``PhaseConfig``, then what PyTorch emits by itself (DataLoader, optimizer, autograd ops,
DDP forward), then "forward" as the rest before backward when nothing marks it; the rest
is "other".

CPU traces (gloo) are cut on the CPU timeline. GPU traces are cut on the GPU timeline,
because the CPU runs ahead of the GPU: a step's window starts with the first kernel
launched in it; NCCL kernels are communication, other kernels take the phase the CPU was
in when it launched them, and time the GPU sat idle takes the phase the CPU was in then
(an input stall shows as idle GPU during data loading).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from apps.analysis.intervals import Interval, IntervalSet, Segment, label_at, partition
from apps.analysis.trace_types import Kind, RankTrace, TraceEvent

PHASES = ("data_loading", "forward", "backward", "communication", "optimizer", "other")
OWN_PHASES = tuple(p for p in PHASES if p != "communication")
# When user phases overlap, the inner ones usually sit in this order of priority.
PRIORITY = ("data_loading", "optimizer", "backward", "forward", "other")

STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
NCCL_KERNEL_RE = re.compile(r"^nccl(Dev)?Kernel_")

DEFAULT_ANNOTATION_PHASES: Mapping[str, str] = {
    "data": "data_loading", "dataloading": "data_loading", "dataloader": "data_loading",
    "loaddata": "data_loading", "input": "data_loading", "getbatch": "data_loading",
    "forward": "forward", "fwd": "forward", "forwardpass": "forward",
    "backward": "backward", "bwd": "backward", "backwardpass": "backward",
    "optimizer": "optimizer", "optimizerstep": "optimizer", "optim": "optimizer",
    "optimizer.step": "optimizer", "zerograd": "optimizer",
    "allreduce": "communication", "communication": "communication", "comm": "communication",
}


def normalise(name: str) -> str:
    """How annotation names are compared: no ``#``, spaces, ``_`` or ``-``; lower case."""
    return re.sub(r"[#\s_\-]+", "", name).lower()


@dataclass(frozen=True)
class PhaseConfig:
    """Which user annotations mean which phase, and when a rank counts as a straggler.

    A straggler must be ahead of the median of the other ranks by at least
    ``min_excess_ms`` AND ``min_excess_fraction`` of the median step, and be the last to
    arrive in at least ``min_step_share`` of the steps. A run with no straggler whose ranks
    spend ``comm_bound_fraction`` of their steps in collectives is communication-bound.
    The defaults are calibrated on balanced DDP runs (docs/traces.md).
    """

    annotation_phases: Mapping[str, str] = field(
        default_factory=lambda: dict(DEFAULT_ANNOTATION_PHASES))
    min_excess_ms: float = 5.0
    min_excess_fraction: float = 0.15
    min_step_share: float = 0.6
    comm_bound_fraction: float = 0.5

    def __post_init__(self) -> None:
        bad = {k: v for k, v in self.annotation_phases.items() if v not in PHASES}
        if bad:
            raise ValueError(f"annotation_phases: unknown phase(s) {bad}; use {PHASES}")
        object.__setattr__(self, "annotation_phases",
                           {normalise(k): v for k, v in self.annotation_phases.items()})

    def phase_of(self, annotation: str) -> str | None:
        return self.annotation_phases.get(normalise(annotation))


@dataclass(frozen=True)
class StepPhases:
    """One step of one rank: its window (µs) and its phases (ms, adding up to the step)."""

    step: int
    start: float
    end: float
    phases_ms: Mapping[str, float]

    @property
    def dur_ms(self) -> float:
        return (self.end - self.start) / 1000

    @property
    def own_ms(self) -> float:
        """Time not spent in collectives: what decides when the rank arrives."""
        return self.dur_ms - self.phases_ms["communication"]


@dataclass(frozen=True)
class RankSteps:
    """The analysed steps of one trace file (the last traced step excluded)."""

    source: str
    timeline: str  # "cpu" or "gpu"
    steps: tuple[StepPhases, ...]
    warnings: tuple[str, ...] = ()


# --- Recognising events ------------------------------------------------------------------


def is_collective(event: TraceEvent) -> bool:
    """``Collective name`` first, then names: nccl:/gloo: annotations, c10d:: ops, kernels."""
    if event.collective:
        return True
    if event.kind is Kind.KERNEL:
        return bool(NCCL_KERNEL_RE.match(event.name))
    if event.kind in (Kind.ANNOTATION, Kind.GPU_ANNOTATION):
        return event.name.startswith(("nccl:", "gloo:"))
    return event.kind is Kind.CPU_OP and event.name.startswith("c10d::")


def builtin_phase(event: TraceEvent) -> str | None:
    """The phase PyTorch's own annotations and ops stand for (backward: autograd ops)."""
    name = event.name
    if event.kind is Kind.ANNOTATION:
        if name.startswith("enumerate(DataLoader)"):
            return "data_loading"
        if name.startswith(("Optimizer.step#", "Optimizer.zero_grad#")):
            return "optimizer"
        if name.startswith(("DistributedDataParallel.forward", "FullyShardedDataParallel.forward")):
            return "forward"
    if event.kind is Kind.CPU_OP and not is_collective(event) and (
            name.startswith(("autograd::engine::evaluate_function", "torch::autograd::"))
            or "Backward" in name):
        return "backward"
    return None


# --- CPU timeline --------------------------------------------------------------------------


@dataclass
class _CpuLayers:
    """The whole trace's CPU intervals, by phase, ready to be cut per step."""

    comm: IntervalSet
    user: dict[str, IntervalSet]
    builtin: dict[str, IntervalSet]
    autograd: IntervalSet  # backward is first-to-last autograd op in each step

    @classmethod
    def of(cls, events: Sequence[TraceEvent], config: PhaseConfig) -> _CpuLayers:
        comm: list[Interval] = []
        user: dict[str, list[Interval]] = {p: [] for p in PHASES}
        builtin: dict[str, list[Interval]] = {p: [] for p in PHASES}
        for event in events:
            span = (event.ts, event.end)
            if event.kind in (Kind.KERNEL, Kind.LAUNCH, Kind.GPU_ANNOTATION, Kind.STEP):
                continue
            if is_collective(event):
                comm.append(span)
            elif event.kind is Kind.ANNOTATION and (phase := config.phase_of(event.name)):
                user[phase].append(span)
            elif phase := builtin_phase(event):
                builtin[phase].append(span)
        return cls(IntervalSet(comm), {p: IntervalSet(v) for p, v in user.items()},
                   {p: IntervalSet(v) for p, v in builtin.items() if p != "backward"},
                   IntervalSet(builtin["backward"]))

    def segments(self, window: Interval) -> list[Segment]:
        """One step window cut into phases, in the priority order of the module docstring."""
        lo, hi = window
        autograd = self.autograd.within(lo, hi)
        backward = [(autograd[0][0], autograd[-1][1])] if autograd else []
        layers: list[tuple[str, Sequence[Interval]]] = [
            ("communication", self.comm.within(lo, hi)),
            ("communication", self.user["communication"].within(lo, hi)),
        ]
        layers += [(p, self.user[p].within(lo, hi)) for p in PRIORITY]
        layers += [("data_loading", self.builtin["data_loading"].within(lo, hi)),
                   ("optimizer", self.builtin["optimizer"].within(lo, hi)),
                   ("backward", backward),
                   ("forward", self.builtin["forward"].within(lo, hi))]
        marked = self.user["forward"].within(lo, hi) + self.builtin["forward"].within(lo, hi)
        if backward:
            # forward runs from its first mark (or the step start) up to backward: this
            # takes in the loss, computed outside DDP's forward
            start = min((s for s, _ in marked), default=lo)
            layers.append(("forward", [(start, backward[0][0])]))
        return partition(window, layers)


def _phases_ms(window: Interval, segments: Sequence[Segment]) -> dict[str, float]:
    phases = dict.fromkeys(PHASES, 0.0)
    for start, end, label in segments:
        phases[label] += (end - start) / 1000
    phases["other"] += max((window[1] - window[0]) / 1000 - sum(phases.values()), 0.0)
    return phases


# --- Steps --------------------------------------------------------------------------------


def _profiler_steps(trace: RankTrace) -> tuple[list[tuple[int, Interval]], list[str]]:
    """``ProfilerStep#N`` windows on the training thread, in order, with problems found."""
    warnings: list[str] = []
    steps = [e for e in trace.events if e.kind is Kind.STEP]
    if not steps:
        return [], [f"{trace.source}: no ProfilerStep#N events (profile with a schedule and "
                    f"call prof.step() every iteration)"]
    main = Counter(e.thread for e in steps).most_common(1)[0][0]
    found: dict[int, Interval] = {}
    for event in steps:
        match = STEP_RE.search(event.name)
        if event.thread != main or not match:
            continue
        if event.dur <= 0:
            warnings.append(f"{trace.source}: {event.name} has no duration; skipped")
            continue
        found.setdefault(int(match.group(1)), (event.ts, event.end))
    return sorted(found.items()), warnings


def rank_steps(trace: RankTrace, config: PhaseConfig) -> RankSteps:
    """Cut one file into steps and phases; the last traced step is left out.

    The last step of an active window contains the export of the trace itself (seconds
    outside the training loop), so it would skew every statistic: HTA drops it too.
    """
    steps, warnings = _profiler_steps(trace)
    warnings += [f"{trace.source}: {note}" for note in trace.notes]
    has_gpu = any(e.kind is Kind.KERNEL for e in trace.events)
    cpu = _CpuLayers.of(trace.events, config)
    if has_gpu:
        analysed = _gpu_steps(trace, steps, cpu, config)
    else:
        analysed = [StepPhases(n, w[0], w[1], _phases_ms(w, cpu.segments(w)))
                    for n, w in steps[:-1]]
    if steps and not analysed:
        warnings.append(f"{trace.source}: only one traced step, which is the export step; "
                        f"trace at least two active steps")
    return RankSteps(trace.source, "gpu" if has_gpu else "cpu", tuple(analysed),
                     tuple(warnings))


# --- GPU timeline ---------------------------------------------------------------------------


def _gpu_steps(trace: RankTrace, steps: Sequence[tuple[int, Interval]], cpu: _CpuLayers,
               config: PhaseConfig) -> list[StepPhases]:
    """Steps on the GPU timeline: window N runs from the first kernel of step N to that of N+1."""
    launches: dict[int, float] = {e.correlation: e.ts for e in trace.events
                if e.kind is Kind.LAUNCH and e.correlation is not None}
    kernels = [e for e in trace.events if e.kind is Kind.KERNEL]
    cpu_segments = sorted(s for _, w in steps for s in cpu.segments(w))
    starts = [s[0] for s in cpu_segments]
    labelled = [(k, _kernel_phase(k, launches, cpu_segments, starts)) for k in kernels]
    by_step = _kernels_by_step(labelled, steps, launches)
    bounds = [min(k.ts for k, _ in by_step[n]) if by_step[n] else None for n, _ in steps]
    layers = _gpu_layers(trace, labelled, cpu_segments, config)
    out = []
    for i, (n, _) in enumerate(steps[:-1]):
        lo, hi = bounds[i], bounds[i + 1]
        if lo is None:
            continue
        if hi is None:
            hi = max(k.end for k, _ in by_step[n])
        window = (lo, hi)
        out.append(StepPhases(n, lo, hi, _phases_ms(window, partition(window, [
            (label, ivs.within(lo, hi)) for label, ivs in layers]))))
    return out


def _kernel_phase(kernel: TraceEvent, launches: Mapping[int, float],
                  segments: Sequence[Segment], starts: Sequence[float]) -> str:
    if is_collective(kernel):
        return "communication"
    launched = launches.get(kernel.correlation) if kernel.correlation is not None else None
    label = label_at(segments, starts, launched) if launched is not None else None
    # a compute kernel launched while the CPU sat in a collective is still compute
    return "other" if label in (None, "communication") else str(label)


def _kernels_by_step(labelled: Sequence[tuple[TraceEvent, str]],
                     steps: Sequence[tuple[int, Interval]],
                     launches: Mapping[int, float]) -> dict[int, list[tuple[TraceEvent, str]]]:
    """Kernels grouped by the CPU step that launched them (by ``correlation``)."""
    starts = [w[0] for _, w in steps]
    by_step: dict[int, list[tuple[TraceEvent, str]]] = {n: [] for n, _ in steps}
    for kernel, label in labelled:
        launched = launches.get(kernel.correlation) if kernel.correlation is not None else None
        index = bisect_right(starts, launched) - 1 if launched is not None else -1
        if index >= 0 and launched is not None and launched < steps[index][1][1]:
            by_step[steps[index][0]].append((kernel, label))
    return by_step


def _gpu_layers(trace: RankTrace, labelled: Sequence[tuple[TraceEvent, str]],
                cpu_segments: Sequence[Segment],
                config: PhaseConfig) -> list[tuple[str, IntervalSet]]:
    """Priority: NCCL kernels, GPU annotations, kernels by launch phase, then the CPU's phase."""
    gpu_user: dict[str, list[Interval]] = {p: [] for p in PHASES}
    for event in trace.events:
        if event.kind is Kind.GPU_ANNOTATION and (phase := config.phase_of(event.name)):
            gpu_user[phase].append((event.ts, event.end))
    by_label: dict[str, list[Interval]] = {p: [] for p in PHASES}
    for kernel, label in labelled:
        by_label[label].append((kernel.ts, kernel.end))
    idle: dict[str, list[Interval]] = {p: [] for p in PHASES}
    for start, end, label in cpu_segments:
        idle[label].append((start, end))
    layers = [("communication", IntervalSet(by_label["communication"] +
                                            gpu_user["communication"]))]
    for source in (gpu_user, by_label, idle):
        layers += [(p, IntervalSet(source[p])) for p in PRIORITY if source[p]]
    layers.append(("communication", IntervalSet(idle["communication"])))
    return layers
