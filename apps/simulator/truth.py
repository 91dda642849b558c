"""Pathologies and security incidents planted in the workload, with their ground truth.

``plant(...)`` picks jobs, GPUs and nodes deterministically and returns ``Truth``: the
findings (what ``ground_truth.json`` lists) plus the effects the telemetry, trace and
log writers apply. Findings are chosen inside the telemetry period where they need
telemetry to be seen; without telemetry (``--telemetry-days 0``) those kinds are not
planted, and ``Truth.not_planted`` says so (as it says for any kind this run had no room
for).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from apps.simulator.cluster import GPUS_PER_NODE, Cluster
from apps.simulator.workload import IDLE_NOTEBOOKS, INPUT_STALLS, Job

HOUR = 3600

PATHOLOGY_KINDS = ("straggler_gpu", "allreduce_wait", "input_pipeline_stall", "slow_ib_link",
                   "idle_allocated_gpus", "idle_notebook", "mostly_idle_notebook",
                   "no_tensor_cores")
INCIDENT_KINDS = ("gpu_activity_without_job", "miner_in_job", "ib_traffic_without_multinode_job",
                  "secret_in_job_script", "ssh_without_allocation", "exposed_service",
                  "gpu_memory_left_after_job", "vulnerable_software")
SEVERITY = {
    "straggler_gpu": "high", "allreduce_wait": "medium", "input_pipeline_stall": "medium",
    "slow_ib_link": "high", "idle_allocated_gpus": "medium", "idle_notebook": "medium",
    "mostly_idle_notebook": "low",
    "no_tensor_cores": "low", "gpu_activity_without_job": "high", "miner_in_job": "critical",
    "ib_traffic_without_multinode_job": "medium", "secret_in_job_script": "high",
    "ssh_without_allocation": "high", "exposed_service": "critical",
    "gpu_memory_left_after_job": "medium", "vulnerable_software": "high",
}
# Share of a team's jobs of the right kind that carry its trait's pathology (workload.TRAITS)
TEAM_PATHOLOGY_SHARE = 0.8
# Kinds only telemetry shows: nothing to plant when the run writes none.
TELEMETRY_BOUND = (*PATHOLOGY_KINDS, "gpu_activity_without_job", "miner_in_job",
                   "ib_traffic_without_multinode_job", "gpu_memory_left_after_job")


@dataclass
class Finding:
    """One ground-truth entry: what, where (job/GPU/node/user/team) and when."""

    kind: str
    start: int
    end: int
    job_id: int | None = None
    node: str | None = None
    gpu: int | None = None
    uuid: str | None = None
    user: str | None = None
    team: str | None = None
    details: dict[str, object] = field(default_factory=dict)

    @property
    def category(self) -> str:
        return "pathology" if self.kind in PATHOLOGY_KINDS else "incident"

    def as_dict(self, number: int) -> dict[str, object]:
        return {"id": f"{self.category[:3]}-{number:04d}", "category": self.category,
                "kind": self.kind, "severity": SEVERITY[self.kind],
                "entity": {"job_id": self.job_id, "node": self.node, "gpu": self.gpu,
                           "uuid": self.uuid, "user": self.user, "team": self.team},
                "window": {"start": self.start, "end": self.end}, "details": self.details}


@dataclass
class NodeEffect:
    """Something the telemetry shows on a node outside (or regardless of) its jobs."""

    kind: str  # gpu_busy_no_job, fb_left, slow_ib, ib_no_job
    node: int
    start: int
    end: int
    gpu: int | None = None
    device: str | None = None


@dataclass
class Truth:
    findings: list[Finding] = field(default_factory=list)
    job_effects: dict[int, dict[str, object]] = field(default_factory=dict)
    node_effects: list[NodeEffect] = field(default_factory=list)
    ssh_intrusions: list[tuple[int, str, int]] = field(default_factory=list)  # node, user, t
    services: list[dict[str, object]] = field(default_factory=list)
    secrets: dict[int, str] = field(default_factory=dict)  # job id -> token kind
    vulnerable: dict[int, dict[str, str]] = field(default_factory=dict)  # node -> versions
    not_planted: dict[str, str] = field(default_factory=dict)  # kind -> why not


class Occupancy:
    """Which job held which GPU when: intervals per (node, gpu), sorted by start."""

    def __init__(self, jobs: list[Job], now: int) -> None:
        self.slots: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
        for job in jobs:
            if job.start is None:
                continue
            for node, gpus in job.alloc:
                for gpu in gpus:
                    self.slots.setdefault((node, gpu), []).append(
                        (job.start, job.end or now, job.job_id))
        for intervals in self.slots.values():
            intervals.sort()

    def free(self, node: int, gpu: int, start: int, end: int) -> bool:
        intervals = self.slots.get((node, gpu), [])
        i = bisect.bisect_left(intervals, (end,))
        return all(e <= start for s, e, _ in intervals[max(0, i - 8):i])

    def node_free_of(self, node: int, start: int, end: int, jobs: dict[int, Job]) -> bool:
        """No multi-node job on the node during [start, end)."""
        for gpu in range(GPUS_PER_NODE):
            for s, e, job_id in self.slots.get((node, gpu), []):
                if s < end and e > start and jobs[job_id].is_multi_node:
                    return False
        return True


def plant(cluster: Cluster, jobs: list[Job], now: int, t0: int, seed: int,
          incidents: bool = True, logs_from: int | None = None) -> Truth:
    """Choose where each pathology and incident happens.

    ``t0`` is the telemetry start (``now`` when there is none); ``logs_from`` the start of
    the sshd logs (default ``t0``). With ``incidents=False`` only the pathologies are planted
    (the same ones: they are chosen first, from the same random stream), so the month is
    healthy for security rules.
    """
    rng = random.Random(f"{seed}:truth")
    truth = Truth()
    by_id = {j.job_id: j for j in jobs}
    occupancy = Occupancy(jobs, now)
    seen = [j for j in jobs if j.start is not None and (j.end or now) - j.start >= 2 * HOUR
            and (j.end or now) > t0 + HOUR]
    planter = _Planter(cluster, rng, truth, (now, t0, t0 if logs_from is None else logs_from),
                       by_id, occupancy)
    planter.job_pathologies(seen)
    if incidents:
        planter.node_incidents()
        planter.job_incidents(seen, jobs)
    planter.infra_failures(jobs)
    truth.not_planted = _not_planted(truth, has_telemetry=t0 < now, incidents=incidents)
    return truth


def _not_planted(truth: Truth, has_telemetry: bool, incidents: bool = True) -> dict[str, str]:
    """Each kind with no finding in this run, and why (the ground truth lists them)."""
    planted = {f.kind for f in truth.findings}
    if incidents:
        planted.add("vulnerable_software")  # cluster-wide, added with the truth file

    def why(kind: str) -> str:
        if kind in INCIDENT_KINDS and not incidents:
            return "incidents are off in this run (--no-incidents)"
        if kind in TELEMETRY_BOUND and not has_telemetry:
            return "no telemetry in this run (--telemetry-days 0); only telemetry shows it"
        return "no job, node or time window in this run fits it"

    return {kind: why(kind) for kind in (*PATHOLOGY_KINDS, *INCIDENT_KINDS)
            if kind not in planted}


class _Planter:
    def __init__(self, cluster: Cluster, rng: random.Random, truth: Truth,
                 times: tuple[int, int, int], jobs: dict[int, Job],
                 occupancy: Occupancy) -> None:
        """``times``: now, the telemetry start and the sshd logs' start."""
        self.cluster, self.rng, self.truth = cluster, rng, truth
        self.now, self.t0, self.logs_from = times
        self.jobs, self.occ = jobs, occupancy
        self.taken: set[int] = set()

    def _pick(self, pool: list[Job], count: int,
              want: Callable[[Job], bool] | None = None) -> list[Job]:
        fits = [j for j in pool if j.job_id not in self.taken and (want is None or want(j))]
        picked = self.rng.sample(fits, min(count, len(fits)))
        self.taken.update(j.job_id for j in picked)
        return sorted(picked, key=lambda j: j.job_id)

    def _pick_share(self, pool: list[Job], share: float,
                    want: Callable[[Job], bool]) -> list[Job]:
        """``share`` of the jobs that fit (at least one when any does)."""
        fits = sum(1 for j in pool if j.job_id not in self.taken and want(j))
        return self._pick(pool, max(1, round(share * fits)) if fits else 0, want)

    def _finding(self, kind: str, job: Job | None = None, node: int | None = None,
                 gpu: int | None = None, start: int = 0, end: int = 0, **details: object) -> None:
        if job is not None:
            start = start or max(job.start or 0, self.t0)
            end = end or job.end or self.now
            job.pathologies.append(kind)
        n = self.cluster.nodes[node] if node is not None else None
        self.truth.findings.append(Finding(
            kind, start, end, job.job_id if job else None, n.name if n else None, gpu,
            n.gpu_uuids[gpu] if n is not None and gpu is not None else None,
            job.user if job else details.pop("user", None),  # type: ignore[arg-type]
            job.account if job else details.pop("team", None),  # type: ignore[arg-type]
            dict(details)))

    def _effect(self, job: Job, **values: object) -> None:
        self.truth.job_effects.setdefault(job.job_id, {}).update(values)

    # --- Pathologies -----------------------------------------------------------------

    def job_pathologies(self, seen: list[Job]) -> None:
        if self.t0 >= self.now:  # no telemetry: every pathology is seen only there
            return

        def profiled(job: Job) -> bool:
            """On nodes whose exporters show SM activity and the job (``hpc_job``): where
            the signatures of a straggler or a stalled input pipeline are told apart."""
            return all(self.cluster.nodes[n].group.profiling
                       and self.cluster.nodes[n].group.job_mapping for n in job.nodes_used)

        def trains(job: Job) -> bool:
            return job.gpus >= 4 and job.kind in ("train", "train1", "finetune") and \
                profiled(job)

        for i, job in enumerate(self._pick(seen, 3, trains)):
            # AMD's exporter writes no XIDs: a straggler there is a thermal one
            self._straggler(job, "xid" if i == 2 and not self._on_amd(job) else "thermal")
        if any(n.group.exporter == "amd" for n in self.cluster.nodes):
            # an MI300X partition shows one too (the demo's AMD straggler)
            for job in self._pick(seen, 1, lambda j: trains(j) and self._on_amd(j)):
                self._straggler(job, "thermal")
        stalls = self._pick_share(seen, TEAM_PATHOLOGY_SHARE, lambda j: j.account ==
                                  INPUT_STALLS and j.kind in ("train", "train1", "finetune")
                                  and profiled(j))
        for i, job in enumerate(stalls):
            # Most stalls decode audio on pegged CPUs; every third (from the second) reads
            # the raw corpus from an overloaded NFS server, its CPUs idle (the job page's
            # two readings of an input stall).
            storage = i % 3 == 1
            self._effect(job, profile="input_stall_io" if storage else "input_stall")
            self._finding("input_pipeline_stall", job, gpu_util=87, sm_active=0.19,
                          bottleneck="storage" if storage else "cpu")
        for job in self._pick(seen, 2, lambda j: j.gpus >= 4 and j.kind != "notebook"):
            idle = [(n, g) for n, gpus in job.alloc for g in gpus[len(gpus) // 2:]]
            self._effect(job, idle_gpus=idle)
            self._finding("idle_allocated_gpus", job, idle_gpus=len(idle), allocated=job.gpus)
        for job in self._pick_share(seen, TEAM_PATHOLOGY_SHARE, lambda j: j.account ==
                                    IDLE_NOTEBOOKS and j.kind == "notebook"
                                    and (j.end or self.now) - (j.start or 0) >= 24 * HOUR):
            self._effect(job, profile="idle_notebook")
            days = round(((job.end or self.now) - (job.start or 0)) / 86400, 1)
            self._finding("idle_notebook", job, held_days=days)
        for job in self._pick(seen, 2, lambda j: j.kind in ("train1", "finetune")):
            self._effect(job, profile="no_tensor")
            self._finding("no_tensor_cores", job, tensor_active=0.0)
        self._slow_ib()

    def _on_amd(self, job: Job) -> bool:
        return all(self.cluster.nodes[n].group.exporter == "amd" for n in job.nodes_used)

    def _straggler(self, job: Job, cause: str) -> None:
        """One GPU of ``job`` slows every step: too hot (clocks down) or failing (XID)."""
        node, gpus = job.alloc[-1]
        gpu = self.rng.choice(gpus)
        self._effect(job, straggler=(node, gpu, cause))
        self._finding("straggler_gpu", job, node, gpu, cause=cause,
                      signal="SM clock low, temperature high, throttle reasons thermal"
                      if cause == "thermal" else "XID 63 on one GPU, lower SM activity")
        self._finding("allreduce_wait", job, node=None,
                      waiting_gpus=job.gpus - 1, straggler_node=self.cluster.nodes[node].name,
                      straggler_gpu=gpu)

    def _slow_ib(self) -> None:
        gpu_nodes = self.cluster.partition("gpu").node_indices
        node = gpu_nodes[len(gpu_nodes) // 2]
        start, end = self.t0, self.now
        self.truth.node_effects.append(NodeEffect("slow_ib", node, start, end, device="mlx5_1"))
        self._finding("slow_ib_link", node=node, start=start, end=end, device="mlx5_1", port=1,
                      rate_gbps=100, expected_gbps=400)

    # --- Incidents ---------------------------------------------------------------------

    def node_incidents(self) -> None:
        mapped = [n.index for n in self.cluster.nodes if n.group.job_mapping]
        slot = self._free_slot(mapped, 3 * HOUR)
        if slot:
            node, gpu, start = slot
            self.truth.node_effects.append(NodeEffect("gpu_busy_no_job", node, start,
                                                      start + 3 * HOUR, gpu=gpu))
            self._finding("gpu_activity_without_job", node=node, gpu=gpu, start=start,
                          end=start + 3 * HOUR, gpu_util=97, fb_used_mib=24000)
        window = self._ib_window(mapped)
        if window:
            node, start = window
            self.truth.node_effects.append(NodeEffect("ib_no_job", node, start, start + 2 * HOUR,
                                                      device="mlx5_0"))
            self._finding("ib_traffic_without_multinode_job", node=node, start=start,
                          end=start + 2 * HOUR, device="mlx5_0", gbytes_per_s=9.5)
        self._vulnerable()

    def _free_slot(self, nodes: list[int], length: int) -> tuple[int, int, int] | None:
        if self.now - self.t0 < length:  # the telemetry is shorter than the incident
            return None
        for _ in range(400):
            start = self.rng.randrange(self.t0, max(self.t0 + 1, self.now - length))
            start -= start % 300
            node, gpu = self.rng.choice(nodes), self.rng.randrange(GPUS_PER_NODE)
            if self.occ.free(node, gpu, start - HOUR, start + length + HOUR):
                return node, gpu, start
        return None

    def _ib_window(self, nodes: list[int]) -> tuple[int, int] | None:
        if self.now - self.t0 < 2 * HOUR:
            return None
        for _ in range(200):
            start = self.rng.randrange(self.t0, max(self.t0 + 1, self.now - 2 * HOUR))
            start -= start % 300
            node = self.rng.choice(nodes)
            if self.occ.node_free_of(node, start - HOUR, start + 3 * HOUR, self.jobs):
                return node, start
        return None

    def _vulnerable(self) -> None:
        count = len(self.cluster.nodes)
        plan = {0: {"nvidia_container_toolkit": "1.16.1", "cve": "CVE-2024-0132"},
                count // 2: {"pytorch": "2.5.1", "cve": "CVE-2025-32434"},
                count - 1: {"nvidia_container_toolkit": "1.17.7", "cve": "CVE-2025-23266"}}
        for node, versions in plan.items():
            self.truth.vulnerable[node] = {k: v for k, v in versions.items() if k != "cve"}
            software, version = next((k, v) for k, v in versions.items() if k != "cve")
            self._finding("vulnerable_software", node=node, start=self.t0, end=self.now,
                          software=software, version=version, cve=versions["cve"])

    def job_incidents(self, seen: list[Job], jobs: list[Job]) -> None:
        for job in self._pick(seen, 1, lambda j: j.kind in ("inference", "finetune")
                              and j.gpus <= 4 and not j.is_multi_node):
            self._effect(job, profile="miner")
            self._finding("miner_in_job", job, gpu_util=100, tensor_active=0.0,
                          egress_mbytes_per_s=4)
        batch = [j for j in jobs if j.batch and j.start is not None]
        for job, token in zip(self._pick(batch, 2), ("huggingface", "github"), strict=False):
            self.truth.secrets[job.job_id] = token
            self._finding("secret_in_job_script", job, start=job.submit, end=job.submit,
                          token_kind=token, where=f"slurm/scripts/{job.job_id}.sh")
        self._ssh_intrusion(jobs)
        self._exposed_services(jobs)
        self._fb_left(jobs)

    def _ssh_intrusion(self, jobs: list[Job]) -> None:
        """A login in the sshd logs' period (not telemetry: it needs none)."""
        user = "mallory"
        if self.logs_from >= self.now:
            return
        for _ in range(200):
            t = self.rng.randrange(self.logs_from, self.now)
            node = self.rng.randrange(len(self.cluster.nodes))
            if not any(j.user == user and node in j.nodes_used and j.running_at(t)
                       for j in jobs):
                self.truth.ssh_intrusions.append((node, user, t))
                team = next(tm.account for tm in self.cluster.teams if user in tm.users)
                self._finding("ssh_without_allocation", node=node, start=t, end=t, user=user,
                              team=team, log=f"logs/sshd-{self.cluster.nodes[node].name}.log")
                return

    def _exposed_services(self, jobs: list[Job]) -> None:
        """Probes need no telemetry: any job running for 2 h or more at now."""
        running = [j for j in jobs if j.start is not None and j.end is None
                   and self.now - j.start >= 2 * HOUR]
        for job, (service, port) in zip(self._pick(running, 2),
                                        (("ray-dashboard", 8265), ("jupyter", 8888)),
                                        strict=False):
            node = job.alloc[0][0]
            self.truth.services.append({"job": job.job_id, "node": node, "service": service,
                                        "port": port, "exposed": True})
            self._finding("exposed_service", job, node=node, start=self.now - 1800,
                          end=self.now, service=service, port=port,
                          response="200 without authentication")

    def _fb_left(self, jobs: list[Job]) -> None:
        ended = [j for j in jobs if j.end and self.t0 < j.end < self.now - 4 * HOUR
                 and j.end - (j.start or j.end) >= 2 * HOUR  # its GPU's series show it
                 and not j.is_multi_node and j.job_id not in self.taken]
        self.rng.shuffle(ended)
        for job in ended[:300]:
            if not job.alloc:  # cancelled while pending: an end time, never any GPU
                continue
            node, gpus = job.alloc[0]
            gpu, ended_at = gpus[0], job.end or 0
            if self.cluster.nodes[node].group.job_mapping and self.occ.free(
                    node, gpu, ended_at + 1, ended_at + 4 * HOUR):
                end = ended_at + 3 * HOUR
                self.truth.node_effects.append(NodeEffect("fb_left", node, ended_at, end, gpu=gpu))
                self._finding("gpu_memory_left_after_job", node=node, gpu=gpu, start=ended_at,
                              end=end, user=job.user, team=job.account, after_job=job.job_id,
                              fb_used_mib=41000)
                return

    def infra_failures(self, jobs: list[Job]) -> None:
        """XID failures pick the GPU that fell off the bus (shown in telemetry)."""
        for job in jobs:
            if job.outcome == "XID" and job.alloc:
                node, gpus = job.alloc[0]
                self._effect(job, xid=(node, gpus[-1], 79))
