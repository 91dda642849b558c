"""Right-sizing a finished job: what it asked for against what it used (pure).

Each recommendation carries its evidence and the exact ``#SBATCH`` line to use next time:

- ``time``: a completed job that used under half of its time limit (and at least an hour
  less) gets a limit of its run time plus half, rounded up to 15 minutes. Only completed
  jobs count: a failed or cancelled run says nothing about what the work needs. Unused
  time costs no GPU-hours, but it keeps the scheduler from backfilling other jobs around
  it; its figure is the GPU-hours asked for and not used.
- ``gpus``: a job whose GPUs did no work over the whole run (idle by the site's one
  reading, ``idleness.is_idle``: busy under 5 % by default) gets the count it used,
  keeping the GPU type it asked for (none used: no GPU line at all).
- ``mig``: a one-GPU job whose activity and peak memory fit a MIG slice gets the smallest
  slice that holds both (the GPU model's profiles below); the rest of the GPU is waste.
- ``mem``: where the job held its nodes whole (node memory is node-shared), CPU memory
  requested at least twice the peak in use and 8 GiB more gets the peak plus a quarter.
  Slurm's ``--mem`` is per node while its accounting (TRES ``mem``) counts the whole
  allocation: the request is read per node (the total over the job's nodes) and the peak
  is the busiest node's (the highest of the nodes' peaks, never their sum), so the advice
  for a 2-node job is a per-node ``--mem`` (issue 26).

Figures are GPU-hours; CPU memory is GiB and counts no GPU-hours.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from apps.analysis.idleness import RULES, IdleRules, is_idle, percent

TIME_SHARE = 0.5  # used under half of the limit ...
TIME_SLACK_S = 3600  # ... and at least an hour less
TIME_MARGIN = 1.5  # suggested limit: run time plus half
MEM_RATIO, MEM_SLACK_GIB, MEM_MARGIN = 2.0, 8.0, 1.25
MIG_HEADROOM = 1.1  # peak memory times this must fit the slice
GIB = 1024**3

# GPU model -> MIG profiles (name, compute sevenths, memory GiB), smallest first; only the
# profiles smaller than the whole GPU (a slice that is the whole GPU saves nothing).
MIG_PROFILES: dict[str, tuple[tuple[str, int, float], ...]] = {
    "a100": (("1g.10gb", 1, 10), ("2g.20gb", 2, 20), ("3g.40gb", 3, 40)),  # 80 GB
    "a100-40gb": (("1g.5gb", 1, 5), ("2g.10gb", 2, 10), ("3g.20gb", 3, 20)),
    "h100": (("1g.10gb", 1, 10), ("2g.20gb", 2, 20), ("3g.40gb", 3, 40)),
    "h200": (("1g.18gb", 1, 18), ("2g.35gb", 2, 35), ("3g.71gb", 3, 71)),
}


@dataclass(frozen=True)
class GpuUse:
    """One GPU over the whole run: busy share (utilisation), activity share and peak memory."""

    gpu: str
    busy: float
    activity: float | None = None  # SM active (or the job's measure)
    memory_peak_mib: float | None = None


@dataclass(frozen=True)
class FinishedJob:
    """What a finished job asked for and what it used."""

    state: str
    elapsed_s: float
    time_limit_min: int | None
    gpus: int
    gpu_type: str = ""
    used: tuple[GpuUse, ...] = ()  # measured GPUs (empty: no telemetry)
    mem_requested_mb: int = 0  # Slurm's TRES mem: the whole allocation, every node
    nodes: int = 1
    mem_peaks_bytes: tuple[float, ...] = ()  # each node's peak, only where held whole

    @property
    def mem_per_node_mb(self) -> float:
        """What ``--mem`` asked for on each node."""
        return self.mem_requested_mb / max(1, self.nodes)

    @property
    def mem_peak_bytes(self) -> float | None:
        """The busiest node's peak: what ``--mem`` must hold on every node."""
        return max(self.mem_peaks_bytes) if self.mem_peaks_bytes else None


@dataclass(frozen=True)
class Recommendation:
    kind: str  # time, gpus, mig, mem
    line: str  # the #SBATCH line to use instead
    asked: str
    evidence: str
    waste_gpu_hours: float = 0.0
    waste_gib: float = 0.0


def recommend(job: FinishedJob, rules: IdleRules = RULES) -> list[Recommendation]:
    """Every recommendation for ``job``, in the kinds' order (idle GPUs by ``rules``)."""
    found = [_time(job), _gpus(job, rules), _mig(job, rules), _mem(job)]
    return [r for r in found if r is not None]


def slurm_time(seconds: float) -> str:
    """A ``--time`` value: ``HH:MM:SS``, or ``D-HH:MM:SS`` from a day up."""
    minutes = math.ceil(seconds / 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    clock = f"{hours:02d}:{mins:02d}:00"
    return f"{days}-{clock}" if days else clock


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def _time(job: FinishedJob) -> Recommendation | None:
    if job.state != "COMPLETED" or not job.time_limit_min or job.elapsed_s <= 0:
        return None
    limit = job.time_limit_min * 60
    if job.elapsed_s >= TIME_SHARE * limit or limit - job.elapsed_s < TIME_SLACK_S:
        return None
    suggested = math.ceil(job.elapsed_s * TIME_MARGIN / 900) * 900
    return Recommendation(
        "time", f"#SBATCH --time={slurm_time(suggested)}", f"--time={slurm_time(limit)}",
        f"ran {_hours(job.elapsed_s)} of the {_hours(limit)} it asked for "
        f"({job.elapsed_s / limit * 100:.0f}%)",
        waste_gpu_hours=job.gpus * (limit - job.elapsed_s) / 3600)


def _gres(gpu_type: str, count: int) -> str:
    return f"gpu:{gpu_type}:{count}" if gpu_type else f"gpu:{count}"


def _gpus(job: FinishedJob, rules: IdleRules) -> Recommendation | None:
    if job.gpus < 1 or len(job.used) < job.gpus:
        return None
    idle = [g for g in job.used if is_idle(g.busy, rules)]
    if not idle:
        return None
    used = job.gpus - len(idle)
    names = ", ".join(g.gpu for g in idle[:8]) + (" ..." if len(idle) > 8 else "")
    line = (f"#SBATCH --gres={_gres(job.gpu_type, used)}" if used else
            "no --gres=gpu line: the job did no GPU work (run it without GPUs, or end the "
            "session when the work stops)")
    return Recommendation(
        "gpus", line, f"--gres={_gres(job.gpu_type, job.gpus)}",
        f"{len(idle)} of its {job.gpus} GPUs did no work over the whole run (busy under "
        f"{percent(rules.idle_below)}: {names})",
        waste_gpu_hours=len(idle) * job.elapsed_s / 3600)


def _mig(job: FinishedJob, rules: IdleRules) -> Recommendation | None:
    profiles = MIG_PROFILES.get(job.gpu_type.lower())
    if job.gpus != 1 or len(job.used) != 1 or not profiles:
        return None
    use = job.used[0]
    activity = use.activity if use.activity is not None else use.busy
    if use.memory_peak_mib is None or is_idle(use.busy, rules):
        return None  # an idle GPU is the "gpus" case's, not a slice's
    for name, sevenths, gib in profiles:
        if activity <= sevenths / 7 and use.memory_peak_mib * MIG_HEADROOM <= gib * 1024:
            return Recommendation(
                "mig", f"#SBATCH --gres=gpu:{name}:1", f"--gres={_gres(job.gpu_type, 1)}",
                f"its one {job.gpu_type.upper()} was {activity * 100:.0f}% active with a "
                f"memory peak of {use.memory_peak_mib / 1024:.1f} GiB: a {name} slice "
                f"({sevenths}/7 of the compute, {gib:g} GB) holds it",
                waste_gpu_hours=(1 - sevenths / 7) * job.elapsed_s / 3600)
    return None


def _mem(job: FinishedJob) -> Recommendation | None:
    peak = job.mem_peak_bytes
    if peak is None or job.mem_requested_mb <= 0 or peak <= 0:
        return None
    asked_gib = job.mem_per_node_mb / 1024
    peak_gib = peak / GIB
    if asked_gib < MEM_RATIO * peak_gib or asked_gib - peak_gib < MEM_SLACK_GIB:
        return None
    suggested = math.ceil(peak_gib * MEM_MARGIN)
    where = (f"on the busiest of its {job.nodes} nodes" if job.nodes > 1 else "on its node")
    return Recommendation(
        "mem", f"#SBATCH --mem={suggested}G", f"--mem={asked_gib:.0f}G",
        f"peak CPU memory in use {peak_gib:.1f} GiB {where}, of the {asked_gib:.0f} GiB "
        "asked per node",
        waste_gib=(asked_gib - suggested) * max(1, job.nodes))


def waste_by_kind(recommendations: Sequence[Recommendation]) -> dict[str, float]:
    """GPU-hours by kind (the leads' digest)."""
    out: dict[str, float] = {}
    for r in recommendations:
        out[r.kind] = out.get(r.kind, 0.0) + r.waste_gpu_hours
    return out
