"""The cluster ``bench/detect_scale.py`` detects on: N GPUs (8 per node), as OpenMetrics.

Every series has the shape a real site's Prometheus holds: dcgm-exporter's names and labels
(``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``, the driver
version, ``hpc_job`` on a job's GPUs; ``instance`` and ``job`` from the scrape) and
node_exporter's (InfiniBand bytes received and transmitted on 2 devices x 2 ports, Ethernet
and IPoIB and loopback bytes both ways, per-core CPU seconds in two modes), scraped every
30 s, from 10 minutes before the detection frame (its look-back) to the window's end.

Nodes come in groups of 16 (``ROLE``): a 4-node job, nine 1-node jobs, a node shared by two
4-GPU jobs, and two free nodes (no ``hpc_job`` label, idle). Multi-node jobs move data over
InfiniBand; single-node jobs only storage traffic below the rule's baseline. Planted in the
first and the last whole group, the incidents the detection must find at every size:

- a free GPU (role 14, GPU 3) busy and holding memory: ``gpu_activity_without_job``;
- InfiniBand at 9 GB/s on a single-node job's node (role 5): ``ib_traffic_without_multinode_job``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO

SCRAPE = 30
GPUS_PER_NODE = 8
GROUP = 16
MULTI_ROLES = (0, 1, 2, 3)
SHARED_ROLE, FREE_ROLES = 13, (14, 15)
BUSY_ROLE, BUSY_GPU, IB_ROLE = 14, 3, 5
MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "550.54.15"
CPUS = 8
# family -> (low, high, scale written): job GPUs' values move between bounds (a wave)
GPU_FAMILIES = {
    "DCGM_FI_DEV_GPU_UTIL": (60, 95),
    "DCGM_FI_DEV_FB_USED": (30_000, 70_000),
    "DCGM_FI_PROF_SM_ACTIVE": (0.4, 0.8),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (0.2, 0.5),
    "DCGM_FI_DEV_POWER_USAGE": (300, 650),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": (1e9, 5e10),
    "DCGM_FI_DEV_GPU_TEMP": (40, 80),  # not read by detection: a site exports it anyway
}
FREE_VALUES = {"DCGM_FI_DEV_POWER_USAGE": 65, "DCGM_FI_DEV_GPU_TEMP": 32}
BUSY_VALUES = {"DCGM_FI_DEV_GPU_UTIL": 97, "DCGM_FI_DEV_FB_USED": 24_000,
               "DCGM_FI_PROF_SM_ACTIVE": 0.9, "DCGM_FI_DEV_POWER_USAGE": 600}
IB_MULTI, IB_SINGLE, IB_FREE, IB_PLANTED = 1.2e10, 2e8, 1e6, 9e9  # bytes/s on a node


@dataclass(frozen=True)
class Job:
    job_id: int
    hosts: tuple[str, ...]
    gpus: tuple[int, ...]  # on every host

    @property
    def label(self) -> str:
        return str(self.job_id)


@dataclass(frozen=True)
class Layout:
    """Who runs where on an ``gpus``-GPU cluster, and where the incidents are planted."""

    gpus: int

    @property
    def nodes(self) -> int:
        return self.gpus // GPUS_PER_NODE

    def host(self, node: int) -> str:
        return f"gpu{node:05d}"

    def planted_groups(self) -> tuple[int, ...]:
        whole = self.nodes // GROUP
        return tuple(sorted({0, whole - 1}))

    def expected(self) -> set[tuple[str, str, int | None]]:
        """(rule, node, GPU) of every planted incident: what detection must find."""
        found: set[tuple[str, str, int | None]] = set()
        for g in self.planted_groups():
            found.add(("gpu_activity_without_job", self.host(g * GROUP + BUSY_ROLE), BUSY_GPU))
            found.add(("ib_traffic_without_multinode_job", self.host(g * GROUP + IB_ROLE), None))
        return found

    def jobs(self) -> list[Job]:
        out = []
        for first in range(0, self.nodes, GROUP):
            base = 100_000 + first * 10
            multi = tuple(self.host(first + r) for r in MULTI_ROLES if first + r < self.nodes)
            if multi:
                out.append(Job(base, multi, tuple(range(GPUS_PER_NODE))))
            for role in range(MULTI_ROLES[-1] + 1, SHARED_ROLE):
                if first + role < self.nodes:
                    out.append(Job(base + role, (self.host(first + role),),
                                   tuple(range(GPUS_PER_NODE))))
            if first + SHARED_ROLE < self.nodes:
                host = self.host(first + SHARED_ROLE)
                out.append(Job(base + SHARED_ROLE, (host,), (0, 1, 2, 3)))
                out.append(Job(base + SHARED_ROLE + 1, (host,), (4, 5, 6, 7)))
        return out


def _wave(low: float, high: float, t: int, phase: float) -> float:
    return low + (high - low) * (0.5 + 0.45 * math.sin(t / 600 + phase))


def write(out: IO[str], layout: Layout, start: int, end: int, marker: str,
          keep: Callable[[int], bool] = lambda node: True) -> None:
    """Samples at ``start + SCRAPE, ..., end`` of every series of the nodes ``keep`` accepts
    (a store's share; every node by default), then ``marker`` at ``end``."""
    times = range(start + SCRAPE, end + 1, SCRAPE)
    owner = {(h, g): job for job in layout.jobs() for h in job.hosts for g in job.gpus}
    planted = {g * GROUP + r for g in layout.planted_groups() for r in (BUSY_ROLE, IB_ROLE)}
    for family, (low, high) in GPU_FAMILIES.items():
        out.write(f"# HELP {family} dcgm-exporter field\n# TYPE {family} gauge\n")
        for node in filter(keep, range(layout.nodes)):
            host = layout.host(node)
            for gpu in range(GPUS_PER_NODE):
                job = owner.get((host, gpu))
                labels = _gpu_labels(family, host, node, gpu, job)
                if job is not None:
                    phase = node * 0.37 + gpu
                    lines = (f"{labels} {_wave(low, high, t, phase):.4g} {t}\n" for t in times)
                else:
                    busy = node in planted and node % GROUP == BUSY_ROLE and gpu == BUSY_GPU
                    value = (BUSY_VALUES if busy else FREE_VALUES).get(family, 0)
                    lines = (f"{labels} {value} {t}\n" for t in times)
                out.write("".join(lines))
    _write_nodes(out, layout, owner, planted, times, keep)
    out.write(f"# HELP beacon_bench_dataset marker\n# TYPE beacon_bench_dataset gauge\n"
              f"{marker} 1 {end}\n# EOF\n")


def _gpu_labels(family: str, host: str, node: int, gpu: int, job: Job | None) -> str:
    uuid = f"GPU-{node:08x}-{gpu:04x}-4c1e-9a6f-{node * 8 + gpu:012x}"
    job_label = f',hpc_job="{job.label}"' if job is not None else ""
    return (f'{family}{{gpu="{gpu}",UUID="{uuid}",pci_bus_id="00000000:{0x18 + gpu * 16:02X}:00.0",'
            f'device="nvidia{gpu}",modelName="{MODEL}",Hostname="{host}",'
            f'DCGM_FI_DRIVER_VERSION="{DRIVER}"{job_label},instance="{host}:9400",'
            f'job="dcgm"}}')


def _ib_rate(layout: Layout, owner: dict[tuple[str, int], Job], planted: set[int],
             node: int) -> float:
    if node in planted and node % GROUP == IB_ROLE:
        return IB_PLANTED
    jobs = {owner[(layout.host(node), g)] for g in range(GPUS_PER_NODE)
            if (layout.host(node), g) in owner}
    if not jobs:
        return IB_FREE
    return IB_MULTI if any(len(j.hosts) > 1 for j in jobs) else IB_SINGLE


def _node_counters(layout: Layout, owner: dict[tuple[str, int], Job], planted: set[int],
                   keep: Callable[[int], bool]) -> Iterator[tuple[str, str, str, float]]:
    """(family, labels without instance, per-node key, rate per second) of each counter."""
    ib = ("node_infiniband_port_data_received_bytes", "node_infiniband_port_data_transmitted_bytes")
    for node in filter(keep, range(layout.nodes)):
        rate = _ib_rate(layout, owner, planted, node)
        for family in ib:
            for device in ("mlx5_0", "mlx5_1"):
                for port in ("1", "2"):
                    # the planted spike arrives on one port; the others carry their share
                    share = 1.0 if rate == IB_PLANTED and (device, port) == ("mlx5_0", "1") \
                        else (0.0 if rate == IB_PLANTED else 0.25)
                    yield family, f'device="{device}",port="{port}"', layout.host(node), \
                        rate * share + (IB_SINGLE / 4 if rate == IB_PLANTED else 0.0)
        for family in ("node_network_receive_bytes", "node_network_transmit_bytes"):
            for device, bps in (("eth0", 2e6), ("ib0", 5e7), ("lo", 1e5)):
                yield family, f'device="{device}"', layout.host(node), bps
        for cpu in range(CPUS):
            idle = 0.9 if rate == IB_FREE else 0.55
            yield "node_cpu_seconds", f'cpu="{cpu}",mode="idle"', layout.host(node), idle
            yield "node_cpu_seconds", f'cpu="{cpu}",mode="user"', layout.host(node), 1 - idle


def _write_nodes(out: IO[str], layout: Layout, owner: dict[tuple[str, int], Job],
                 planted: set[int], times: range, keep: Callable[[int], bool]) -> None:
    by_family: dict[str, list[tuple[str, str, float]]] = {}
    for family, labels, host, rate in _node_counters(layout, owner, planted, keep):
        by_family.setdefault(family, []).append((labels, host, rate))
    for family, series in by_family.items():
        out.write(f"# HELP {family} node_exporter\n# TYPE {family} counter\n")
        for i, (labels, host, rate) in enumerate(series):
            name = f'{family}_total{{{labels},instance="{host}:9100",job="node"}}'
            base = 1e11 + i * 1e7
            out.write("".join(f"{name} {base + rate * (t - times.start):.17g} {t}\n"
                              for t in times))
