"""One rank's trace cut into training steps, and each step into phases (pure).

Every instant of a step goes to exactly one phase, so the phases add up to the step.
Where spans overlap, the first of these wins:

1. communication: the union of collective spans, on any thread or stream, so a wait inside
   a collective is never counted as compute;
2. user annotations (``record_function``) on the training thread that map to a phase
   (``PhaseConfig``: a default mapping for common frameworks, plus the site's own), the
   innermost first, so Lightning's ``training_step`` inside its ``optimizer_step`` is
   forward, not optimizer;
3. what PyTorch emits by itself: DataLoader, optimizer, autograd ops (backward), DDP forward;
4. user annotations that map to no phase, by their own name (``## metrics:publish ##``),
   the innermost first; one that spans the whole step is a wrapper, not a stage, and is
   passed over;
5. "forward" as the rest of the step before backward when nothing marks it;
6. "other": the rest.

CPU traces (gloo) are cut on the CPU timeline. GPU traces are cut on the GPU timeline,
because the CPU runs ahead of the GPU (``gpu_timeline``): compute kernels take the phase
the CPU was in when it launched them, collective kernels not under a compute kernel are
communication (overlapped communication costs nothing), and time the GPU sat idle takes
the phase the CPU was in then, outside collective calls (an input stall shows as idle GPU
during data loading). Each GPU step also gets the GPU's own account (``GpuStep``): idle,
compute, communication and exposed communication, which the verdict reads first.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from apps.analysis.gpu_timeline import (
    DeviceKernels,
    GpuStep,
    gpu_windows,
    is_comm_kernel,
    kernels_by_step,
    launch_times,
)
from apps.analysis.intervals import Interval, IntervalSet, Segment, label_at, partition
from apps.analysis.trace_types import Kind, RankTrace, TraceEvent

PHASES = ("data_loading", "forward", "backward", "communication", "optimizer", "other")
OWN_PHASES = tuple(p for p in PHASES if p != "communication")

STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
# Lightning names its spans "[LightningModule]Net.training_step", "[Strategy]DDP.backward"
BRACKET_PREFIX_RE = re.compile(r"^\s*\[[^\]]*\]\s*(?P<rest>.+)$")


def normalise(name: str) -> str:
    """How annotation names are compared: no ``#``, spaces, ``_`` or ``-``; lower case."""
    return re.sub(r"[#\s_\-]+", "", name).lower()


def _names(phase: str, *names: str) -> dict[str, str]:
    return {normalise(n): phase for n in names}


# The names common frameworks and sites give their stages (docs/traces.md lists them).
DEFAULT_ANNOTATION_PHASES: Mapping[str, str] = {
    **_names("data_loading",
             "data", "data_loading", "data_load", "dataloader", "load_data", "input",
             "get_batch", "next_batch", "fetch_batch", "load_batch", "wait_for_batch",
             # TorchRec's train pipeline: the next batch is copied and its sparse features
             # distributed (all-to-all) while this one trains
             "copy_batch_to_gpu", "sparse_data_dist", "wait_sparse_data_dist",
             # Lightning, Megatron
             "train_dataloader_next", "batch_to_device", "transfer_batch_to_device",
             "batch-generator"),
    **_names("forward",
             "forward", "fwd", "forward_pass", "model_forward",
             # Lightning and Hugging Face Trainer: the forward pass and the loss
             "training_step", "compute_loss",
             # DeepSpeed and Megatron timers
             "fwd_microstep", "forward-compute"),
    **_names("backward",
             "backward", "bwd", "backward_pass", "loss_backward", "bwd_microstep",
             "bwd_inner_microstep", "backward-compute"),
    **_names("optimizer",
             "optimizer", "optim", "optimizer_step", "optimizer.step", "zero_grad",
             "optimizer_zero_grad", "step_microstep", "clip_gradients",
             "optimizer-inner-step", "optimizer-copy-to-main-grad",
             "optimizer-copy-main-to-model-params", "optimizer-unscale-and-check-inf",
             "optimizer-clip-main-grad", "optimizer-count-zeros"),
    **_names("communication",
             "allreduce", "all_reduce", "communication", "comm", "bwd_allreduce",
             "all-grads-sync", "params-all-gather", "grads-reduce-scatter",
             "layernorm-grads-all-reduce", "embedding-grads-all-reduce"),
}


@dataclass(frozen=True)
class PhaseConfig:
    """Which user annotations mean which phase, and when a rank counts as a straggler.

    A straggler must be ahead of the median of the other ranks by at least
    ``min_excess_ms`` AND ``min_excess_fraction`` of the median step: in most steps
    (``min_step_share``: a consistent straggler), or in at least ``intermittent_min_steps``
    steps and ``intermittent_min_share`` of them while no other rank ever is (an
    intermittent one). A run with no straggler whose ranks spend ``comm_bound_fraction``
    of their steps in (exposed) collectives is communication-bound; a GPU idle at least
    ``gpu_idle_fraction`` of each step cannot be fed by its CPU. An unmapped annotation
    spanning ``wrapper_fraction`` of a step is a wrapper, not a stage. The defaults are
    calibrated on balanced DDP runs (docs/traces.md).
    """

    annotation_phases: Mapping[str, str] = field(
        default_factory=lambda: dict(DEFAULT_ANNOTATION_PHASES))
    min_excess_ms: float = 5.0
    min_excess_fraction: float = 0.15
    min_step_share: float = 0.6
    intermittent_min_steps: int = 2
    intermittent_min_share: float = 0.25
    comm_bound_fraction: float = 0.5
    gpu_idle_fraction: float = 0.3
    wrapper_fraction: float = 0.95

    def __post_init__(self) -> None:
        bad = {k: v for k, v in self.annotation_phases.items() if v not in PHASES}
        if bad:
            raise ValueError(f"annotation_phases: unknown phase(s) {bad}; use {PHASES}")
        object.__setattr__(self, "annotation_phases",
                           {normalise(k): v for k, v in self.annotation_phases.items()})

    def phase_of(self, annotation: str) -> str | None:
        """The phase a user annotation stands for: its whole name, then the part a
        framework's convention makes meaningful (Lightning's method after ``[Hook]Class.``,
        TorchRec's stage before ``:``)."""
        phases = self.annotation_phases
        phase = phases.get(normalise(annotation))
        if phase is None and (match := BRACKET_PREFIX_RE.match(annotation)):
            phase = phases.get(normalise(match["rest"].rsplit(".", 1)[-1]))
        if phase is None and ":" in annotation:
            phase = phases.get(normalise(annotation.split(":", 1)[0]))
        return phase


@dataclass(frozen=True)
class StepPhases:
    """One step of one rank: its window (µs), its phases (ms, adding up to the step) and,
    on GPU traces, the GPU's account of it.

    ``phases_ms`` has every name of ``PHASES``, then the unmapped annotations by name.
    """

    step: int
    start: float
    end: float
    phases_ms: Mapping[str, float]
    gpu: GpuStep | None = None

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
    if event.kind is Kind.KERNEL:
        return is_comm_kernel(event)
    if event.collective:
        return event.kind is not Kind.MEMORY
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

Span = tuple[float, float, str]  # start, end, label


@dataclass
class _CpuLayers:
    """The whole trace's CPU intervals, by phase, ready to be cut per step."""

    comm: IntervalSet
    mapped: list[Span]  # user annotations on the training thread that map to a phase
    builtin: dict[str, IntervalSet]
    autograd: IntervalSet  # backward is first-to-last autograd op in each step
    unmapped: list[Span]  # user annotations on the training thread that map to nothing
    wrapper_fraction: float

    @classmethod
    def of(cls, events: Sequence[TraceEvent], config: PhaseConfig,
           main_thread: int | str | None) -> _CpuLayers:
        comm: list[Interval] = []
        mapped: list[Span] = []
        unmapped: list[Span] = []
        builtin: dict[str, list[Interval]] = {p: [] for p in PHASES}
        for event in events:
            if event.kind in (Kind.KERNEL, Kind.MEMORY, Kind.LAUNCH, Kind.GPU_ANNOTATION,
                              Kind.STEP):
                continue
            span = (event.ts, event.end)
            if is_collective(event):
                comm.append(span)
            elif phase := builtin_phase(event):
                builtin[phase].append(span)
            elif event.kind is Kind.ANNOTATION and event.thread == main_thread:
                phase = config.phase_of(event.name)
                target = mapped if phase else unmapped
                target.append((*span, phase or event.name))
        return cls(IntervalSet(comm), sorted(mapped),
                   {p: IntervalSet(v) for p, v in builtin.items() if p != "backward"},
                   IntervalSet(builtin["backward"]), sorted(unmapped),
                   config.wrapper_fraction)

    def segments(self, window: Interval, with_comm: bool = True) -> list[Segment]:
        """One step window cut into phases, in the order of the module docstring."""
        lo, hi = window
        autograd = self.autograd.within(lo, hi)
        backward = [(autograd[0][0], autograd[-1][1])] if autograd else []
        layers: list[tuple[str, Sequence[Interval]]] = []
        if with_comm:
            layers.append(("communication", self.comm.within(lo, hi)))
        mapped = _innermost_first(self.mapped, lo, hi)
        layers += mapped
        layers += [("data_loading", self.builtin["data_loading"].within(lo, hi)),
                   ("optimizer", self.builtin["optimizer"].within(lo, hi)),
                   ("backward", backward),
                   ("forward", self.builtin["forward"].within(lo, hi))]
        wrapper = self.wrapper_fraction * (hi - lo)
        layers += [(label, spans) for label, spans in _innermost_first(self.unmapped, lo, hi)
                   if spans[0][1] - spans[0][0] < wrapper]
        if backward:
            # forward runs from its first mark (or the step start) up to backward: this
            # takes in the loss, computed outside DDP's forward
            marked = [s for label, spans in mapped if label == "forward" for s, _ in spans]
            marked += [s for s, _ in self.builtin["forward"].within(lo, hi)]
            layers.append(("forward", [(min(marked, default=lo), backward[0][0])]))
        return partition(window, layers)


def _innermost_first(spans: Sequence[Span], lo: float,
                     hi: float) -> list[tuple[str, list[Interval]]]:
    """The spans overlapping ``[lo, hi)``, clipped, shortest first, one layer each."""
    inside = [(max(s, lo), min(e, hi), label) for s, e, label in spans if s < hi and e > lo]
    inside.sort(key=lambda span: span[1] - span[0])
    return [(label, [(s, e)]) for s, e, label in inside]


def _phases_ms(window: Interval, segments: Sequence[Segment]) -> dict[str, float]:
    phases = dict.fromkeys(PHASES, 0.0)
    for start, end, label in segments:
        phases[label] = phases.get(label, 0.0) + (end - start) / 1000
    named = sum(phases.values())
    phases["other"] += max((window[1] - window[0]) / 1000 - named, 0.0)
    return phases


# --- Steps --------------------------------------------------------------------------------


def main_thread(trace: RankTrace) -> int | str | None:
    """The training thread: the one that carries ``ProfilerStep#N``."""
    threads = Counter(e.thread for e in trace.events if e.kind is Kind.STEP)
    return threads.most_common(1)[0][0] if threads else None


def _profiler_steps(trace: RankTrace,
                    main: int | str | None) -> tuple[list[tuple[int, Interval]], list[str]]:
    """``ProfilerStep#N`` windows on the training thread, in order, with problems found."""
    warnings: list[str] = []
    if main is None:
        return [], [f"{trace.source}: no ProfilerStep#N events, so no training steps to "
                    f"analyse (profile with a schedule and call prof.step() every iteration)"]
    found: dict[int, Interval] = {}
    for event in trace.events:
        if event.kind is not Kind.STEP or event.thread != main:
            continue
        match = STEP_RE.search(event.name)
        if not match:
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
    main = main_thread(trace)
    steps, warnings = _profiler_steps(trace, main)
    warnings += [f"{trace.source}: {note}" for note in trace.notes]
    cpu = _CpuLayers.of(trace.events, config, main)
    kernels = DeviceKernels(trace)
    if kernels:
        analysed = _gpu_steps(trace, steps, cpu, kernels)
    else:
        analysed = [StepPhases(n, w[0], w[1], _phases_ms(w, cpu.segments(w)))
                    for n, w in steps[:-1]]
    if len(steps) == 1:
        warnings.append(f"{trace.source}: only one traced step ({_step_name(steps[0][0])}), "
                        f"which is the export step; trace at least two active steps")
    elif steps and not analysed:
        warnings.append(f"{trace.source}: no GPU kernel could be matched to a traced step "
                        f"(by the correlation id of its launch)")
    return RankSteps(trace.source, "gpu" if kernels else "cpu", tuple(analysed),
                     tuple(warnings))


def _step_name(n: int) -> str:
    return f"ProfilerStep#{n}"


# --- GPU timeline ---------------------------------------------------------------------------


def _gpu_steps(trace: RankTrace, steps: Sequence[tuple[int, Interval]], cpu: _CpuLayers,
               kernels: DeviceKernels) -> list[StepPhases]:
    """Steps on the GPU timeline (``gpu_timeline.gpu_windows``), phases and GPU account."""
    launches = launch_times(trace)
    windows = gpu_windows(steps, kernels_by_step(kernels.events, steps, launches))
    # what the CPU was doing, with and without its collective calls
    launched_in = sorted(s for _, w in steps for s in cpu.segments(w))
    idle_in = sorted(s for _, w in steps for s in cpu.segments(w, with_comm=False))
    layers = _gpu_layers(kernels, launches, launched_in, idle_in)
    out = []
    for n, window in windows:
        lo, hi = window
        segments = partition(window, [(label, ivs.within(lo, hi)) for label, ivs in layers])
        out.append(StepPhases(n, lo, hi, _phases_ms(window, segments), kernels.step(window)))
    return out


def _gpu_layers(kernels: DeviceKernels, launches: Mapping[int, float],
                launched_in: Sequence[Segment],
                idle_in: Sequence[Segment]) -> list[tuple[str, IntervalSet]]:
    """Compute kernels by launch phase, then exposed collectives, memory copies by launch
    phase, then idle time by what the CPU was doing outside collective calls."""
    starts = [s[0] for s in launched_in]
    compute: dict[str, list[Interval]] = {}
    memory: dict[str, list[Interval]] = {}
    for events, target in ((kernels.compute_events, compute), (kernels.memory_events, memory)):
        for event in events:
            launched = launches.get(event.correlation)  # type: ignore[arg-type]
            label = label_at(launched_in, starts, launched) if launched is not None else None
            # a kernel launched while the CPU sat in a collective call is still compute
            label = "other" if label is None or label == "communication" else label
            target.setdefault(label, []).append((event.ts, event.ts + event.dur))
    idle: dict[str, list[Interval]] = {}
    for start, end, label in idle_in:
        idle.setdefault(label, []).append((start, end))
    return [*((p, IntervalSet(v)) for p, v in compute.items()),
            ("communication", kernels.comm),
            *((p, IntervalSet(v)) for p, v in memory.items()),
            *((p, IntervalSet(v)) for p, v in idle.items())]
