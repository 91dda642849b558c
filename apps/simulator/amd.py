"""AMD Device Metrics Exporter series for the simulator's MI300X nodes, as OpenMetrics text.

The telemetry writer computes every node's GPU values in dcgm-exporter's fields (the same
numpy arrays, the same planted effects); this module writes an AMD node's arrays as AMD's
exporter would (names and units of its metrics list, ``docs/metrics.md``): activities in
percent, the GFX clock once per XCD (``clock_type="system"``) beside the memory clock, a
throttle residency where dcgm has a bitmask, XGMI as kilobytes accumulated per link. Labels
are the exporter's (``gpu_id``, ``hostname``, ``serial_number``, ``card_model``, its
optional ``gpu_uuid``) and, with its Slurm integration, ``job_id``, ``job_user`` and
``job_partition`` while a job holds the GPU. There is no XID: a planted XID is not seen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

import numpy as np

from apps.simulator.cluster import Node
from apps.simulator.workload import Job

THERMAL_BITS, POWER_BITS, HW_SLOWDOWN_BITS = 0x20 | 0x40, 0x04 | 0x80, 0x08
JUNCTION_ABOVE_EDGE_C = 12  # the hotspot reads hotter than dcgm's single GPU temperature
XCDS, XGMI_LINKS = 2, 8  # GFX clocks written per GPU (MI300X has 8 XCDs); links per GPU
KIB = 1024.0

Values = dict[str, np.ndarray]
Owners = list[tuple[int, Job | None, list[tuple[int, int]]]]


@dataclass(frozen=True)
class AmdWindow:
    """One AMD node over one window: its values (dcgm fields), when it was up, and each
    GPU's step ranges per owner (a free GPU's series is one piece between jobs)."""

    node: Node
    values: Values
    up: np.ndarray
    owners: Owners


def _bits(values: Values, bits: int) -> np.ndarray:
    mask = values["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"].astype(np.int64)
    return np.where(mask & bits, 100.0, 0.0)


# (family, help, value from the node's dcgm arrays, integer?); clocks and links apart
GAUGES: tuple[tuple[str, str, Callable[[Values, Node], np.ndarray], bool], ...] = (
    ("gpu_gfx_activity", "Graphics engine usage in Percentage (0-100)",
     lambda v, n: v["DCGM_FI_DEV_GPU_UTIL"], True),
    ("gpu_umc_activity", "Memory engine usage in Percentage (0-100)",
     lambda v, n: v["DCGM_FI_PROF_DRAM_ACTIVE"] * 100, True),
    ("gpu_used_vram", "Used VRAM memory of the GPU (in MB)",
     lambda v, n: v["DCGM_FI_DEV_FB_USED"], True),
    ("gpu_total_vram", "Total VRAM memory of the GPU (in MB)",
     lambda v, n: np.full_like(v["DCGM_FI_DEV_FB_USED"], n.model.fb_total_mib), True),
    ("gpu_package_power", "Current socker power in Watts",
     lambda v, n: v["DCGM_FI_DEV_POWER_USAGE"], True),
    ("gpu_junction_temperature", "Current junction/hotspot temperature in Celsius",
     lambda v, n: v["DCGM_FI_DEV_GPU_TEMP"] + JUNCTION_ABOVE_EDGE_C, True),
    ("gpu_violation_socket_thermal_residency_percentage",
     "Socket Thermal Percentage Violation Counter", lambda v, n: _bits(v, THERMAL_BITS), True),
    ("gpu_violation_ppt_residency_percentage",
     "Package Power Tracking Percentage Violation Counter",
     lambda v, n: _bits(v, POWER_BITS), True),
    ("gpu_violation_processor_hot_residency_percentage",
     "Process Hot Residency Percentage Violation Counter",
     lambda v, n: _bits(v, HW_SLOWDOWN_BITS), True),
    ("gpu_ecc_uncorrect_total", "Total Uncorrectable error count",
     lambda v, n: np.zeros_like(v["DCGM_FI_DEV_GPU_UTIL"]), True),
    ("pcie_bandwidth", "Current PCIe bandwidth in Mb/s",
     lambda v, n: (v["DCGM_FI_PROF_PCIE_RX_BYTES"] + v["DCGM_FI_PROF_PCIE_TX_BYTES"]) * 8 / 1e6,
     True),
)
# the profiler fields (ProfilerMetrics on): VALU busy, occupancy, MFMA utilisation, percent
PROFILER = (
    ("gpu_prof_sm_active", "The percentage of GPUTime vector ALU instructions are processed",
     "DCGM_FI_PROF_SM_ACTIVE"),
    ("gpu_prof_occupancy_percent", "GPU Occupancy as Percentage of maximum",
     "DCGM_FI_PROF_SM_OCCUPANCY"),
    ("gpu_prof_tensor_active_percent", "MFMA Utilization Unit percent",
     "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
)


def write_amd(out: IO[str], windows: list[AmdWindow], stamps: list[str], step: float,
              counters: dict[tuple[int, str, str], float]) -> None:
    """Every AMD family once (HELP, TYPE, then each series' samples in time order);
    ``counters`` carry the XGMI totals from window to window."""
    if not windows:
        return
    for family, help_text, value, integer in GAUGES:
        _family(out, family, help_text)
        for nw in windows:
            _rows(out, family, "", value(nw.values, nw.node), integer, nw, stamps)
    for family, help_text, field in PROFILER:
        _family(out, family, help_text)
        for nw in windows:
            _rows(out, family, "", nw.values[field] * 100, False, nw, stamps)
    _family(out, "gpu_clock", "List of current GPU clock frequencies in MHz")
    for nw in windows:
        for xcd in range(XCDS):
            _rows(out, "gpu_clock", f'clock_index="{xcd}",clock_type="system",',
                  nw.values["DCGM_FI_DEV_SM_CLOCK"], True, nw, stamps)
        _rows(out, "gpu_clock", 'clock_index="8",clock_type="memory",',
              np.full_like(nw.values["DCGM_FI_DEV_SM_CLOCK"], 1300.0), True, nw, stamps)
    for family, field in (("gpu_xgmi_link_rx", "DCGM_FI_PROF_NVLINK_RX_BYTES"),
                          ("gpu_xgmi_link_tx", "DCGM_FI_PROF_NVLINK_TX_BYTES")):
        _family(out, family, f"XGMI Link Data {'Read' if 'rx' in family else 'Write'} in KB")
        for nw in windows:
            _links(out, family, nw, field, stamps, step, counters)


def _family(out: IO[str], family: str, help_text: str) -> None:
    out.write(f"# HELP {family} {help_text}\n# TYPE {family} gauge\n")


def _labels(node: Node, gpu: int, job: Job | None) -> str:
    serial = node.gpu_uuids[gpu].replace("-", "")[:16].upper()
    labels = (f'card_model="{node.model.model_name}",gpu_compute_partition_type="spx",'
              f'gpu_id="{gpu}",gpu_partition_id="0",gpu_uuid="{node.gpu_uuids[gpu]}",'
              f'hostname="{node.name}",serial_number="{serial}"')
    if job is not None and node.group.job_mapping:
        labels += f',job_id="{job.job_id}",job_partition="{job.partition}",job_user="{job.user}"'
    return labels


def _rows(out: IO[str], family: str, extra: str, values: np.ndarray, integer: bool,
          nw: AmdWindow, stamps: list[str]) -> None:
    rows = (np.rint(values).astype(np.int64) if integer else np.round(values, 3)).tolist()
    for gpu, job, ranges in nw.owners:
        prefix = f"{family}{{{extra}{_labels(nw.node, gpu, job)}}} "
        row = rows[gpu]
        out.write("".join([f"{prefix}{row[i]} {stamps[i]}\n"
                           for lo, hi in ranges for i in range(lo, hi)]))


def _links(out: IO[str], family: str, nw: AmdWindow, field: str, stamps: list[str],
           step: float, counters: dict[tuple[int, str, str], float]) -> None:
    """Kilobytes accumulated per link: the GPU's bytes per second spread over its links
    (link 0 is the GPU itself, as the exporter's example shows it idle)."""
    for link in range(XGMI_LINKS):
        share = 0.0 if link == 0 else 1.0 / (XGMI_LINKS - 1)
        totals = {}
        for gpu in range(nw.values[field].shape[0]):
            key = (nw.node.index, family, f"{gpu}:{link}")
            kilobytes = np.where(nw.up, nw.values[field][gpu] * share * step / KIB, 0.0)
            total = counters.get(key, 0.0) + np.cumsum(kilobytes)
            if total.size:
                counters[key] = float(total[-1])
            totals[gpu] = np.floor(total).astype(np.int64).tolist()
        for gpu, job, ranges in nw.owners:
            prefix = f'{family}{{link_index="{link}",{_labels(nw.node, gpu, job)}}} '
            row = totals[gpu]
            out.write("".join([f"{prefix}{row[i]} {stamps[i]}\n"
                               for lo, hi in ranges for i in range(lo, hi)]))
