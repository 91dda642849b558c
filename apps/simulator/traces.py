"""Per-rank PyTorch profiler (Kineto) traces in ``tensorboard_trace_handler`` layout.

Phases appear as PyTorch emits them: ``ProfilerStep#N``, ``enumerate(DataLoader)#...``,
``DistributedDataParallel.forward``, autograd backward ops, ``Optimizer.step#...`` and
the collectives (``nccl:all_reduce`` with ``ncclDevKernel_*``/``ncclKernel_*`` kernels, or
``gloo:all_reduce`` on a ``pt_gloo_runloop`` thread). In synchronous data-parallel
training every rank leaves the all-reduce together, so a slow rank arrives last and the
others show the wait inside their collective.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from apps.simulator.cluster import GPUS_PER_NODE, Cluster
from apps.simulator.workload import Job

TRIMONTH_S = 7_889_238
STEPS = range(2, 8)  # schedule(wait=1, warmup=1, active=6): the first traced step is #2
PHASES_MS = {"dataloader": 35.0, "forward": 110.0, "backward": 170.0, "optimizer": 30.0}
COMM_MS = 45.0
NEW_KERNEL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
OLD_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_bf16(ncclDevComm*, unsigned long, ncclWork*)"


@dataclass(frozen=True)
class TracePlan:
    job: Job
    backend: str  # nccl or gloo
    kernel: str  # new, old or none
    straggler_rank: int | None
    straggler_phase: str | None
    worker_style: str  # rank or host


def plan_traces(cluster: Cluster, jobs: list[Job], effects: dict[int, dict[str, object]],
                count: int, seed: int) -> list[TracePlan]:
    """Trace the straggler jobs that fit (<= 32 ranks) and some healthy ones."""
    rng = random.Random(f"{seed}:traces")
    training = [j for j in jobs if j.kind in ("train", "train1", "finetune")
                and j.start is not None and 2 <= j.gpus <= 32]
    stragglers = [j for j in training if "straggler" in effects.get(j.job_id, {})]
    healthy = [j for j in training if j not in stragglers and not j.pathologies]
    chosen = stragglers[:count] + rng.sample(healthy, min(len(healthy),
                                                          max(0, count - len(stragglers))))
    ordered = sorted(chosen, key=lambda j: j.job_id)
    stragglers_at: list[tuple[int | None, str | None]] = []
    for i, job in enumerate(ordered):
        straggler = effects.get(job.job_id, {}).get("straggler")
        rank = phase = None
        if straggler:
            node, gpu, cause = cast(tuple[int, int, str], straggler)
            ranks = [(n, g) for n, gpus in job.alloc for g in gpus]  # node order, then GPU
            rank = ranks.index((node, gpu))
            phase = "backward" if cause == "thermal" else "forward"
        elif i % 3 == 2:  # a healthy job whose one rank starves on input: a data-loader straggler
            rank, phase = rng.randrange(job.gpus), "dataloader"
        stragglers_at.append((rank, phase))
    backends = _backends(stragglers_at)
    return [TracePlan(job, backend, kernel, rank, phase, "rank" if i % 2 else "host")
            for i, (job, (rank, phase), (backend, kernel))
            in enumerate(zip(ordered, stragglers_at, backends, strict=True))]


def _backends(stragglers: list[tuple[int | None, str | None]]) -> list[tuple[str, str]]:
    """(backend, kernel naming) per traced job: from three jobs up, one gloo (CPU) trace and
    NCCL traces with both kernel namings (``ncclDevKernel_*`` since NCCL 2.19, the older
    ``ncclKernel_*``), so the trace importer always meets all three.

    The gloo trace goes to the last healthy job, else the last data-loader straggler (a
    CPU-visible phase), else the last job; the NCCL ones alternate new, old.
    """
    count = len(stragglers)
    gloo = None
    if count >= 3:
        healthy = [i for i, (rank, _) in enumerate(stragglers) if rank is None]
        loader = [i for i, (_, phase) in enumerate(stragglers) if phase == "dataloader"]
        gloo = (healthy or loader or [count - 1])[-1]
    out, nccl = [], 0
    for i in range(count):
        if i == gloo:
            out.append(("gloo", "none"))
        else:
            out.append(("nccl", "old" if nccl % 2 else "new"))
            nccl += 1
    return out


def write_traces(cluster: Cluster, plan: TracePlan, directory: Path) -> list[Path]:
    """Write one file per rank; returns the paths (gzip for every other job)."""
    job = plan.job
    assert job.start is not None
    rng = random.Random(f"trace:{job.job_id}")
    base_ns = (job.start + 600) // TRIMONTH_S * TRIMONTH_S * 1_000_000_000
    t0_us = ((job.start + 600) * 1_000_000_000 - base_ns) / 1000
    timeline = _timeline(plan, rng, t0_us)
    out = directory / str(job.job_id)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(job.gpus):
        node = cluster.nodes[job.nodes_used[rank // GPUS_PER_NODE]].name
        pid = 40000 + rank * 7 + job.job_id % 1000
        worker = f"rank{rank}" if plan.worker_style == "rank" else f"{node}_{pid}"
        ns = (job.start + 600) * 1_000_000_000 + rank * 1_000_003
        gz = job.job_id % 2 == 0
        path = out / f"{worker}.{ns}.pt.trace.json{'.gz' if gz else ''}"
        doc = _document(plan, rank, node, pid, base_ns, timeline[rank],
                        f"{directory.name}/{job.job_id}/{path.name}")
        data = json.dumps(doc).encode()
        if gz:
            with path.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0,
                                                       filename="") as zipped:
                zipped.write(data)
        else:
            path.write_bytes(data)
        paths.append(path)
    return paths


def _timeline(plan: TracePlan, rng: random.Random, t0: float) -> list[list[dict[str, float]]]:
    """Per rank, per step: phase start/end times (µs); all ranks leave the all-reduce together."""
    ranks = plan.job.gpus
    per_rank: list[list[dict[str, float]]] = [[] for _ in range(ranks)]
    start = [t0 + rng.uniform(0, 200) for _ in range(ranks)]
    for _ in STEPS:
        arrivals, parts = [], []
        for r in range(ranks):
            d = {k: v * 1000 * rng.uniform(0.96, 1.04) for k, v in PHASES_MS.items()}
            if r == plan.straggler_rank and plan.straggler_phase:
                d[plan.straggler_phase] *= 2.4 if plan.straggler_phase != "dataloader" else 5
            p = {"step": start[r], "dl_end": start[r] + d["dataloader"]}
            p["fw_end"] = p["dl_end"] + d["forward"]
            p["bw_end"] = p["fw_end"] + d["backward"]
            p["arrive"] = p["fw_end"] + 0.55 * d["backward"]
            p["opt_len"] = d["optimizer"]
            arrivals.append(p["arrive"])
            parts.append(p)
        leave = max(arrivals) + COMM_MS * 1000 * rng.uniform(0.97, 1.03)
        for r, p in enumerate(parts):
            p["comm_end"] = leave
            p["bw_end"] = max(p["bw_end"], leave + 2000)
            p["opt_end"] = p["bw_end"] + p["opt_len"]
            p["end"] = p["opt_end"] + 500
            per_rank[r].append(p)
            start[r] = p["end"]
    return per_rank


def _document(plan: TracePlan, rank: int, host: str, pid: int, base_ns: int,
              steps: list[dict[str, float]], trace_name: str) -> dict[str, Any]:
    job = plan.job
    gpu = rank % GPUS_PER_NODE
    main, autograd, gloo = pid, pid + 11, pid + 23
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": main,
         "args": {"name": f"thread {main} (python)"}},
    ]
    if plan.backend == "gloo":
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": gloo,
                       "args": {"name": f"thread {gloo} (pt_gloo_runloop)"}})
    else:
        events.append({"ph": "M", "name": "process_labels", "pid": gpu, "tid": 0,
                       "args": {"labels": f"GPU {gpu}"}})
    for n, p in zip(STEPS, steps, strict=False):
        events += _step_events(plan, n, p, pid, main, autograd, gloo, gpu)
    span = steps[-1]["end"] - steps[0]["step"]
    events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
                   "tid": "PyTorch Profiler", "ts": round(steps[0]["step"], 3),
                   "dur": round(span, 3), "args": {"Op count": 0}})
    world = job.gpus
    info: dict[str, Any] = {
        "backend": plan.backend, "rank": rank, "world_size": world, "pg_count": 1,
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                       "backend_config": "cuda:nccl" if plan.backend == "nccl"
                       else "cpu:gloo,cuda:gloo", "pg_size": world,
                       "ranks": list(range(world))}]}
    if plan.backend == "nccl":
        info["nccl_version"] = "2.21.5" if plan.kernel == "new" else "2.17.1"
    return {"schemaVersion": 1,
            "deviceProperties": [] if plan.backend == "gloo" else [
                {"id": gpu, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85520809984,
                 "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
            "distributedInfo": info, "traceEvents": events, "displayTimeUnit": "ms",
            "baseTimeNanoseconds": base_ns, "traceName": trace_name, "host_name": host}


def _x(cat: str, name: str, pid: int, tid: int, ts: float, end: float,
       **args: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": round(ts, 3),
            "dur": round(end - ts, 3), "args": args}


def _step_events(plan: TracePlan, n: int, p: dict[str, float], pid: int, main: int,
                 autograd: int, gloo: int, gpu: int) -> list[dict[str, Any]]:
    ev = [
        _x("user_annotation", f"ProfilerStep#{n}", pid, main, p["step"], p["end"]),
        _x("user_annotation", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
           pid, main, p["step"] + 5, p["dl_end"]),
        _x("user_annotation", "DistributedDataParallel.forward", pid, main, p["dl_end"] + 5,
           p["fw_end"]),
        _x("cpu_op", "aten::linear", pid, main, p["dl_end"] + 20, p["fw_end"] - 20,
           **{"External id": n * 100 + 1}),
    ]
    bw_tid = autograd if plan.backend == "nccl" else main
    mid = p["fw_end"] + (p["arrive"] - p["fw_end"]) / 2
    for i, (start, end) in enumerate(((p["fw_end"] + 10, mid), (mid + 5, p["arrive"] - 5))):
        op = ("AddmmBackward0", "NativeLayerNormBackward0")[i]
        ev.append(_x("cpu_op", f"autograd::engine::evaluate_function: {op}", pid, bw_tid,
                     start, end, **{"Sequence number": n * 10 + i, "Fwd thread id": 1}))
        ev.append(_x("cpu_op", op, pid, bw_tid, start + 2, end - 2))
    ev.append(_x("cpu_op", "torch::autograd::AccumulateGrad", pid, bw_tid, p["arrive"] - 4,
                 p["arrive"] - 1))
    # what is left of backward once the first gradients' all-reduce is over (a long tail on
    # a rank slow in backward): recorded like any autograd op, so it counts as backward
    tail = (p["comm_end"] + 20, p["bw_end"] - 20)
    if tail[1] > tail[0]:
        ev.append(_x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", pid, bw_tid,
                     *tail, **{"Sequence number": n * 10 + 2, "Fwd thread id": 1}))
    ev += _collective(plan, n, p, pid, main, gloo, gpu)
    ev.append(_x("user_annotation", "Optimizer.zero_grad#AdamW.zero_grad", pid, main,
                 p["bw_end"] + 5, p["bw_end"] + 200))
    ev.append(_x("user_annotation", "Optimizer.step#AdamW.step", pid, main, p["bw_end"] + 210,
                 p["opt_end"]))
    if plan.backend == "nccl":
        # Kineto pairs every kernel with the cudaLaunchKernel that queued it (correlation)
        ev.append(_launch(pid, main, p["dl_end"] + 25, n * 100 + 1))
        ev.append(_x("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
                     gpu, 7, p["dl_end"] + 40, p["fw_end"] + 30, device=gpu, stream=7,
                     correlation=n * 100 + 1, **{"External id": n * 100 + 1}))
        ev.append(_launch(pid, bw_tid, p["fw_end"] + 15, n * 100 + 2))
        ev.append(_x("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64",
                     gpu, 7, p["fw_end"] + 40, p["arrive"], device=gpu, stream=7,
                     correlation=n * 100 + 2, **{"External id": n * 100 + 2}))
        if tail[1] > tail[0]:
            ev.append(_launch(pid, bw_tid, tail[0] + 2, n * 100 + 3))
            ev.append(_x("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64",
                         gpu, 7, tail[0] + 10, tail[1], device=gpu, stream=7,
                         correlation=n * 100 + 3, **{"External id": n * 100 + 3}))
    return ev


def _launch(pid: int, tid: int, ts: float, correlation: int) -> dict[str, Any]:
    return _x("cuda_runtime", "cudaLaunchKernel", pid, tid, ts, ts + 4,
              correlation=correlation, **{"External id": correlation, "cbid": 211})


def _collective(plan: TracePlan, n: int, p: dict[str, float], pid: int, main: int, gloo: int,
                gpu: int) -> list[dict[str, Any]]:
    meta = {"Collective name": "allreduce", "In msg nelems": 26_214_400,
            "Out msg nelems": 26_214_400, "Group size": plan.job.gpus, "dtype": "BFloat16",
            "Process Group Name": "0", "Process Group Description": "default_pg"}
    if plan.backend == "gloo":
        return [_x("cpu_op", "c10d::allreduce_", pid, main, p["arrive"], p["arrive"] + 100),
                _x("user_annotation", "gloo:all_reduce", pid, gloo, p["arrive"] + 20,
                   p["comm_end"])]
    kernel = NEW_KERNEL if plan.kernel == "new" else OLD_KERNEL
    corr = n * 100 + 50
    return [
        _x("cpu_op", "record_param_comms", pid, main, p["arrive"], p["arrive"] + 60,
           **meta, **{"External id": corr}),
        _launch(pid, main, p["arrive"] + 10, corr),
        _x("user_annotation", "nccl:all_reduce", pid, main, p["arrive"] + 5, p["arrive"] + 90),
        _x("kernel", kernel, gpu, 20, p["arrive"] + 30, p["comm_end"], device=gpu, stream=20,
           correlation=corr, **meta, **{"External id": corr}),
    ]
