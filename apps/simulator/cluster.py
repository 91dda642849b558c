"""The simulated cluster: nodes of 8 GPUs, exporter groups, partitions, teams and users.

Names are stable across seeds (teams, users, node names); only GPU UUIDs and the
workload depend on the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

GPUS_PER_NODE = 8


@dataclass(frozen=True)
class GpuModel:
    """One GPU model as its exporter and Slurm name it."""

    gres: str  # Slurm gres type (gpu:h100)
    model_name: str  # dcgm-exporter modelName label (AMD's card_model)
    fb_total_mib: int
    power_max_w: int
    sm_clock_max_mhz: int  # the SM clock; the GFX clock on AMD


GPU_MODELS = {
    "h100": GpuModel("h100", "NVIDIA H100 80GB HBM3", 81559, 700, 1980),
    "h200": GpuModel("h200", "NVIDIA H200", 143771, 700, 1980),
    "a100": GpuModel("a100", "NVIDIA A100-SXM4-80GB", 81920, 400, 1410),
    "mi300x": GpuModel("mi300x", "AMD Instinct MI300X", 196592, 750, 2100),
}


@dataclass(frozen=True)
class ExporterGroup:
    """How one group of nodes runs its GPU exporter.

    ``profiling`` False means dcgm-exporter's default counters only (no SM_ACTIVE,
    SM_OCCUPANCY or NVLink bytes); ``job_mapping`` False means no ``hpc_job`` label ever.
    ``exporter`` is ``dcgm`` or ``amd`` (AMD's Device Metrics Exporter with its profiler
    fields and Slurm integration: ``job_id`` labels; no XIDs, no throttle bitmask).
    """

    name: str
    hostname_label: str
    profiling: bool
    job_mapping: bool
    exporter: str = "dcgm"


GROUPS = {
    "full": ExporterGroup("full", "Hostname", True, True),
    "newer": ExporterGroup("newer", "hostname", True, True),
    "default-counters": ExporterGroup("default-counters", "Hostname", False, True),
    "no-job-map": ExporterGroup("no-job-map", "Hostname", True, False),
    "amd": ExporterGroup("amd", "hostname", True, True, "amd"),
}
AMD_PARTITION = "mi300x"


@dataclass(frozen=True)
class Node:
    """A compute node; ``index`` is its position in ``Cluster.nodes``."""

    index: int
    name: str
    gpu_type: str
    group: ExporterGroup
    partitions: tuple[str, ...]
    gpu_uuids: tuple[str, ...]
    cpus: int = 96
    memory_mb: int = 1_024_000
    ib_devices: tuple[str, ...] = ("mlx5_0", "mlx5_1")

    @property
    def model(self) -> GpuModel:
        return GPU_MODELS[self.gpu_type]


@dataclass(frozen=True)
class Partition:
    name: str
    node_indices: tuple[int, ...]
    max_time_min: int
    default: bool = False


@dataclass(frozen=True)
class Team:
    """A team is a Slurm account; ``share`` is its fairshare weight."""

    account: str
    description: str
    share: int
    lead: str
    members: tuple[str, ...]

    @property
    def users(self) -> tuple[str, ...]:
        return (self.lead, *self.members)


TEAMS = (
    Team("nlp", "NLP team", 35, "alice", ("bob", "grace", "heidi")),
    Team("vision", "Vision team", 25, "dave", ("carol", "ivan")),
    Team("speech", "Speech team", 15, "frank", ("erin", "judy")),
    Team("multimodal", "Multimodal team", 15, "kate", ("leo", "mallory")),
    Team("robotics", "Robotics team", 10, "nina", ("oscar", "peggy")),
)
ADMINS = ("root", "slurmadm")


@dataclass(frozen=True)
class Cluster:
    name: str
    nodes: tuple[Node, ...]
    partitions: tuple[Partition, ...]
    teams: tuple[Team, ...]

    def partition(self, name: str) -> Partition:
        return next(p for p in self.partitions if p.name == name)

    def team_of(self, account: str) -> Team:
        return next(t for t in self.teams if t.account == account)

    @property
    def users(self) -> tuple[str, ...]:
        return tuple(u for t in self.teams for u in t.users)

    def uid(self, user: str) -> int:
        return 2000 + self.users.index(user)


def _layout(count: int) -> list[tuple[str, str]]:
    """(gpu type, exporter group) per node: H100 first, then a quarter H200, a quarter A100.

    From 4 nodes up every group has a node, so small test runs still exercise the
    lowercase ``hostname``, default-counters and no-job-mapping cases.
    """
    h200 = count // 4 if count >= 4 else 0
    a100 = max(2, count // 4) if count >= 4 else count // 2
    h100 = count - h200 - a100
    default_counters = (a100 + 1) // 2
    return ([("h100", "full")] * h100 + [("h200", "newer")] * h200
            + [("a100", "default-counters")] * default_counters
            + [("a100", "no-job-map")] * (a100 - default_counters))


def build_cluster(name: str, node_count: int, seed: int, amd_nodes: int = 0) -> Cluster:
    """Build the cluster; GPU UUIDs come from the seed, everything else is fixed.

    ``amd_nodes`` MI300X nodes (``mi01``...) follow, in a partition of their own; their
    UUIDs come from a stream of their own, so the NVIDIA nodes are the same with or
    without them.
    """
    rng = random.Random(f"{seed}:cluster")
    layout = _layout(node_count)
    width = max(2, len(str(node_count)))
    nodes = []
    for i, (gpu_type, group) in enumerate(layout):
        parts = ("gpu",) if gpu_type != "a100" else ("a100", "interactive")
        uuids = tuple(_uuid(rng) for _ in range(GPUS_PER_NODE))
        nodes.append(Node(i, f"gpu{i + 1:0{width}d}", gpu_type, GROUPS[group], parts, uuids))
    if not any("a100" in n.partitions for n in nodes):  # tiny clusters: one shared pool
        nodes = [Node(n.index, n.name, n.gpu_type, n.group, ("gpu", "a100", "interactive"),
                      n.gpu_uuids) for n in nodes]
    amd = random.Random(f"{seed}:amd")
    base = len(nodes)
    nodes += [Node(base + k, f"mi{k + 1:02d}", "mi300x", GROUPS["amd"], (AMD_PARTITION,),
                   tuple(_uuid(amd).removeprefix("GPU-") for _ in range(GPUS_PER_NODE)))
              for k in range(amd_nodes)]
    limits = (("gpu", 2 * 1440), ("a100", 2 * 1440), ("interactive", 7 * 1440),
              *(((AMD_PARTITION, 2 * 1440),) if amd_nodes else ()))
    partitions = tuple(
        Partition(p, tuple(n.index for n in nodes if p in n.partitions), limit, p == "gpu")
        for p, limit in limits)
    return Cluster(name, tuple(nodes), partitions, TEAMS)


def _uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
