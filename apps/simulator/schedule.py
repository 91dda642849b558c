"""The month scheduled: an event-driven Slurm-like scheduler with fairshare, an account's
GPU limit, dependencies, holds, reservations and node failures.

Priority mixes fairshare (decayed team usage against the team's share), age and QOS, as
Slurm's multifactor plugin does. Each pass walks the eligible jobs by priority:

1. a job of an account at its ``GrpTRES gres/gpu`` limit waits with ``AssocGrpGRES`` (and
   holds nothing back, as Slurm's limit check comes before resource selection);
2. a job that fits starts; multi-node jobs take whole nodes, others GPUs on one node;
3. the first job of each partition that does not fit reserves the node(s) that have room
   for it soonest (by the running jobs' time limits, as backfill plans); a lower-priority job
   may still start there if its own time limit ends before that (backfill).

Dependent jobs (``afterok``) become eligible when their parent completes, or wait with
``DependencyNeverSatisfied`` until their user cancels them; held jobs when released; the
tasks of a throttled array (``%N``) when one of its N tasks ends (``JobArrayTaskLimit``).
"""

from __future__ import annotations

import heapq
import random
from collections import defaultdict, deque

from apps.simulator.cluster import GPUS_PER_NODE, Cluster
from apps.simulator.workload import (
    DAY,
    GPU_LIMITED,
    HALF_LIFE,
    Job,
    NodeOutage,
    gpu_limit,
    outages,
    submissions,
)

SUBMIT, END, DOWN, UP, CANCEL, RELEASE = range(6)
QOS_FACTOR = {"high": 1.0, "normal": 0.1, "low": 0.0}


def generate(cluster: Cluster, start: int, now: int,
             seed: int) -> tuple[list[Job], list[NodeOutage]]:
    """Draw the submissions of [start, now) and schedule them; returns jobs and outages."""
    rng = random.Random(f"{seed}:workload")
    jobs = submissions(cluster, start, now, rng)
    down = outages(cluster, start, now, rng)
    scheduler = Scheduler(cluster, now, rng, {GPU_LIMITED: gpu_limit(cluster)})
    scheduler.run(jobs, down)
    return jobs, [scheduler.failed.get(o, o) for o in down]


class Scheduler:
    """Event-driven placement: ends, outages, submissions and releases, then a pass."""

    def __init__(self, cluster: Cluster, now: int, rng: random.Random,
                 limits: dict[str, int]) -> None:
        self.cluster = cluster
        self.now = now
        self.rng = rng
        self.limits = limits  # account -> GrpTRES gres/gpu
        self.free = [list(range(GPUS_PER_NODE)) for _ in cluster.nodes]
        self.up = [True] * len(cluster.nodes)
        self.pending: dict[int, Job] = {}  # eligible, waiting (insertion order = submission)
        self.blocked: dict[int, Job] = {}  # held, or waiting on a dependency
        self.dependents: dict[int, list[Job]] = defaultdict(list)
        self.array_open: dict[int, int] = defaultdict(int)  # tasks eligible or running
        self.array_held: dict[int, deque[Job]] = defaultdict(deque)  # over the throttle
        self.running: dict[int, Job] = {}
        self.running_gpus: dict[str, int] = defaultdict(int)
        self.limit_ends: list[dict[tuple[int, int], int]] = [{} for _ in cluster.nodes]
        self.usage: dict[str, tuple[float, int]] = {t.account: (0.0, 0) for t in cluster.teams}
        self.parts = {p.name: p.node_indices for p in cluster.partitions}
        self.failed: dict[NodeOutage, NodeOutage] = {}  # drawn -> the node that failed
        self.events: list[tuple[int, int, int, Job | NodeOutage]] = []
        self.seq = 0

    def push(self, t: int, kind: int, payload: Job | NodeOutage) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, payload))

    def run(self, jobs: list[Job], down: list[NodeOutage]) -> None:
        for job in jobs:
            self.push(job.submit, SUBMIT, job)
        for outage in down:
            self.push(outage.start, DOWN, outage)
            self.push(outage.end, UP, outage)
        while self.events and self.events[0][0] < self.now:
            t = self.events[0][0]
            while self.events and self.events[0][0] == t:
                _, _, kind, payload = heapq.heappop(self.events)
                self._handle(t, kind, payload)
            self._schedule(t)
        self._finish_pending()

    # --- events ---------------------------------------------------------------------------

    def _handle(self, t: int, kind: int, payload: Job | NodeOutage) -> None:
        if isinstance(payload, NodeOutage):
            if kind == DOWN:
                self._fail_node(payload, t)
            else:
                self.up[self.failed[payload].node] = True
        elif kind == SUBMIT:
            self._submit(payload, t)
        elif kind == RELEASE:
            if self.blocked.pop(payload.job_id, None) is not None:
                self._eligible(payload, t)
        elif kind == END:
            if payload.job_id in self.running and payload.end == t:
                self._release(payload, t)
        elif kind == CANCEL:
            self._cancel_pending(payload, t)

    def _submit(self, job: Job, t: int) -> None:
        if job.after:
            job.reason = job.wait_reason = "Dependency"
            self.blocked[job.job_id] = job
            self.dependents[job.after].append(job)
        elif job.hold_until is not None:
            job.reason = job.wait_reason = "JobHeldUser"
            self.blocked[job.job_id] = job
            self.push(job.hold_until, RELEASE, job)
        elif job.array_limit and self.array_open[job.array_job_id] >= job.array_limit:
            job.reason = job.wait_reason = "JobArrayTaskLimit"
            self.blocked[job.job_id] = job
            self.array_held[job.array_job_id].append(job)
        else:
            self._eligible(job, t)
        if job.outcome == "CANCELLED_PENDING":
            self.push(t + self.rng.randint(300, 4 * 3600), CANCEL, job)

    def _eligible(self, job: Job, t: int) -> None:
        job.eligible = t
        job.reason = "None"
        self.pending[job.job_id] = job
        if job.array_limit:
            self.array_open[job.array_job_id] += 1

    def _task_done(self, job: Job, t: int) -> None:
        """A throttled array task left: the array's next held task becomes eligible."""
        if not job.array_limit:
            return
        self.array_open[job.array_job_id] -= 1
        waiting = self.array_held[job.array_job_id]
        while waiting:
            task = waiting.popleft()
            if self.blocked.pop(task.job_id, None) is not None:
                self._eligible(task, t)
                return

    def _cancel_pending(self, job: Job, t: int) -> None:
        """The user cancels a job that has not started (a started one ran to its end)."""
        if self.pending.pop(job.job_id, None) is not None:
            self._task_done(job, t)
        elif self.blocked.pop(job.job_id, None) is None:
            return
        job.state, job.end, job.signal = "CANCELLED", t, 15
        self._resolve_dependents(job, t)

    def _fail_node(self, drawn: NodeOutage, t: int) -> None:
        """A node fails: the drawn one if it runs a job, else the busiest node that is up
        (failures come with load), so every outage ends jobs with NODE_FAIL."""
        node = drawn.node
        busy = [len(self.limit_ends[n]) if self.up[n] else -1 for n in range(len(self.up))]
        if busy[node] <= 0 and max(busy) > 0:
            node = max(range(len(busy)), key=lambda n: (busy[n], -n))
        outage = self.failed[drawn] = NodeOutage(node, drawn.start, drawn.end, drawn.reason)
        self.up[outage.node] = False
        for job in [j for j in self.running.values() if outage.node in j.nodes_used]:
            job.state, job.end, job.exit_code, job.signal = "NODE_FAIL", t, 0, 0
            self._release(job, t)

    def _release(self, job: Job, t: int) -> None:
        del self.running[job.job_id]
        self.running_gpus[job.account] -= job.gpus
        for node, gpus in job.alloc:
            self.free[node] = sorted(self.free[node] + list(gpus))
            for g in gpus:
                del self.limit_ends[node][(job.job_id, g)]
        self._task_done(job, t)
        self._resolve_dependents(job, t)

    def _resolve_dependents(self, parent: Job, t: int) -> None:
        """afterok: eligible now if the parent completed; otherwise never, and the user
        cancels the job some hours later."""
        for job in self.dependents.pop(parent.job_id, []):
            if job.job_id not in self.blocked:
                continue
            if parent.state == "COMPLETED":
                del self.blocked[job.job_id]
                self._eligible(job, t)
            else:
                job.reason = job.wait_reason = "DependencyNeverSatisfied"
                self.push(t + self.rng.randint(1800, 12 * 3600), CANCEL, job)

    # --- priority -------------------------------------------------------------------------

    def _fairshare(self, t: int) -> dict[str, float]:
        """Slurm's classic factor 2^(-usage/share), both normalised over the teams."""
        total = sum(self._usage(a, t) for a in self.usage) or 1.0
        shares = sum(team.share for team in self.cluster.teams)
        return {team.account: 2 ** (-(self._usage(team.account, t) / total)
                                    / (team.share / shares)) for team in self.cluster.teams}

    def _priority(self, job: Job, t: int, fairshare: dict[str, float]) -> int:
        age = min(1.0, (t - job.submit) / (7 * DAY))
        return int(10000 * fairshare[job.account] + 1000 * age + 2000 * QOS_FACTOR[job.qos]
                   + 100 * job.gpus / 256)

    def _usage(self, account: str, t: int) -> float:
        value, since = self.usage[account]
        return value * 2 ** (-(t - since) / HALF_LIFE)

    # --- the pass -------------------------------------------------------------------------

    def _schedule(self, t: int) -> None:
        """One pass over the eligible jobs of the partitions with a free GPU (a job of a
        full partition can neither start nor reserve anything there)."""
        open_parts = {name for name, nodes in self.parts.items()
                      if any(self.up[n] and self.free[n] for n in nodes)}
        candidates = [j for j in self.pending.values() if j.partition in open_parts]
        if not candidates:
            return
        fairshare = self._fairshare(t)
        prio = {j.job_id: self._priority(j, t, fairshare) for j in candidates}
        ranked = sorted(candidates, key=lambda j: (-prio[j.job_id], j.submit, j.job_id))
        reserved: dict[int, int] = {}  # node -> when a blocked job starts on it
        blocked_parts: set[str] = set()
        for rank, job in enumerate(ranked):
            if self._over_limit(job):
                job.reason = job.wait_reason = "AssocGrpGRES"
                continue
            done_by = t + job.time_limit_min * 60  # backfill: done before a reservation
            nodes = [n for n in self.parts[job.partition]
                     if self.up[n] and reserved.get(n, done_by) >= done_by]
            placement = self._place(job, nodes)
            if placement is None:
                if job.partition not in blocked_parts:
                    blocked_parts.add(job.partition)
                    reserved.update(self._reservation(job, nodes, t))
                continue
            job.priority = prio[job.job_id]
            self._start(job, placement, t, backfilled=rank > 0)

    def _over_limit(self, job: Job) -> bool:
        limit = self.limits.get(job.account)
        return limit is not None and self.running_gpus[job.account] + job.gpus > limit

    def _place(self, job: Job, nodes: list[int]) -> list[tuple[int, tuple[int, ...]]] | None:
        if job.nodes_wanted > 1:
            whole = [n for n in nodes if len(self.free[n]) == GPUS_PER_NODE]
            if len(whole) < job.nodes_wanted:
                return None
            return [(n, tuple(range(GPUS_PER_NODE))) for n in whole[:job.nodes_wanted]]
        fits = [n for n in nodes if len(self.free[n]) >= job.gpus]
        if not fits:
            return None
        best = min(fits, key=lambda n: (len(self.free[n]), n))
        return [(best, tuple(self.free[best][:job.gpus]))]

    def _reservation(self, job: Job, nodes: list[int], t: int) -> dict[int, int]:
        """Where and when a blocked job will start, as backfill plans it from the running
        jobs' time limits: the node(s) that have room for it soonest."""
        def room_at(node: int) -> int:
            need = (GPUS_PER_NODE if job.nodes_wanted > 1 else job.gpus) - len(self.free[node])
            ends = sorted(self.limit_ends[node].values())
            return t if need <= 0 else ends[min(need, len(ends)) - 1]

        soonest = sorted((room_at(n), n) for n in nodes)[:job.nodes_wanted]
        start = max((when for when, _ in soonest), default=t)
        return {n: start for _, n in soonest}

    def _start(self, job: Job, placement: list[tuple[int, tuple[int, ...]]], t: int,
               backfilled: bool) -> None:
        del self.pending[job.job_id]
        job.alloc, job.start, job.backfilled, job.reason = placement, t, backfilled, "None"
        for node, gpus in placement:
            self.free[node] = [g for g in self.free[node] if g not in gpus]
        self.running[job.job_id] = job
        self.running_gpus[job.account] += job.gpus
        for node, gpus in placement:  # one entry per GPU: when its time limit frees it
            self.limit_ends[node].update(
                {(job.job_id, g): t + job.time_limit_min * 60 for g in gpus})
        value = self._usage(job.account, t) + job.gpus * job.planned_run
        self.usage[job.account] = (value, t)
        end = t + job.planned_run
        job.state = "RUNNING"
        if end < self.now:
            job.end = end
            job.state = _final_state(job.outcome)
            self.push(end, END, job)

    def _finish_pending(self) -> None:
        """Jobs waiting at "now": held and dependent ones keep their reason; an account at
        its limit waits with AssocGrpGRES; of the rest, the top one per partition waits
        for Resources, the others for Priority. Held jobs have priority 0."""
        seen: set[str] = set()
        fairshare = self._fairshare(self.now)
        for job in (*self.pending.values(), *self.blocked.values()):
            held = job.reason == "JobHeldUser"
            job.priority = 0 if held else self._priority(job, self.now, fairshare)
        for job in sorted(self.pending.values(), key=lambda j: (-j.priority, j.job_id)):
            if self._over_limit(job):
                job.reason = job.wait_reason = "AssocGrpGRES"
                continue
            job.reason = "Priority" if job.partition in seen else "Resources"
            seen.add(job.partition)
        for job in self.running.values():  # state was set to the final one at start
            if job.end is None:
                job.state = "RUNNING"


def _final_state(outcome: str) -> str:
    return {"XID": "FAILED", "CANCELLED_PENDING": "COMPLETED"}.get(outcome, outcome)
