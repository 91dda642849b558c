"""dcgm-exporter and node_exporter telemetry as OpenMetrics text, one file per 6 h window
(AMD nodes' GPUs as AMD's Device Metrics Exporter writes them: ``amd.py``).

Each window is computed with numpy for every node at once (arrays of GPUs x steps),
written family by family (each family once, with HELP and TYPE; each series' samples in
time order), terminated by ``# EOF``, then dropped: memory depends on the node count
and the step, never on the number of days. Counters (InfiniBand, network) carry their
running totals from one window to the next.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import numpy as np

from apps.simulator.amd import AmdWindow, write_amd
from apps.simulator.cluster import GPUS_PER_NODE, Cluster, Node
from apps.simulator.config import WINDOW_SECONDS
from apps.simulator.truth import PATHOLOGY_KINDS, Truth
from apps.simulator.workload import Job, NodeOutage

# (field, prometheus type, help, needs profiling, integer)
DCGM_FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", False, True),
    ("DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp "
     "assigned (in %).", True, False),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "The ratio of number of warps resident on an SM "
     "(in %).", True, False),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.",
     False, False),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is "
     "active.", False, False),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", "Ratio of cycles the device memory interface is "
     "active sending or receiving data.", False, False),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", False, True),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", False, False),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", False, True),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", False, True),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Current clock throttle reasons.", False,
     True),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", False, True),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge", "The rate of data transmitted over NVLink, not "
     "including protocol headers, in bytes per second.", True, True),
    ("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge", "The rate of data received over NVLink, not "
     "including protocol headers, in bytes per second.", True, True),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - "
     "including both protocol headers and data payloads - in bytes per second.", False, True),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - "
     "including both protocol headers and data payloads - in bytes per second.", False, True),
)
METRICS = [f[0] for f in DCGM_FIELDS]
# (family, type, help); counters are written with the _total suffix
IB_FAMILIES = (
    ("node_infiniband_port_data_received_bytes", "counter",
     "Number of data octets received on all links"),
    ("node_infiniband_port_data_transmitted_bytes", "counter",
     "Number of data octets transmitted on all links"),
    ("node_infiniband_port_packets_received", "counter", "Number of packets received on all VLs"),
    ("node_infiniband_port_packets_transmitted", "counter",
     "Number of packets transmitted on all VLs"),
    ("node_infiniband_port_transmit_wait", "counter",
     "Number of ticks during which the port had data to transmit but no data was sent"),
    ("node_infiniband_link_error_recovery", "counter",
     "Number of times the link successfully recovered from an error state"),
    ("node_infiniband_rate_bytes_per_second", "gauge", "Maximum signal transfer rate"),
)
NET_FAMILIES = (
    ("node_network_receive_bytes", "counter", "Network device statistic receive_bytes."),
    ("node_network_transmit_bytes", "counter", "Network device statistic transmit_bytes."),
)
CPU_FAMILY = ("node_cpu_seconds", "counter", "Seconds the CPUs spent in each mode.")
# node_exporter's mountstats collector: one series per NFS mount (the shared dataset store)
FS_FAMILIES = (
    ("node_mountstats_nfs_read_bytes", "counter",
     "Number of bytes read using the read() syscall."),
    ("node_mountstats_nfs_write_bytes", "counter",
     "Number of bytes written using the write() syscall."),
)
FS_MOUNT = 'export="nfs01:/datasets",mountaddr="10.10.0.5",protocol="tcp"'
# profile -> dataset bytes read per second per GPU held (the CPU-bound loader decodes
# compressed audio: it reads little and still starves the GPUs; the storage-bound one gets
# less from an overloaded server, its CPUs idle)
FS_READ = {"train": 120e6, "train1": 120e6, "finetune": 80e6, "inference": 20e6, "eval": 60e6,
           "debug": 10e6, "notebook": 5e6, "input_stall": 35e6, "input_stall_io": 12e6,
           "no_tensor": 100e6}
FS_WRITE_SHARE = 0.05  # checkpoints and logs, against the reads
MEMORY_FAMILIES = (
    ("node_memory_MemTotal_bytes", "gauge", "Memory information field MemTotal_bytes."),
    ("node_memory_MemAvailable_bytes", "gauge", "Memory information field MemAvailable_bytes."),
)
# node_exporter writes one series per core and mode; the simulator writes a sample of
# cores, each at the node's load, and two modes: the node-wide mean is the same.
CPU_SAMPLE, CPU_MODES = 4, ("idle", "user")
# profile -> share of the job's cores kept busy (the input-bound loader and the miner peg them)
CPU_BUSY = {"train": 0.30, "train1": 0.30, "finetune": 0.35, "inference": 0.20, "eval": 0.40,
            "debug": 0.30,
            "notebook": 0.10, "idle_notebook": 0.02, "input_stall": 0.99, "input_stall_io": 0.12,
            "no_tensor": 0.30,
            "miner": 0.99, "held_idle": 0.05}
OS_CORES = 0.4  # the node's own daemons
MEMORY_BASE_GIB = 24.0  # the OS and daemons; each job adds its own peak (Job.rss_per_node_bytes)
IDLE_THROTTLE, THERMAL_THROTTLE = 0x1, 0x20 | 0x40

# profile -> util, sm, occupancy, gr, tensor, dram, fb fraction, power fraction, temp
PROFILES = {
    "train": (98, 0.76, 0.45, 0.86, 0.47, 0.55, 0.86, 0.85, 69),
    "train1": (97, 0.72, 0.42, 0.82, 0.44, 0.52, 0.80, 0.82, 67),
    "finetune": (96, 0.66, 0.38, 0.75, 0.40, 0.48, 0.62, 0.72, 64),
    "inference": (70, 0.42, 0.24, 0.50, 0.28, 0.34, 0.72, 0.55, 56),
    "eval": (88, 0.58, 0.33, 0.66, 0.34, 0.42, 0.42, 0.62, 60),
    "debug": (80, 0.45, 0.26, 0.55, 0.25, 0.35, 0.35, 0.50, 52),
    "notebook": (35, 0.18, 0.10, 0.22, 0.10, 0.12, 0.30, 0.30, 45),
    "idle_notebook": (1, 0.005, 0.003, 0.01, 0.0, 0.002, 0.22, 0.12, 36),
    "input_stall": (87, 0.19, 0.10, 0.22, 0.09, 0.10, 0.50, 0.35, 50),
    "input_stall_io": (87, 0.19, 0.10, 0.22, 0.09, 0.10, 0.50, 0.35, 50),
    "no_tensor": (97, 0.70, 0.50, 0.80, 0.0, 0.60, 0.70, 0.62, 64),
    "miner": (100, 0.98, 0.88, 1.0, 0.0, 0.08, 0.04, 0.95, 80),
    "held_idle": (0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.006, 0.12, 34),
    "busy_no_job": (97, 0.90, 0.60, 0.95, 0.0, 0.30, 0.29, 0.85, 74),
    "fb_left": (0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.50, 0.14, 35),
}


@dataclass(frozen=True)
class Segment:
    """One GPU held by one job (or free) over a slice of the window's steps."""

    gpu: int
    lo: int
    hi: int
    job: Job | None


class TelemetryWriter:
    """Writes ``telemetry/<window>.om`` files for [t0, now)."""

    def __init__(self, cluster: Cluster, jobs: list[Job], truth: Truth, outages: list[NodeOutage],
                 step: int, t0: int, now: int, seed: int) -> None:
        self.cluster, self.truth, self.outages = cluster, truth, outages
        self.step, self.t0, self.now, self.seed = step, t0, now, seed
        self.by_node: dict[int, list[Job]] = {}
        for job in jobs:
            if job.start is not None and (job.end or now) > t0:
                for node, _ in job.alloc:
                    self.by_node.setdefault(node, []).append(job)
        self.counters: dict[tuple[int, str, str], float] = {}

    def windows(self) -> list[int]:
        return list(range(self.t0, self.now, WINDOW_SECONDS))

    def write_window(self, directory: Path, w0: int) -> Path:
        """Compute and write one window; returns the file written."""
        ts = np.arange(max(w0, self.t0), min(w0 + WINDOW_SECONDS, self.now), self.step)
        nodes = [self._node_window(node, ts, w0) for node in self.cluster.nodes]
        path = directory / f"{_stamp(w0)}.om"
        amd = [AmdWindow(nw.node, nw.values, nw.up, _owners(nw)) for nw in nodes
               if nw.node.group.exporter == "amd"]
        with path.open("w") as out:
            self._write_dcgm(out, [nw for nw in nodes if nw.node.group.exporter == "dcgm"], ts)
            write_amd(out, amd, [str(t) for t in ts.tolist()], float(self.step), self.counters)
            self._write_node_exporter(out, nodes, ts)
            out.write("# EOF\n")
        return path

    # --- per node arrays ----------------------------------------------------------------

    def _node_window(self, node: Node, ts: np.ndarray, w0: int) -> NodeWindow:
        rng = np.random.default_rng([self.seed, w0 // WINDOW_SECONDS, node.index])
        up = np.ones(ts.size, dtype=bool)
        for o in self.outages:
            if o.node == node.index:
                up &= ~((ts >= o.start) & (ts < o.end))
        segments = self._segments(node, ts, up)
        values = {m: np.zeros((GPUS_PER_NODE, ts.size)) for m in METRICS}
        self._fill_idle(node, values, rng)
        for seg in segments:
            if seg.job is not None:
                self._fill_job(node, seg, values, rng, ts)
        self._apply_node_effects(node, values, ts, rng)
        ib = self._ib_rates(node, ts, segments, rng)
        ib.update(self._host_load(node, segments, ts, rng))
        return NodeWindow(node, segments, values, ib, up)

    def _segments(self, node: Node, ts: np.ndarray, up: np.ndarray) -> list[Segment]:
        owner = np.zeros((GPUS_PER_NODE, ts.size), dtype=np.int64)
        jobs = {0: None}
        t_end = ts[-1] + 1 if ts.size else 0
        for job in self.by_node.get(node.index, []):
            end = job.end or self.now
            if job.start >= t_end or (ts.size and end <= ts[0]):  # type: ignore[operator]
                continue
            mask = (ts >= job.start) & (ts < end)
            for n, gpus in job.alloc:
                if n == node.index:
                    owner[list(gpus), :] = np.where(mask, job.job_id, owner[list(gpus), :])
            jobs[job.job_id] = job  # type: ignore[assignment]
        owner[:, ~up] = -1
        out = []
        for gpu in range(GPUS_PER_NODE):
            row = owner[gpu]
            cuts = [0, *(np.flatnonzero(np.diff(row)) + 1).tolist(), row.size]
            for lo, hi in itertools.pairwise(cuts):
                if hi > lo and row[lo] >= 0:
                    out.append(Segment(gpu, lo, hi, jobs[int(row[lo])]))
        return out

    def _fill_idle(self, node: Node, v: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        model = node.model
        shape = v["DCGM_FI_DEV_GPU_UTIL"].shape
        v["DCGM_FI_DEV_POWER_USAGE"][:] = model.power_max_w * 0.1 * rng.normal(1, 0.03, shape)
        v["DCGM_FI_DEV_GPU_TEMP"][:] = 33 + rng.normal(0, 0.8, shape)
        v["DCGM_FI_DEV_SM_CLOCK"][:] = 345
        v["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"][:] = IDLE_THROTTLE
        v["DCGM_FI_PROF_PCIE_TX_BYTES"][:] = rng.integers(20_000, 90_000, shape)
        v["DCGM_FI_PROF_PCIE_RX_BYTES"][:] = rng.integers(20_000, 90_000, shape)

    def _profile(self, job: Job) -> str:
        effect = self.truth.job_effects.get(job.job_id, {})
        return str(effect.get("profile", job.kind))

    def _fill_job(self, node: Node, seg: Segment, v: dict[str, np.ndarray],
                  rng: np.random.Generator, ts: np.ndarray) -> None:
        job = seg.job
        assert job is not None
        effect = self.truth.job_effects.get(job.job_id, {})
        name = self._profile(job)
        if (node.index, seg.gpu) in effect.get("idle_gpus", ()):  # type: ignore[operator]
            name = "held_idle"
        sl = (seg.gpu, slice(seg.lo, seg.hi))
        n = seg.hi - seg.lo
        scale = _burst(name, ts[seg.lo:seg.hi], job.job_id, rng)
        _fill_profile(node, PROFILES[name], v, sl, n, rng, scale)
        if job.is_multi_node or job.gpus >= 2:
            busy = PROFILES[name][1] * 45e9 if job.kind in ("train", "train1") else 2e9
            v["DCGM_FI_PROF_NVLINK_TX_BYTES"][sl] = busy * rng.normal(1, 0.05, n) * scale
            v["DCGM_FI_PROF_NVLINK_RX_BYTES"][sl] = busy * rng.normal(1, 0.05, n) * scale
        self._straggler(node, seg, effect, v, rng)
        xid = effect.get("xid")
        if xid and xid[0] == node.index and xid[1] == seg.gpu and job.end:  # type: ignore[index]
            last = ts[seg.lo:seg.hi] >= job.end - 900
            v["DCGM_FI_DEV_XID_ERRORS"][seg.gpu, seg.lo:seg.hi][last] = xid[2]  # type: ignore[index]
            v["DCGM_FI_DEV_GPU_UTIL"][seg.gpu, seg.lo:seg.hi][last] = 0

    def _straggler(self, node: Node, seg: Segment, effect: dict[str, object],
                   v: dict[str, np.ndarray], rng: np.random.Generator) -> None:
        straggler = effect.get("straggler")
        if not straggler:
            return
        s_node, s_gpu, cause = cast(tuple[int, int, str], straggler)
        sl = (seg.gpu, slice(seg.lo, seg.hi))
        n = seg.hi - seg.lo
        if node.index == s_node and seg.gpu == s_gpu:
            if cause == "thermal":
                v["DCGM_FI_DEV_SM_CLOCK"][sl] = node.model.sm_clock_max_mhz * 0.58
                v["DCGM_FI_DEV_GPU_TEMP"][sl] = 89 + rng.normal(0, 0.7, n)
                v["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"][sl] = THERMAL_THROTTLE
                v["DCGM_FI_PROF_SM_ACTIVE"][sl] = 0.86 + rng.normal(0, 0.01, n)
            else:
                v["DCGM_FI_DEV_XID_ERRORS"][sl] = 63
                v["DCGM_FI_PROF_SM_ACTIVE"][sl] = 0.31 + rng.normal(0, 0.02, n)
                v["DCGM_FI_DEV_GPU_UTIL"][sl] = 64 + rng.normal(0, 2, n)
        else:  # peers spin in NCCL: busy by GPU_UTIL, idle by SM activity
            v["DCGM_FI_PROF_SM_ACTIVE"][sl] = 0.41 + rng.normal(0, 0.015, n)
            v["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"][sl] = 0.22 + rng.normal(0, 0.01, n)

    def _apply_node_effects(self, node: Node, v: dict[str, np.ndarray], ts: np.ndarray,
                            rng: np.random.Generator) -> None:
        for effect in self.truth.node_effects:
            if effect.node != node.index or effect.gpu is None:
                continue
            mask = (ts >= effect.start) & (ts < effect.end)
            if not mask.any():
                continue
            name = "busy_no_job" if effect.kind == "gpu_busy_no_job" else "fb_left"
            idx = np.flatnonzero(mask)
            _fill_profile(node, PROFILES[name], v, (effect.gpu, idx), idx.size, rng,
                          np.ones(idx.size))

    def _ib_rates(self, node: Node, ts: np.ndarray, segments: list[Segment],
                  rng: np.random.Generator) -> dict[str, np.ndarray]:
        multi = np.zeros(ts.size, dtype=bool)
        busy = np.zeros(ts.size)
        for seg in segments:
            if seg.job is not None and seg.job.is_multi_node:
                multi[seg.lo:seg.hi] = True
            elif seg.job is not None:
                busy[seg.lo:seg.hi] += 1
        base = 40e6 + busy * 15e6  # storage traffic of single-node jobs
        rate = np.where(multi, 14e9, base) * rng.normal(1, 0.05, ts.size).clip(0.5)
        out = {dev: rate.copy() for dev in node.ib_devices}
        line = {dev: np.full(ts.size, 50e9) for dev in node.ib_devices}
        wait = {dev: np.full(ts.size, 200.0) for dev in node.ib_devices}
        egress = 2e6 * rng.normal(1, 0.1, ts.size).clip(0.2)
        for effect in self.truth.node_effects:
            if effect.node != node.index or effect.device is None:
                continue
            mask = (ts >= effect.start) & (ts < effect.end)
            if effect.kind == "slow_ib":
                line[effect.device][mask] = 12.5e9
                out[effect.device][mask] = np.minimum(out[effect.device][mask], 3.1e9)
                wait[effect.device][mask] = np.where(multi[mask], 9e6, 4e4)
            elif effect.kind == "ib_no_job":
                out[effect.device][mask] = 9.5e9 * rng.normal(1, 0.04, int(mask.sum()))
        for seg in segments:
            if seg.job is not None and self._profile(seg.job) == "miner":
                egress[seg.lo:seg.hi] = 4e6
        return {**{f"rate:{d}": r for d, r in out.items()},
                **{f"line:{d}": r for d, r in line.items()},
                **{f"wait:{d}": r for d, r in wait.items()}, "egress": egress}

    def _host_load(self, node: Node, segments: list[Segment], ts: np.ndarray,
                   rng: np.random.Generator) -> dict[str, np.ndarray]:
        """The node's CPU busy share, memory in use and NFS reads/writes (bytes, bytes/s)
        at each step, from its jobs.

        Each GPU a job holds brings its share of the job's cores, busy by the job's profile,
        and its dataset reads.
        """
        busy = np.full(ts.size, OS_CORES)
        reads = np.zeros(ts.size)
        memory = np.full(ts.size, MEMORY_BASE_GIB * 2**30)
        for seg in segments:
            if seg.job is None:
                continue
            name = self._profile(seg.job)
            effect = self.truth.job_effects.get(seg.job.job_id, {})
            if (node.index, seg.gpu) in effect.get("idle_gpus", ()):  # type: ignore[operator]
                name = "held_idle"
            busy[seg.lo:seg.hi] += seg.job.cpus / max(1, seg.job.gpus) * CPU_BUSY.get(name, 0.3)
            # each of its GPUs on the node brings its share of the job's memory on the node
            memory[seg.lo:seg.hi] += (seg.job.rss_per_node_bytes()
                                      / max(1, seg.job.gpus_on(node.index)))
            reads[seg.lo:seg.hi] += FS_READ.get(name, 0.0)
        share = np.clip(busy * rng.normal(1, 0.01, ts.size) / node.cpus, 0.0, 1.0)
        reads = (reads + 1e5) * rng.normal(1, 0.05, ts.size).clip(0.5)  # + the OS's own reads
        return {"cpu_busy": share, "fs_read": reads, "fs_write": reads * FS_WRITE_SHARE,
                "mem_used": memory}

    # --- writing ------------------------------------------------------------------------

    def _write_dcgm(self, out: IO[str], nodes: list[NodeWindow], ts: np.ndarray) -> None:
        stamps = [str(t) for t in ts.tolist()]
        for name, kind, help_text, needs_profiling, integer in DCGM_FIELDS:
            out.write(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
            for nw in nodes:
                if needs_profiling and not nw.node.group.profiling:
                    continue
                values = nw.values[name]
                rows = (np.rint(values).astype(np.int64) if integer
                        else np.round(values, 3)).tolist()
                for gpu, labels, ranges in _series(nw):
                    prefix = f"{name}{{{labels}}} "
                    row = rows[gpu]
                    out.write("".join([f"{prefix}{row[i]} {stamps[i]}\n"
                                       for lo, hi in ranges for i in range(lo, hi)]))

    def _write_node_exporter(self, out: IO[str], nodes: list[NodeWindow], ts: np.ndarray) -> None:
        stamps = [str(t) for t in ts.tolist()]
        dt = float(self.step)
        for family, kind, help_text in IB_FAMILIES:
            out.write(f"# HELP {family} {help_text}\n# TYPE {family} {kind}\n")
            for nw in nodes:
                for dev in nw.node.ib_devices:
                    series = self._ib_series(nw, family, dev, dt)
                    self._write_series(out, family, kind, nw.node, stamps, nw.up, series,
                                       f'device="{dev}",port="1"')
        self._write_host_load(out, nodes, stamps, dt)
        for family, kind, help_text in NET_FAMILIES:
            out.write(f"# HELP {family} {help_text}\n# TYPE {family} {kind}\n")
            for nw in nodes:
                rate = nw.ib["egress"] if "transmit" in family else nw.ib["egress"] * 0.6
                series = self._counter(nw.node.index, family, "eth0", rate * dt)
                self._write_series(out, family, kind, nw.node, stamps, nw.up, series,
                                   'device="eth0"')
        for family, kind, help_text in FS_FAMILIES:
            out.write(f"# HELP {family} {help_text}\n# TYPE {family} {kind}\n")
            for nw in nodes:
                rate = nw.ib["fs_write" if "write" in family else "fs_read"]
                series = self._counter(nw.node.index, family, "nfs", rate * dt)
                self._write_series(out, family, kind, nw.node, stamps, nw.up, series, FS_MOUNT)

    def _write_host_load(self, out: IO[str], nodes: list[NodeWindow], stamps: list[str],
                         dt: float) -> None:
        """node_cpu_seconds_total per sampled core and mode; MemTotal and MemAvailable."""
        family, kind, help_text = CPU_FAMILY
        out.write(f"# HELP {family} {help_text}\n# TYPE {family} {kind}\n")
        for nw in nodes:
            busy = nw.ib["cpu_busy"]
            for cpu in range(CPU_SAMPLE):
                for mode in CPU_MODES:
                    share = 1.0 - busy if mode == "idle" else busy
                    key = (nw.node.index, family, f"cpu{cpu}:{mode}")
                    total = self.counters.get(key, 0.0) + np.cumsum(share * dt)
                    if total.size:
                        self.counters[key] = float(total[-1])
                    self._write_floats(out, f'{family}_total{{cpu="{cpu}",mode="{mode}",'
                                       f'instance="{nw.node.name}:9100",job="node"}} ',
                                       stamps, nw.up, total)
        for family, _kind, help_text in MEMORY_FAMILIES:
            out.write(f"# HELP {family} {help_text}\n# TYPE {family} gauge\n")
            for nw in nodes:
                total = np.full(len(stamps), nw.node.memory_mb * 2.0**20)
                values = total if "Total" in family else total - nw.ib["mem_used"]
                self._write_floats(out, f'{family}{{instance="{nw.node.name}:9100",'
                                   'job="node"} ', stamps, nw.up, np.rint(values))

    @staticmethod
    def _write_floats(out: IO[str], prefix: str, stamps: list[str], up: np.ndarray,
                      values: np.ndarray) -> None:
        row = np.round(values, 2).tolist()
        out.write("".join([f"{prefix}{row[i]} {stamps[i]}\n"
                           for i in np.flatnonzero(up).tolist()]))

    def _ib_series(self, nw: NodeWindow, family: str, dev: str, dt: float) -> np.ndarray:
        rate = nw.ib[f"rate:{dev}"]
        per_step: dict[str, Callable[[], np.ndarray]] = {
            "node_infiniband_port_data_received_bytes": lambda: rate * dt,
            "node_infiniband_port_data_transmitted_bytes": lambda: rate * dt * 1.01,
            "node_infiniband_port_packets_received": lambda: rate * dt / 4096,
            "node_infiniband_port_packets_transmitted": lambda: rate * dt / 4096,
            "node_infiniband_port_transmit_wait": lambda: nw.ib[f"wait:{dev}"] * dt,
            "node_infiniband_link_error_recovery": lambda: (nw.ib[f"line:{dev}"] < 50e9) * 0.002
            * dt,
        }
        if family == "node_infiniband_rate_bytes_per_second":
            return nw.ib[f"line:{dev}"]
        return self._counter(nw.node.index, family, dev, per_step[family]())

    def _counter(self, node: int, family: str, dev: str, increments: np.ndarray) -> np.ndarray:
        key = (node, family, dev)
        total = self.counters.get(key, 0.0) + np.cumsum(increments)
        if total.size:
            self.counters[key] = float(total[-1])
        return np.floor(total)

    def _write_series(self, out: IO[str], family: str, kind: str, node: Node,
                      stamps: list[str], up: np.ndarray, values: np.ndarray,
                      extra: str) -> None:
        name = f"{family}_total" if kind == "counter" else family
        prefix = f'{name}{{{extra},instance="{node.name}:9100",job="node"}} '
        row = values.astype(np.int64).tolist()
        out.write("".join([f"{prefix}{row[i]} {stamps[i]}\n"
                           for i in np.flatnonzero(up).tolist()]))


@dataclass
class NodeWindow:
    node: Node
    segments: list[Segment]
    values: dict[str, np.ndarray]
    ib: dict[str, np.ndarray]
    up: np.ndarray


def _fill_profile(node: Node, p: tuple[float, ...], v: dict[str, np.ndarray],
                  sl: Any, n: int, rng: np.random.Generator,
                  scale: np.ndarray) -> None:
    util, sm, occ, gr, tensor, dram, fb, power, temp = p
    model = node.model
    noise = rng.normal(1, 0.03, (6, n))
    v["DCGM_FI_DEV_GPU_UTIL"][sl] = np.clip(util * scale * noise[0], 0, 100)
    v["DCGM_FI_PROF_SM_ACTIVE"][sl] = np.clip(sm * scale * noise[1], 0, 1)
    v["DCGM_FI_PROF_SM_OCCUPANCY"][sl] = np.clip(occ * scale * noise[2], 0, 1)
    v["DCGM_FI_PROF_GR_ENGINE_ACTIVE"][sl] = np.clip(gr * scale * noise[3], 0, 1)
    v["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"][sl] = np.clip(tensor * scale * noise[4], 0, 1)
    v["DCGM_FI_PROF_DRAM_ACTIVE"][sl] = np.clip(dram * scale * noise[5], 0, 1)
    v["DCGM_FI_DEV_FB_USED"][sl] = model.fb_total_mib * fb * rng.normal(1, 0.005, n).clip(0, 1.1)
    v["DCGM_FI_DEV_POWER_USAGE"][sl] = model.power_max_w * (0.1 + (power - 0.1) * scale) \
        * rng.normal(1, 0.02, n)
    v["DCGM_FI_DEV_GPU_TEMP"][sl] = 30 + (temp - 30) * (0.6 + 0.4 * scale) + rng.normal(0, 0.5, n)
    busy = util * scale > 5
    v["DCGM_FI_DEV_SM_CLOCK"][sl] = np.where(busy, model.sm_clock_max_mhz, 345)
    v["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"][sl] = np.where(busy, 0, IDLE_THROTTLE)
    v["DCGM_FI_PROF_PCIE_TX_BYTES"][sl] = 1.5e8 * scale * noise[0]
    v["DCGM_FI_PROF_PCIE_RX_BYTES"][sl] = (2.5e9 if util > 80 and sm < 0.3 else 6e8) \
        * scale * noise[1]


# A GPU held this long with no burst of work is idle-allocated (the shipped
# ``idle-allocation`` rule's 4 h; docs/diagnosis.md says why the truth follows it).
IDLE_NOTEBOOK_HOURS = 4


def idle_notebooks(jobs: list[Job], truth: Truth, t0: int, now: int, step: int) -> list[Job]:
    """Healthy notebooks that the activity model left without a single burst of work over
    at least ``IDLE_NOTEBOOK_HOURS`` of sampled run: they held their GPUs idle, and the
    ground truth says so (``idle_notebook``), as a platform team would.

    Bursts are half-hour slots (``_burst``); sampled every ``step`` seconds, a short
    notebook can fall entirely between them. The samples are the writer's own grid.
    """
    idle = []
    for job in jobs:
        ts = _held_samples(job, truth, t0, now, step)
        if ts is not None and not (_burst("notebook", ts, job.job_id, None) > 1).any():
            idle.append(job)
    return idle


# A notebook held for hours that works under this share of its sampled run, its GPU memory
# held all along, is mostly idle: the shipped ``idle-memory-held`` rule's 15 % (issue 19:
# a session busy 8 % of 19.9 GPU-hours is a finding). The healthy notebook profile (busy one
# half-hour in five at 35 %) is about 8 %: held for hours, it is that.
MOSTLY_IDLE_BUSY = 0.15


def mostly_idle_notebooks(jobs: list[Job], truth: Truth, t0: int, now: int, step: int,
                          idle: set[int]) -> list[tuple[Job, float]]:
    """Healthy notebooks held ``IDLE_NOTEBOOK_HOURS`` or more (sampled run) whose planned
    utilisation over their samples is under ``MOSTLY_IDLE_BUSY``, with that share; the
    ``idle`` ones (no burst at all) are left to ``idle_notebooks``."""
    util = PROFILES["notebook"][0] / 100
    found = []
    for job in jobs:
        ts = None if job.job_id in idle else _held_samples(job, truth, t0, now, step,
                                                           incidents_count=False, hours=0)
        if ts is None or _rule_hours(job, ts, step, now) < IDLE_NOTEBOOK_HOURS:
            continue
        busy = util * float(_burst("notebook", ts, job.job_id, None).mean())
        if busy < MOSTLY_IDLE_BUSY:
            found.append((job, busy))
    return found


def _rule_hours(job: Job, ts: np.ndarray, step: int, now: int) -> float:
    """The run the rules read: Slurm's whole run once the job ended; while it runs, the time
    its samples cover (the archive's weights: a step each, the first cut at the start)."""
    assert job.start is not None
    if job.end is not None and job.end <= now:
        return (job.end - job.start) / 3600
    first = min(step, max(int(ts[0]) - job.start, 0)) or step
    return ((ts.size - 1) * step + first) / 3600


def _held_samples(job: Job, truth: Truth, t0: int, now: int, step: int,
                  incidents_count: bool = True,
                  hours: float = IDLE_NOTEBOOK_HOURS) -> np.ndarray | None:
    """The sample times of a healthy notebook held ``hours`` or more of the telemetry
    period (the writer's own grid); None for any other job. With
    ``incidents_count=False`` an incident that leaves the activity as it is (an exposed
    Jupyter port) does not make the notebook unhealthy: the month without incidents marks
    the same notebooks."""
    marks = job.pathologies if incidents_count else \
        [k for k in job.pathologies if k in PATHOLOGY_KINDS]
    if job.kind != "notebook" or job.start is None or marks or \
            truth.job_effects.get(job.job_id):
        return None
    lo, hi = max(job.start, t0), min(job.end or now, now)
    if hi - lo < hours * 3600:
        return None
    first = t0 + -(-(lo - t0) // step) * step  # the first sample at or after lo
    ts = np.arange(first, hi, step)
    return ts if ts.size else None


def _burst(profile: str, ts: np.ndarray, job_id: int,
           rng: np.random.Generator | None) -> np.ndarray:
    """Activity multiplier: steady for training, daily waves for serving, bursts for notebooks."""
    if profile == "inference":
        return 0.75 + 0.25 * np.sin(2 * np.pi * (ts % 86400) / 86400 + job_id % 7)
    if profile == "notebook":
        on: np.ndarray = (ts // 1800 + job_id) % 5 == 0
        return on.astype(float) + 0.02
    return np.ones(ts.size)


def _series(nw: NodeWindow) -> list[tuple[int, str, list[tuple[int, int]]]]:
    """Segments grouped by label set: a free GPU (no ``hpc_job``) between two jobs is one
    series, written in one piece, as OpenMetrics wants each series contiguous."""
    grouped: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for seg in nw.segments:
        grouped.setdefault((seg.gpu, _dcgm_labels(nw.node, seg)), []).append((seg.lo, seg.hi))
    return [(gpu, labels, ranges) for (gpu, labels), ranges in grouped.items()]


def _owners(nw: NodeWindow) -> list[tuple[int, Job | None, list[tuple[int, int]]]]:
    """Each GPU's step ranges per owner (the AMD writer's series, as ``_series`` groups)."""
    grouped: dict[tuple[int, int], tuple[int, Job | None, list[tuple[int, int]]]] = {}
    for seg in nw.segments:
        key = (seg.gpu, seg.job.job_id if seg.job is not None else 0)
        grouped.setdefault(key, (seg.gpu, seg.job, []))[2].append((seg.lo, seg.hi))
    return list(grouped.values())


def _dcgm_labels(node: Node, seg: Segment) -> str:
    labels = (f'gpu="{seg.gpu}",UUID="{node.gpu_uuids[seg.gpu]}",device="nvidia{seg.gpu}",'
              f'modelName="{node.model.model_name}",{node.group.hostname_label}="{node.name}"')
    if seg.job is not None and node.group.job_mapping:
        labels += f',hpc_job="{seg.job.job_id}"'
    return labels


def _stamp(epoch: int) -> str:
    return time.strftime("%Y%m%dT%H%MZ", time.gmtime(epoch))
