"""A small dcgm-exporter + node_exporter data set with known answers (2 nodes x 8 GPUs, 4 h).

The value of every GPU metric at every scrape is a plain function of (GPU, time) below, so
tests compute expected figures straight from these functions, independently of Beacon's
efficiency code.

- ``gpu01`` labels its host ``Hostname`` and exports SM_ACTIVE (Beacon's collectors file);
  ``gpu02`` labels it ``hostname`` and has dcgm-exporter's default counters only (no
  SM_ACTIVE: activity falls back to GR_ENGINE_ACTIVE).
- job 5001 (gpu01:0-3 + gpu02:0-3): data-parallel, gpu01:0 is the straggler, the others
  wait in NCCL (util 90 %, SM 20 %, NVLink traffic);
- job 5002 (gpu01:4-7): efficient training;
- job 5003 (gpu02:4-7): computes for an hour, then holds memory idle for an hour;
- jobs 5005 then 5004 share gpu01:4 in turn, after 5002: 5005 (gpu01:4-5) runs lightly
  from 2 h 15 to 3 h; 5004 (gpu01:6 for its whole window, 2 h 20 to 3 h 50) holds gpu01:4
  only from 3 h on, where 5005 left it: its ``JobGpu`` interval covers part of its window,
  so binding by host must cut the GPU's series to that interval;
- every other GPU-time is free: no ``hpc_job`` label, zero activity, no memory.

node_exporter: CPU seconds (idle a quarter of the time), InfiniBand bytes, Ethernet bytes
(and a loopback device, which is not traffic) and memory: in use ``32 GiB + 40 GiB`` per
GPU held on the node at the time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from apps.analysis.idleness import RULES as IDLE_RULES
from tests.integration.prom import marker_lines, om_series

NAME = "jobs-v3"  # v3: CPU iowait time
# Each version of the data set sits on a day of its own: a server still holding an older
# version (the same GPUs under other labels) would otherwise mix the two by host.
T0 = 1_791_244_800  # 2026-10-06 00:00:00 UTC (jobs-v1 was on 2026-10-05)
SCRAPE = 30
HOURS = 4
NODES = {"gpu01": "Hostname", "gpu02": "hostname"}
PROFILING_NODES = {"gpu01"}


@dataclass(frozen=True)
class JobSpec:
    job_id: int
    gpus: tuple[tuple[str, int], ...]
    start: float
    end: float
    kind: str
    # (host, GPU, from, to) where a GPU was held for part of the window only
    partly: tuple[tuple[str, int, float, float], ...] = ()

    @property
    def intervals(self) -> tuple[tuple[str, int, float, float], ...]:
        """When each GPU was held: the whole window unless ``partly`` says otherwise."""
        part = {(h, g): (h, g, s, e) for h, g, s, e in self.partly}
        return tuple(part.get((h, g), (h, g, self.start, self.end)) for h, g in self.gpus)


JOBS = {
    5001: JobSpec(5001, tuple((h, g) for h in ("gpu01", "gpu02") for g in range(4)),
                  T0 + 20 * 60 + 7, T0 + 3 * 3600 + 10 * 60 + 7, "nccl_wait"),
    5002: JobSpec(5002, tuple(("gpu01", g) for g in range(4, 8)),
                  T0 + 10 * 60, T0 + 2 * 3600 + 10 * 60, "efficient"),
    5003: JobSpec(5003, tuple(("gpu02", g) for g in range(4, 8)),
                  T0 + 3600 + 15, T0 + 3 * 3600 + 15, "compute_then_hold"),
    5004: JobSpec(5004, (("gpu01", 4), ("gpu01", 6)), T0 + 8400 + 7, T0 + 13800 + 7,
                  "efficient", partly=(("gpu01", 4, T0 + 10800 + 7, T0 + 13800 + 7),)),
    5005: JobSpec(5005, (("gpu01", 4), ("gpu01", 5)), T0 + 8100, T0 + 10800 + 7, "light"),
}


def job_at(host: str, gpu: int, t: float) -> JobSpec | None:
    """The job holding the GPU at scrape time ``t`` (start < t <= end)."""
    for job in JOBS.values():
        for h, g, start, end in job.intervals:
            if (h, g) == (host, gpu) and start < t <= end:
                return job
    return None


def values(host: str, gpu: int, t: float) -> dict[str, float]:
    """Every GPU measure at ``t`` in portal units (ratios 0..1, MiB, W, B/s)."""
    job = job_at(host, gpu, t)
    wave = 0.5 + 0.5 * math.sin((t - T0) / 600 + gpu)  # 0..1, period ~1 h
    if job is None:
        return {"util": 0.0, "sm": 0.0, "tensor": 0.0, "fb": 0.0, "power": 60.0, "nvlink": 0.0}
    if job.kind == "nccl_wait" and (host, gpu) == ("gpu01", 0):
        return {"util": 0.95, "sm": 0.70 + 0.1 * wave, "tensor": 0.4, "fb": 60000.0,
                "power": 600.0, "nvlink": 2e9}
    if job.kind == "nccl_wait":
        return {"util": 0.90, "sm": 0.15 + 0.1 * wave, "tensor": 0.05, "fb": 60000.0,
                "power": 250.0, "nvlink": 8e9}
    if job.kind == "light":
        return {"util": 0.55, "sm": 0.30, "tensor": 0.1, "fb": 20000.0, "power": 300.0,
                "nvlink": 0.0}
    if job.kind == "efficient":
        return {"util": 0.97, "sm": 0.70 + 0.2 * wave, "tensor": 0.5 * wave, "fb": 70000.0,
                "power": 650.0, "nvlink": 1e9}
    if t <= job.start + 3600:  # compute_then_hold, first hour
        return {"util": 0.80, "sm": 0.60, "tensor": 0.3, "fb": 30000.0, "power": 500.0,
                "nvlink": 0.0}
    return {"util": 0.0, "sm": 0.0, "tensor": 0.0, "fb": 30000.0, "power": 90.0, "nvlink": 0.0}


def times() -> list[int]:
    return [T0 + SCRAPE * (i + 1) for i in range(HOURS * 3600 // SCRAPE)]


# --- OpenMetrics ------------------------------------------------------------------------

FAMILIES = [  # (metric, help, value key, scale to the exporter's unit, profiling only)
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util", 100.0, False),
    ("DCGM_FI_PROF_SM_ACTIVE", "Ratio of cycles an SM has at least 1 warp.", "sm", 1.0, True),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", "sm",
     1.0, False),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor pipe is active.", "tensor",
     1.0, False),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "fb", 1.0, False),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power", 1.0, False),
    ("DCGM_FI_PROF_NVLINK_TX_BYTES", "NVLink bytes transmitted per second.", "nvlink", 1.0,
     True),
]


def gpu_labels(host: str, gpu: int, t: float) -> dict[str, str]:
    labels = {"gpu": str(gpu), "UUID": f"GPU-{host}-{gpu:02d}", "device": f"nvidia{gpu}",
              "modelName": "NVIDIA H100 80GB HBM3", NODES[host]: host}
    job = job_at(host, gpu, t)
    if job is not None:
        labels["hpc_job"] = str(job.job_id)
    return labels


def openmetrics() -> Iterator[str]:
    """The whole data set as OpenMetrics text, one family at a time, series in time order."""
    for metric, help_text, key, scale, profiling in FAMILIES:
        yield f"# HELP {metric} {help_text}\n# TYPE {metric} gauge\n"
        for host in NODES:
            if profiling and host not in PROFILING_NODES:
                continue
            for gpu in range(8):
                for t in times():
                    value = values(host, gpu, t)[key] * scale
                    yield f"{om_series(metric, gpu_labels(host, gpu, t))} {value:f} {t}\n"
    yield from _node_families()
    yield marker_lines(NAME, T0)
    yield "# EOF\n"


def _node_families() -> Iterator[str]:
    """node_exporter counters (OpenMetrics: the family drops ``_total``, samples keep it)
    and memory gauges."""
    counters = [("node_cpu_seconds", "Seconds the CPUs spent in each mode.",
                 [({"cpu": "0", "mode": "idle"}, 0.25), ({"cpu": "0", "mode": "user"}, 0.7),
                  ({"cpu": "0", "mode": "iowait"}, 0.05)]),
                ("node_infiniband_port_data_received_bytes", "InfiniBand bytes received.",
                 [({"device": "mlx5_0", "port": "1"}, 1e8)]),
                ("node_network_receive_bytes", "Network bytes received.",
                 [({"device": "eth0"}, 1e6), ({"device": "lo"}, 5e8)]),
                # two NFS mounts: the file-system reads are their sum
                ("node_mountstats_nfs_read_bytes", "Number of bytes read using the read() syscall.",
                 [({"export": "nfs01:/datasets", "mountaddr": "10.0.0.5", "protocol": "tcp"},
                   3e7),
                  ({"export": "nfs02:/home", "mountaddr": "10.0.0.6", "protocol": "tcp"}, 2e7)])]
    for family, help_text, variants in counters:
        yield f"# HELP {family} {help_text}\n# TYPE {family} counter\n"
        for host in NODES:
            for extra, rate in variants:
                labels = {"instance": f"{host}:9100", **extra}
                for t in times():
                    yield f"{om_series(family + '_total', labels)} {(t - T0) * rate:f} {t}\n"
    for family, value in (("node_memory_MemTotal_bytes", lambda host, t: MEM_TOTAL),
                          ("node_memory_MemAvailable_bytes",
                           lambda host, t: MEM_TOTAL - mem_used(host, t))):
        yield f"# HELP {family} Memory information field.\n# TYPE {family} gauge\n"
        for host in NODES:
            labels = {"instance": f"{host}:9100"}
            for t in times():
                yield f"{om_series(family, labels)} {value(host, t):.0f} {t}\n"


MEM_TOTAL = 2 * 2**40
GIB = 2**30


def mem_used(host: str, t: float) -> float:
    """Node memory in use at ``t``: 32 GiB, and 40 GiB per GPU a job holds then."""
    held = sum(1 for gpu in range(8) if job_at(host, gpu, t) is not None)
    return (32 + 40 * held) * GIB


def expected_node(job: JobSpec, host: str) -> dict[str, float]:
    """Independent node answers over ``job``'s window (node-shared: every job there)."""
    inside = [t for t in times() if job.start < t <= job.end]
    return {"cpu_busy": 0.75, "cpu_iowait": 0.05, "net_rx": 1e6, "ib_rx": 1e8, "fs_read": 5e7,
            "mem_used_peak": max(mem_used(host, t) for t in inside)}


HELD = IDLE_RULES.memory_held_mib  # the site's one memory-held line (issue 26)


def expected(job: JobSpec) -> dict[str, float]:
    """Independent answers for ``job``: fractions of its GPU-time, straight from values().

    Activity is SM active where the node exports it, else GR engine active (same value in
    this data set). Each scrape in a held interval (start, end] weighs the same; hours are
    Slurm's (every GPU over the whole window).
    """
    rows = [values(h, g, t) for h, g, start, end in job.intervals for t in times()
            if start < t <= end]
    n = len(rows)
    busy = [max(r["util"], r["sm"]) for r in rows]
    return {
        "useful": sum(r["sm"] for r in rows) / n,
        "waiting": sum(b - r["sm"] for b, r in zip(busy, rows, strict=True)) / n,
        "held_idle": sum(1 - b for b, r in zip(busy, rows, strict=True) if r["fb"] >= HELD) / n,
        "no_process": sum(1 - b for b, r in zip(busy, rows, strict=True) if r["fb"] < HELD) / n,
        "gpu_util": sum(r["util"] for r in rows) / n,
        "tensor": sum(r["tensor"] for r in rows) / n,
        "gpu_hours": len(job.gpus) * (job.end - job.start) / 3600,
    }
