"""A month of job submissions: what each team runs, when, and how each job is meant to end.

Every job is drawn at submission (kind, size, planned run time and planned outcome);
``apps.simulator.schedule`` then places them. Teams are not alike on purpose: each has
its own mix of work and one trait the month makes it suffer from (``TRAITS``, listed in
``ground_truth.json`` under ``teams``), so the portal's scorecards and statements have
something true to find:

- ``robotics`` submits hyperparameter sweeps in bursts into the crowded ``gpu`` partition
  (unthrottled arrays of one-GPU tasks, each burst hours of the whole partition); its
  fairshare drops and its tasks wait behind everyone else's: queue contention;
- ``vision`` has a ``GrpTRES gres/gpu`` limit (``gpu_limit``) and waits with
  ``AssocGrpGRES`` whenever its running jobs hold it: waits on its own limits;
- ``multimodal`` keeps notebooks open for days, mostly idle (planted ``idle_notebook``);
- ``speech`` decodes audio on too few CPU workers, and some runs read the raw corpus from an
  overloaded NFS server: its training and fine-tuning stall on input (planted
  ``input_pipeline_stall``, with its ``bottleneck``: ``cpu`` or ``storage``).

Every team also has dependency chains (an evaluation submitted with
``--dependency=afterok`` on its training run), evaluation arrays throttled to a few tasks at a
time (``--array=0-N%k``; CONTENTION's sweeps are not), and a few jobs submitted held
(``sbatch -H``) and released by hand later.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, field

from apps.simulator.cluster import AMD_PARTITION, GPUS_PER_NODE, Cluster, Team

DAY = 86400
HALF_LIFE = 7 * DAY  # PriorityDecayHalfLife=7-0
TARGET_LOAD = 0.45  # steady demand, as a share of each partition's GPU-hours

# --- The teams' traits ---------------------------------------------------------------------

CONTENTION, GPU_LIMITED, IDLE_NOTEBOOKS, INPUT_STALLS = (
    "robotics", "vision", "multimodal", "speech")
TRAITS = {
    CONTENTION: ("contention", "submits hyperparameter sweeps in bursts into the crowded "
                 "gpu partition; fairshare then puts its tasks behind everyone else's"),
    GPU_LIMITED: ("gpu_limit", "a GrpTRES gres/gpu limit: its jobs wait with AssocGrpGRES "
                  "while its running jobs hold it"),
    IDLE_NOTEBOOKS: ("idle_notebooks", "keeps notebooks open for days, mostly idle"),
    INPUT_STALLS: ("input_stalls", "decodes audio on too few CPU workers: its training and "
                   "fine-tuning stall on input"),
}
# Each team's work by kind: weights multiplied by its fairshare weight when a job's team
# is drawn (nlp pretrains big models, speech trains on one node, multimodal explores).
MIX = {
    "nlp": {"train": 1.4, "train1": 0.8, "finetune": 1.2, "inference": 1.3, "notebook": 0.3,
            "eval": 1.0},
    "vision": {"train": 1.0, "train1": 1.0, "finetune": 1.0, "inference": 1.0,
               "notebook": 0.3, "eval": 1.2},
    "speech": {"train": 0.5, "train1": 1.8, "finetune": 1.5, "inference": 0.8,
               "notebook": 0.3, "eval": 1.0},
    "multimodal": {"train": 0.4, "train1": 0.5, "finetune": 0.6, "inference": 0.6,
                   "notebook": 4.0, "eval": 0.6},
    "robotics": {"train": 0.8, "train1": 1.0, "finetune": 1.0, "inference": 0.8,
                 "notebook": 0.3, "eval": 1.0},
}
NOTEBOOK_DAYS_HOURS = 72.0  # IDLE_NOTEBOOKS' notebooks: held for days (others: 30 h)
# ... and by partition: speech trains on the H100/H200 partition, seldom on the A100s
PARTITIONS = {INPUT_STALLS: {"a100": 0.4}}
BURST_PARTITION = "gpu"
BURSTS_PER_DAY = 0.35  # about two and a half a week
BURST_PARTITION_HOURS = 6.0  # each burst asks for about 6 h of the whole partition
BURST_TASK_HOURS = 2.0
BURST_TASK_LIMIT_MIN = 240
BURST_MAX_TASKS = 128  # a sweep tries so many configurations, however big the partition
DEPENDENT_SHARE = 0.3  # training and fine-tuning runs followed by an evaluation (afterok)
HELD_SHARE = 0.03  # jobs submitted held and released by hand
ARRAY_THROTTLES = (2, 3, 4)  # evaluation arrays run a few tasks at a time (--array=0-N%k)
BIG_PARTITION_GPUS = 64  # below this, multi-node training runs less: its load share scales
TRAIN_POW = 3.0  # by (partition GPUs / BIG_PARTITION_GPUS) ** TRAIN_POW (a 2-node partition: 1/64)
LIMIT_SHARE = 0.25  # GPU_LIMITED's GrpTRES: this share of the cluster's GPUs, whole nodes


@dataclass(slots=True)
class Job:
    """One Slurm job record (an array task or het component is a job of its own).

    ``eligible`` is when Slurm let it compete for resources (submission; a dependency's
    end; the release of a hold; a free slot of its throttled array), None while it never
    was. ``reason`` is the live pending
    reason (squeue), ``wait_reason`` the last one that was not plain priority or resources
    (slurmdbd's ``state_reason_prev_db``: what ``sacct``'s ``state.reason`` says).
    """

    job_id: int
    name: str
    kind: str
    user: str
    account: str
    partition: str
    qos: str
    submit: int
    time_limit_min: int
    gpus: int
    nodes_wanted: int
    planned_run: int
    outcome: str
    exit_code: int = 0
    signal: int = 0
    array_job_id: int = 0
    array_task_id: int | None = None
    array_spec: str = ""  # sbatch --array, e.g. 0-11%4
    array_limit: int = 0  # the %N throttle: at most N tasks running (0: none)
    het_job_id: int = 0
    het_offset: int | None = None
    batch: bool = True
    start: int | None = None
    end: int | None = None
    state: str = "PENDING"
    reason: str = "None"
    wait_reason: str = "None"
    eligible: int | None = None
    after: int = 0  # --dependency=afterok:<job id>
    hold_until: int | None = None  # submitted held (sbatch -H), released then
    burst: bool = False  # one task of CONTENTION's sweeps
    alloc: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)
    priority: int = 0
    backfilled: bool = False
    pathologies: list[str] = field(default_factory=list)
    secret: str | None = None  # planted token kind, if any

    @property
    def nodes_used(self) -> list[int]:
        return [n for n, _ in self.alloc]

    @property
    def is_multi_node(self) -> bool:
        return len(self.alloc) > 1

    @property
    def cpus(self) -> int:
        return max(4, self.gpus * 12)

    @property
    def memory_mb(self) -> int:
        """Slurm's TRES mem: the whole allocation (``--mem`` per node x the nodes)."""
        return max(32_000, self.gpus * 120_000)

    @property
    def rss_share(self) -> float:
        """The share of its per-node memory request the job's processes peak at: 15-55 %,
        by job (a hash of its id, so no random draw of the run moves). One figure for
        sacct's MaxRSS and the node's memory in use, so right-sizing reads a job's own
        peak (issue 26: every whole-node job read the same 344 GiB)."""
        return 0.15 + 0.40 * ((self.job_id * 2654435761) % 997) / 996

    def rss_per_node_bytes(self) -> int:
        """Peak resident memory on each of its nodes; a job the OOM killer stopped was just
        under its limit (cgroup accounting samples the peak before the kill)."""
        per_node = self.memory_mb * 2**20 // max(1, len(self.alloc))
        if self.state == "OUT_OF_MEMORY":
            return per_node * 97 // 100
        return int(per_node * self.rss_share)

    def gpus_on(self, node: int) -> int:
        """How many of its GPUs the job holds on ``node``."""
        return sum(len(gpus) for n, gpus in self.alloc if n == node)

    def running_at(self, t: int) -> bool:
        return self.start is not None and self.start <= t and (self.end is None or t < self.end)


@dataclass(frozen=True)
class NodeOutage:
    node: int
    start: int
    end: int  # may lie after "now": the node is down at the end of the run
    reason: str


DEBUG_SHARE = 0.03  # short test runs: few GPU-hours, many jobs (as on real clusters)
# kind: (GPU choices, mean hours, time limit min, batch)
KINDS: dict[str, tuple[tuple[int, ...], float, int, bool]] = {
    "train": ((16, 32, 64, 128, 256), 14.0, 2880, True),
    "train1": ((8,), 9.0, 1440, True),
    "finetune": ((1, 2, 4, 8), 5.0, 720, True),
    "inference": ((1, 2, 4), 10.0, 1440, True),
    "notebook": ((1, 1, 2), 30.0, 7 * 1440, False),
    "eval": ((1, 2), 3.0, 360, True),
    "debug": ((1, 1, 2), 0.3, 60, True),
}
# Share of each partition's GPU-hours per kind (a100 and interactive share nodes).
LOAD = {
    "gpu": {"train": 0.55, "train1": 0.15, "finetune": 0.20, "eval": 0.10, "debug": DEBUG_SHARE},
    "a100": {"inference": 0.30, "finetune": 0.20, "eval": 0.12, "debug": DEBUG_SHARE},
    "interactive": {"notebook": 0.20},
}
# The MI300X partition, where the cluster has one (SimConfig.amd_nodes): training and
# fine-tuning, as on the H100s.
AMD_LOAD = {AMD_PARTITION: {"train": 0.35, "train1": 0.30, "finetune": 0.20, "eval": 0.10,
                            "debug": DEBUG_SHARE}}
NAMES = {
    "train": ("llm-pretrain", "ddp-train", "moe-pretrain", "vit-pretrain"),
    "train1": ("ddp-train", "asr-train", "diffusion-train"),
    "finetune": ("finetune", "lora-ft", "sft", "dpo"),
    "inference": ("serve-vllm", "batch-infer", "embed"),
    "notebook": ("jupyter", "notebook", "interactive"),
    "eval": ("eval-sweep", "hp-sweep", "bench-eval"),
    "debug": ("debug", "smoke-test", "nccl-test"),
}


@functools.cache
def gpu_limit(cluster: Cluster) -> int:
    """GPU_LIMITED's ``GrpTRES=gres/gpu``: LIMIT_SHARE of the cluster's GPUs, in whole nodes
    (at least one). The team never submits a job bigger than its limit (it would never
    start)."""
    total = len(cluster.nodes) * GPUS_PER_NODE
    return max(GPUS_PER_NODE, math.ceil(LIMIT_SHARE * total / GPUS_PER_NODE) * GPUS_PER_NODE)


def submissions(cluster: Cluster, start: int, now: int, rng: random.Random) -> list[Job]:
    """Every job submitted in [start, now), in submission (and job id) order."""
    drafts: list[tuple[int, str, str]] = []
    names = {p.name for p in cluster.partitions}
    load = {**LOAD, **{p: kinds for p, kinds in AMD_LOAD.items() if p in names}}
    for partition, kinds in load.items():
        nodes = cluster.partition(partition).node_indices
        capacity_gpu_h = len(nodes) * GPUS_PER_NODE * (now - start) / 3600
        for kind, share in kinds.items():
            if kind == "train":  # a small partition runs few jobs that fill half of it
                share *= min(1.0, len(nodes) * GPUS_PER_NODE / BIG_PARTITION_GPUS) ** TRAIN_POW
            mean_gpu_h = _mean_gpu_hours(cluster, kind, partition)
            count = _poisson(rng, share * TARGET_LOAD * capacity_gpu_h / mean_gpu_h)
            drafts += [(rng.randrange(start, now), kind, partition) for _ in range(count)]
    drafts += [(t, "burst", BURST_PARTITION) for t in _burst_times(start, now, rng)]
    drafts.sort()
    jobs: list[Job] = []
    for submit, kind, partition in drafts:
        next_id = 1000 + len(jobs)
        if kind == "burst":
            jobs += _burst(cluster, partition, submit, next_id, rng)
        else:
            jobs += _make(cluster, kind, partition, submit, next_id, rng)
    return jobs


def _burst_times(start: int, now: int, rng: random.Random) -> list[int]:
    """About BURSTS_PER_DAY sweeps a day, spread out (one every few days), none in the
    last 6 h; a month of a day or more always has one."""
    gap = DAY / BURSTS_PER_DAY
    times, t = [], start + int(rng.uniform(0.1, 0.6) * min(gap, now - start))
    while t < now - 6 * 3600:
        times.append(t)
        t += int(gap * rng.uniform(0.6, 1.4))
    return times


def _burst(cluster: Cluster, partition: str, submit: int, job_id: int,
           rng: random.Random) -> list[Job]:
    """One sweep of CONTENTION: an unthrottled array of short fine-tunes asking for
    BURST_PARTITION_HOURS of the partition."""
    team = cluster.team_of(CONTENTION)
    gpus = 1  # one-GPU tasks: many, short, unthrottled
    room = len(cluster.partition(partition).node_indices) * GPUS_PER_NODE
    tasks = round(BURST_PARTITION_HOURS * room / (gpus * BURST_TASK_HOURS))
    tasks = min(BURST_MAX_TASKS, max(4, tasks))
    made = _array(team, "finetune", "hp-sweep", partition, "normal", submit, job_id, gpus,
                  tasks, rng, throttle=0, mean_h=BURST_TASK_HOURS)
    for job in made:  # sweep tasks ask for a short time limit (--time=4:00:00)
        job.burst, job.time_limit_min = True, BURST_TASK_LIMIT_MIN
        job.planned_run = (BURST_TASK_LIMIT_MIN * 60 if job.outcome == "TIMEOUT" else
                           min(job.planned_run, int(BURST_TASK_LIMIT_MIN * 60 * 0.97)))
    return made


def _sizes(cluster: Cluster, kind: str, partition: str) -> tuple[int, ...]:
    choices = KINDS[kind][0]
    room = len(cluster.partition(partition).node_indices) * GPUS_PER_NODE
    if kind == "train":  # leave room for two big jobs side by side
        fits = tuple(g for g in choices if g <= max(16, room // 2) and g <= room)
        return fits or (min(room, 8),)
    if partition not in ("gpu", AMD_PARTITION):  # whole-node jobs go where the big GPUs are
        choices = tuple(g for g in choices if g < GPUS_PER_NODE) or choices
    return tuple(g for g in choices if g <= room) or (1,)


def _mean_gpu_hours(cluster: Cluster, kind: str, partition: str) -> float:
    sizes = _sizes(cluster, kind, partition)
    tasks = 8 if kind == "eval" else 1
    return sum(sizes) / len(sizes) * KINDS[kind][1] * tasks


def _team_for(cluster: Cluster, kind: str, partition: str, rng: random.Random) -> Team:
    weights = [t.share * MIX.get(t.account, {}).get(kind, 1.0)
               * PARTITIONS.get(t.account, {}).get(partition, 1.0) for t in cluster.teams]
    return rng.choices(cluster.teams, weights=weights)[0]


def _make(cluster: Cluster, kind: str, partition: str, submit: int, job_id: int,
          rng: random.Random) -> list[Job]:
    """One submission: a job, an evaluation array, or a training run and its evaluation."""
    team = _team_for(cluster, kind, partition, rng)
    name = rng.choice(NAMES[kind])
    qos = rng.choices(("normal", "high", "low"), weights=(80, 8, 12))[0]
    sizes = _sizes(cluster, kind, partition)
    if team.account == GPU_LIMITED:
        sizes = tuple(g for g in sizes if g <= gpu_limit(cluster)) or (1,)
    gpus = rng.choice(sizes)
    if kind == "eval":
        return _array(team, kind, name, partition, qos, submit, job_id, gpus,
                      rng.randint(4, 12), rng, throttle=rng.choice(ARRAY_THROTTLES))
    held_for_days = kind == "notebook" and team.account == IDLE_NOTEBOOKS
    job = _job(kind, name, rng.choice(team.users), team.account, partition, qos, submit,
               gpus, rng, job_id=job_id, mean_h=NOTEBOOK_DAYS_HOURS if held_for_days else None)
    if kind in ("train", "train1", "finetune") and rng.random() < DEPENDENT_SHARE:
        evaluation = _job("eval", "eval-ckpt", job.user, job.account, partition, qos, submit,
                          rng.choice(_sizes(cluster, "eval", partition)), rng,
                          job_id=job_id + 1)
        evaluation.after = job.job_id
        return [job, evaluation]
    if job.batch and rng.random() < HELD_SHARE:
        job.hold_until = submit + int(min(3 * DAY, max(600.0, rng.lognormvariate(
            math.log(2 * 3600), 1.0))))
    return [job]


def _array(team: Team, kind: str, name: str, partition: str, qos: str, submit: int,
           job_id: int, gpus: int, tasks: int, rng: random.Random, throttle: int,
           mean_h: float | None = None) -> list[Job]:
    """Array tasks (``--array=0-N%throttle``): the last one to start takes the array's own
    raw id."""
    user = rng.choice(team.users)
    spec = f"0-{tasks - 1}" + (f"%{throttle}" if throttle else "")
    made = [_job(kind, name, user, team.account, partition, qos, submit, gpus, rng,
                 job_id=job_id + i + 1 if i < tasks - 1 else job_id, array=(job_id, i),
                 mean_h=mean_h) for i in range(tasks)]
    for job in made:
        job.array_spec, job.array_limit = spec, throttle
    return made


def _job(kind: str, name: str, user: str, account: str, partition: str, qos: str,
         submit: int, gpus: int, rng: random.Random, job_id: int,
         array: tuple[int, int] | None = None, mean_h: float | None = None) -> Job:
    _, kind_mean_h, limit, batch = KINDS[kind]
    median = math.log((mean_h or kind_mean_h) * 3600)
    run = int(min(limit * 60 * 0.97, max(300.0, rng.lognormvariate(median, 0.7))))
    job = Job(job_id, name, kind, user, account, partition, qos, submit, limit, gpus,
              max(1, gpus // GPUS_PER_NODE), run, "COMPLETED", batch=batch)
    if array:
        job.array_job_id, job.array_task_id = array
    _plan_outcome(job, rng)
    return job


def _plan_outcome(job: Job, rng: random.Random) -> None:
    """Pick the final state and exit code; the run time shrinks for early ends."""
    if job.kind == "notebook":
        weights = {"CANCELLED": 60, "TIMEOUT": 25, "COMPLETED": 15}
    else:
        weights = {"COMPLETED": 72, "FAILED": 8, "OUT_OF_MEMORY": 3, "CANCELLED": 6,
                   "CANCELLED_PENDING": 2, "TIMEOUT": 4,
                   "PREEMPTED": 3 if job.qos == "low" else 0, "XID": 2 if job.gpus >= 8 else 0}
    outcome = rng.choices(list(weights), weights=list(weights.values()))[0]
    if outcome == "FAILED":
        job.exit_code = rng.choice((1, 1, 2, 3, 127))
        job.planned_run = max(30, int(job.planned_run * rng.uniform(0.001, 0.4)))
    elif outcome == "OUT_OF_MEMORY":
        job.signal = 125
        job.planned_run = max(60, int(job.planned_run * rng.uniform(0.01, 0.3)))
    elif outcome in ("CANCELLED", "PREEMPTED"):
        job.signal = 15 if outcome == "CANCELLED" else 0
        job.planned_run = max(60, int(job.planned_run * rng.uniform(0.05, 0.9)))
    elif outcome == "TIMEOUT":
        job.planned_run = job.time_limit_min * 60
    elif outcome == "XID":  # NCCL aborts after the GPU falls off the bus: exit 1
        job.exit_code = 1
        job.planned_run = max(600, int(job.planned_run * rng.uniform(0.1, 0.8)))
    job.outcome = outcome


def outages(cluster: Cluster, start: int, now: int, rng: random.Random) -> list[NodeOutage]:
    """About one node failure every ten days, one of them still open at "now"."""
    if len(cluster.nodes) < 2:
        return []
    count = max(1, round((now - start) / (10 * DAY)))
    out = []
    for i in range(count):
        node = rng.randrange(len(cluster.nodes))
        if i == count - 1:
            begin = now - rng.randint(1800, 5 * 3600)
        else:
            begin = rng.randrange(start + (now - start) // 8, now - DAY)
        end = begin + rng.randint(2 * 3600, 10 * 3600)
        out.append(NodeOutage(node, begin, end, "Kill task failed" if i % 2 else "Not responding"))
    return out


def _poisson(rng: random.Random, mean: float) -> int:
    if mean <= 0:
        return 0
    if mean > 50:  # normal approximation is plenty here
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1
