"""A tiny CPU DDP training run under ``torch.profiler``: real Kineto traces for tests and bench.

``generate(out_dir, scenarios, world_size)`` spawns ``world_size`` gloo ranks once and runs every
scenario in turn inside that one process group (spawning and importing torch is the slow part).
Each scenario writes its traces with ``tensorboard_trace_handler`` into
``out_dir/<name>/traces/`` and its ground truth into ``out_dir/<name>/truth.json``.

The ground truth comes from wall-clock timing inside the run, never from the trace: every
rank times each phase of each step with ``time.perf_counter`` and, separately, the injected
slow-down itself (a sleep in the data loader, extra matmuls in forward or backward, extra
matmuls in the optimizer step). ``truth.json`` says which rank was slowed, where, and by how
many milliseconds per step, as measured.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PHASES = ("data_loading", "forward", "backward", "optimizer")


@dataclass(frozen=True)
class Scenario:
    """One profiled run: ``slow_rank`` gets ``delay_ms`` of extra work in ``phase`` on every
    ``every``-th step (1: every step; 3: a periodic hook, one step in three)."""

    name: str
    slow_rank: int | None = None
    phase: str | None = None  # one of PHASES
    delay_ms: float = 0.0
    steps: int = 8  # active (traced) steps
    every: int = 1

    def slow_at(self, rank: int, step: int) -> bool:
        """Is ``rank`` slowed on iteration ``step`` (which the profiler names ProfilerStep#step)."""
        return self.slow_rank == rank and step % self.every == 0


@dataclass
class _Timer:
    phases: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PHASES})
    injected: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PHASES})
    slow_steps: list[int] = field(default_factory=list)  # iterations that were slowed
    step: int = 0  # the current iteration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _burn(ms: float) -> None:
    """Real compute (matmuls) for about ``ms`` wall-clock milliseconds."""
    import torch

    a = torch.randn(96, 96)
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        a = torch.tanh(a @ a)


def _make_parts(rank: int, scenario: Scenario, timer: _Timer) -> tuple[Any, Any, Any]:
    """The model (DDP), the data loader and the optimizer, slowed where the scenario says."""
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset

    def slow() -> bool:
        return scenario.slow_at(rank, timer.step)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8))

        def forward(self, x: Any) -> Any:
            if slow() and scenario.phase == "forward":
                _timed(timer, "forward", scenario.delay_ms)
            out = self.body(x)
            if slow() and scenario.phase == "backward":
                out = _SlowBackward.apply(out)
            return out

    class _SlowBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any) -> Any:
            return x.view_as(x)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            _timed(timer, "backward", scenario.delay_ms)
            return grad

    class SlowSGD(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            loss = super().step(closure)
            if slow() and scenario.phase == "optimizer":
                _timed(timer, "optimizer", scenario.delay_ms)
            return loss

    def collate(batch: list[Any]) -> Any:
        if slow() and scenario.phase == "data_loading":
            # an input stall: the rank waits for its file system, the CPU is idle
            start = time.perf_counter()
            time.sleep(scenario.delay_ms / 1000)
            timer.injected["data_loading"].append((time.perf_counter() - start) * 1000)
        xs, ys = zip(*batch, strict=True)
        return torch.stack(xs), torch.stack(ys)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 64), torch.randn(4096, 8))
    loader = DataLoader(data, batch_size=32, collate_fn=collate)
    model = DistributedDataParallel(Net())
    return model, loader, SlowSGD(model.parameters(), lr=0.01)


def _timed(timer: _Timer, phase: str, ms: float) -> None:
    start = time.perf_counter()
    _burn(ms)
    timer.injected[phase].append((time.perf_counter() - start) * 1000)


def _run_scenario(rank: int, scenario: Scenario, out: Path) -> dict[str, Any]:
    """Train ``scenario.steps`` traced steps; return this rank's wall-clock timings."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    timer = _Timer()
    model, loader, optimizer = _make_parts(rank, scenario, timer)
    batches = iter(loader)
    plan = schedule(wait=1, warmup=1, active=scenario.steps, repeat=1)
    handler = tensorboard_trace_handler(str(out / "traces"), worker_name=f"rank{rank}")
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU], schedule=plan, on_trace_ready=handler) as prof:
        for step in range(scenario.steps + 3):
            timer.step = step
            if scenario.slow_at(rank, step):
                timer.slow_steps.append(step)
            t0 = time.perf_counter()
            x, y = next(batches)
            t1 = time.perf_counter()
            loss = torch.nn.functional.mse_loss(model(x), y)
            t2 = time.perf_counter()
            optimizer.zero_grad()
            loss.backward()
            t3 = time.perf_counter()
            optimizer.step()
            t4 = time.perf_counter()
            for phase, ms in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                timer.phases[phase].append(ms * 1000)
            prof.step()
    return asdict(timer)


def _worker(rank: int, world_size: int, port: int, scenarios: list[Scenario], root: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        for scenario in scenarios:
            out = Path(root) / scenario.name
            timings = _run_scenario(rank, scenario, out)
            (out / f"timing-rank{rank}.json").write_text(json.dumps(timings))
            dist.barrier()
    finally:
        dist.destroy_process_group()


def _truth(scenario: Scenario, out: Path, world_size: int) -> dict[str, Any]:
    """Which rank was slowed, in which phase, and by how much per step (measured)."""
    timings = [json.loads((out / f"timing-rank{r}.json").read_text()) for r in range(world_size)]
    injected = {
        (rank, phase): sum(values) / len(values)
        for rank, timing in enumerate(timings)
        for phase, values in timing["injected"].items()
        if values
    }
    truth: dict[str, Any] = {"scenario": scenario.name, "world_size": world_size,
                             "straggler": None, "wall_ms": [t["phases"] for t in timings]}
    if injected:
        (rank, phase), ms = max(injected.items(), key=lambda item: item[1])
        truth["straggler"] = {"rank": rank, "phase": phase, "injected_ms": ms,
                              "every": scenario.every,
                              "slow_steps": timings[rank]["slow_steps"]}
    return truth


def generate(root: Path, scenarios: list[Scenario], world_size: int) -> dict[str, dict[str, Any]]:
    """Run every scenario on ``world_size`` gloo ranks; return the ground truth per scenario."""
    import torch.multiprocessing as mp

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    for scenario in scenarios:
        (root / scenario.name / "traces").mkdir(parents=True, exist_ok=True)
    mp.spawn(_worker, args=(world_size, _free_port(), scenarios, str(root)), nprocs=world_size)
    truths = {}
    for scenario in scenarios:
        truth = _truth(scenario, root / scenario.name, world_size)
        (root / scenario.name / "truth.json").write_text(json.dumps(truth, indent=1))
        truths[scenario.name] = truth
    return truths


if __name__ == "__main__":  # pragma: no cover - a manual look at the traces
    import sys

    demo = [Scenario("balanced"), Scenario("slow_data", 1, "data_loading", 20.0)]
    print(json.dumps(generate(Path(sys.argv[1]), demo, int(sys.argv[2])), indent=1))
