"""Small synthetic traces for table tests: a synchronous data-parallel run, simulated.

``simulate(plans)`` plays one step after another on every rank: data loading, forward and
backward, then the gradient allreduce, which no rank leaves before the last one arrives,
then the optimizer. A rank slow before the allreduce makes the others wait in it; a rank
slow in its optimizer arrives late at the next step's allreduce. The events have the names
and categories PyTorch writes (see /docs/traces.md); ``to_chrome`` writes them as a file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from apps.analysis.trace_types import DistributedInfo, Kind, RankTrace, TraceEvent

BASE_NS = 1_790_857_026_000_000_000
MAIN, GLOO, STREAM, NCCL_STREAM = 100, 101, 7, 20
NEW_NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
OLD_NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, ncclDevChannel*, ncclWork*)"


@dataclass(frozen=True)
class Step:
    """What one rank does in one step, in ms (communication comes from the simulation)."""

    data: float = 1.0
    forward: float = 4.0
    backward: float = 8.0
    optimizer: float = 2.0
    other: float = 0.5


@dataclass
class Options:
    comm_ms: float = 2.0  # the allreduce itself, once every rank is there
    gpu: bool = False
    nccl_name: str = NEW_NCCL
    collective_arg: bool = True  # Kineto copies "Collective name" onto NCCL kernels
    annotate_forward: bool = True  # DDP's forward annotation
    user_annotations: dict[str, str] = field(default_factory=dict)  # phase -> name
    first_step: int = 2
    start_us: float = 5_000_000_000.0


def simulate(plans: list[list[Step]], options: Options | None = None) -> list[RankTrace]:
    """One ``RankTrace`` per rank; ``plans[rank][i]`` is step i of that rank.

    Every rank gets one more step than planned, a copy of its last one: the export step
    the analysis leaves out.
    """
    opts = options or Options()
    plans = [[*p, p[-1]] for p in plans]
    world = len(plans)
    clocks = [opts.start_us] * world
    events: list[list[TraceEvent]] = [[] for _ in range(world)]
    for i in range(len(plans[0])):
        arrive = [clocks[r] + _us(plans[r][i].data + plans[r][i].forward + plans[r][i].backward)
                  for r in range(world)]
        release = max(arrive) + _us(opts.comm_ms)
        for r in range(world):
            events[r] += _step(opts, opts.first_step + i, plans[r][i], clocks[r], arrive[r],
                               release, correlation_base=(i + 1) * 1000)
            clocks[r] = release + _us(plans[r][i].optimizer + plans[r][i].other)
    return [RankTrace(source=f"rank{r}.pt.trace.json", events=tuple(events[r]),
                      distributed=DistributedInfo(r, world, "nccl" if opts.gpu else "gloo",
                                                  tuple(range(world))),
                      base_time_ns=BASE_NS) for r in range(world)]


def _us(ms: float) -> float:
    return ms * 1000


def _step(opts: Options, n: int, plan: Step, start: float, arrive: float, release: float,
          correlation_base: int) -> list[TraceEvent]:
    end = release + _us(plan.optimizer + plan.other)
    data_end = start + _us(plan.data)
    fwd_end = data_end + _us(plan.forward)
    opt = (release, release + _us(plan.optimizer))
    spans = {"data_loading": (start, data_end), "forward": (data_end, fwd_end),
             "backward": (fwd_end, arrive), "optimizer": opt}
    out = [TraceEvent(Kind.STEP, f"ProfilerStep#{n}", start, end - start, MAIN)]
    out += _cpu_events(opts, spans)
    if opts.gpu:
        out += _gpu_events(opts, spans, (arrive, release), correlation_base)
    else:
        out.append(TraceEvent(Kind.ANNOTATION, "gloo:all_reduce", arrive, release - arrive, GLOO))
    return out


def _cpu_events(opts: Options, spans: dict[str, tuple[float, float]]) -> list[TraceEvent]:
    names = {"data_loading": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
             "forward": "DistributedDataParallel.forward", "optimizer": "Optimizer.step#SGD.step"}
    if not opts.annotate_forward:
        del names["forward"]
    out = [TraceEvent(Kind.ANNOTATION, name, *_ts_dur(spans[phase]), MAIN)
           for phase, name in names.items()]
    for phase, name in opts.user_annotations.items():
        out.append(TraceEvent(Kind.ANNOTATION, name, *_ts_dur(spans[phase]), MAIN))
    lo, hi = spans["backward"]
    half = (lo + hi) / 2
    # autograd ops: backward runs from the first to the last of them
    out += [TraceEvent(Kind.CPU_OP, "autograd::engine::evaluate_function: AddmmBackward0",
                       lo, half - lo, MAIN),
            TraceEvent(Kind.CPU_OP, "torch::autograd::AccumulateGrad", hi - 10, 10, MAIN)]
    return out


def _gpu_events(opts: Options, spans: dict[str, tuple[float, float]],
                comm: tuple[float, float], correlation_base: int) -> list[TraceEvent]:
    """A kernel per compute phase and one NCCL kernel, launched as its CPU phase begins."""
    out = []
    for k, phase in enumerate(("forward", "backward", "optimizer")):
        lo, hi = spans[phase]
        corr = correlation_base + k
        out += [TraceEvent(Kind.LAUNCH, "", lo, 1, MAIN, correlation=corr),
                TraceEvent(Kind.KERNEL, f"volta_sgemm_{phase}", lo + 2, hi - lo - 2, STREAM,
                           correlation=corr)]
    corr = correlation_base + 99
    out += [TraceEvent(Kind.LAUNCH, "", comm[0] - 3, 1, MAIN, correlation=corr),
            TraceEvent(Kind.KERNEL, opts.nccl_name, *_ts_dur(comm), NCCL_STREAM,
                       correlation=corr, collective="allreduce" if opts.collective_arg else "")]
    return out


def _ts_dur(span: tuple[float, float]) -> tuple[float, float]:
    return span[0], span[1] - span[0]


def with_rank(trace: RankTrace, rank: int, world: int | None = None) -> RankTrace:
    info = trace.distributed or DistributedInfo(rank, world or rank + 1)
    return replace(trace, distributed=replace(info, rank=rank, world_size=world or info.world_size))


# --- As a Chrome trace file ----------------------------------------------------------------

_CATS = {Kind.STEP: "user_annotation", Kind.ANNOTATION: "user_annotation",
         Kind.GPU_ANNOTATION: "gpu_user_annotation", Kind.CPU_OP: "cpu_op",
         Kind.KERNEL: "kernel", Kind.MEMORY: "gpu_memcpy", Kind.LAUNCH: "cuda_runtime"}


def to_chrome(trace: RankTrace, extra_events: list[dict[str, Any]] | None = None,
              device: int = 1, host: str | None = None,
              gpu_model: str = "NVIDIA A100-SXM4-80GB") -> dict[str, Any]:
    """The JSON document Kineto would write for ``trace`` (plus noise events it ignores).

    GPU events go to GPU ``device`` (their ``pid``); ``host`` is Kineto's ``host_name``."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": MAIN, "args": {"name": "main"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": MAIN,
         "ts": 5_000_000_000.0, "dur": 3.5, "args": {"External id": 1}},
        {"ph": "X", "cat": "python_function", "name": "train.py(12): step", "pid": 1,
         "tid": MAIN, "ts": 5_000_000_000.0, "dur": 1.0},
        {"ph": "i", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces", "tid": "",
         "ts": 5_000_000_000.0, "s": "g"},
    ]
    for e in trace.events:
        args: dict[str, Any] = {}
        if e.correlation is not None:
            args["correlation"] = e.correlation
        if e.collective:
            args["Collective name"] = e.collective
        name = "cudaLaunchKernel" if e.kind is Kind.LAUNCH else e.name
        pid = device if e.kind in (Kind.KERNEL, Kind.MEMORY, Kind.GPU_ANNOTATION) else 1
        events.append({"ph": "X", "cat": _CATS[e.kind], "name": name, "pid": pid,
                       "tid": e.thread, "ts": e.ts, "dur": e.dur, "args": args})
    gpus = any(e.kind is Kind.KERNEL for e in trace.events)
    doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [
        {"id": i, "name": gpu_model} for i in range(8)] if gpus else []}
    if host:
        doc["host_name"] = host
    if trace.distributed:
        d = trace.distributed
        doc["distributedInfo"] = {"backend": d.backend, "rank": d.rank, "world_size": d.world_size,
                                  "pg_count": 1, "pg_config": [
                                      {"pg_name": "0", "pg_desc": "default_pg",
                                       "pg_size": d.world_size, "ranks": list(d.group_ranks)}]}
    doc.update({"displayTimeUnit": "ms", "baseTimeNanoseconds": trace.base_time_ns,
                "traceEvents": events + (extra_events or []), "traceName": trace.source})
    return doc
