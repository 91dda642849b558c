"""GPU and node health over one job: temperatures, clocks, throttle reasons, XIDs, ECC, traffic.

Pure: per-GPU (and per-node) series in portal units in, frozen summaries out. These are the
evidence the straggler verdict and the diagnosis cite; the job page charts the same series.

Throttle reasons are dcgm's clock-event bitmask (``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``, once
``..._CLOCK_THROTTLE_REASONS``): 0x1 idle, 0x2 application clocks, 0x4 software power cap,
0x8 hardware slowdown, 0x10 sync boost, 0x20 software thermal, 0x40 hardware thermal,
0x80 hardware power brake. ``DCGM_FI_DEV_XID_ERRORS`` is the *last* XID seen (a gauge).

AMD's exporter has no bitmask: it writes how much of the time each limit held the clocks
back (``gpu_violation_*_residency_percentage``, MI3xx), read as the measures
``thermal_throttle`` (socket thermal), ``power_throttle`` (package power tracking) and
``hw_slowdown`` (PROCHOT), ratios 0..1. Their mean is the same share of time the
bitmask's samples give, so the straggler and diagnosis rules read one number either way.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from apps.analysis.efficiency import weights
from apps.analysis.timeseries import Point, Series, Window, counter_increase, measured

THERMAL_BITS = 0x20 | 0x40
# The software power cap (0x4) is the limit doing its job: the busiest GPU reaches it
# first. A hardware slowdown (0x8) or power brake (0x80, an external signal: the node's
# power supply) is the device or its node acting up (issue 28).
POWER_BITS = 0x04
HW_SLOWDOWN_BITS = 0x08 | 0x80
# XIDs that mean the GPU or its memory is faulty (NVIDIA's XID catalogue): the others are
# mostly application errors (13 graphics exception, 31 MMU fault, 43 reset channel).
HARDWARE_XIDS = frozenset({48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120})
BUSY_UTIL = 0.5  # the SM clock is compared while the GPU is busy (idle clocks drop)
# The bit each residency stands for on the events map (dcgm's layout: hardware thermal,
# software power cap, hardware slowdown), set where the reason held most of a bucket.
RESIDENCY_BITS = {"thermal_throttle": 0x40, "power_throttle": 0x04, "hw_slowdown": 0x08}


@dataclass(frozen=True)
class GpuHealth:
    """One GPU over the job. ``None`` means the series was not collected."""

    temp_mean: float | None = None
    temp_max: float | None = None
    sm_clock_busy: float | None = None
    thermal_share: float | None = None
    power_share: float | None = None
    hw_slowdown_share: float | None = None
    xids: tuple[int, ...] = ()
    ecc_sbe: int | None = None
    ecc_dbe: int | None = None
    occupancy_mean: float | None = None
    fp64_mean: float | None = None
    fp32_mean: float | None = None  # the roofline's other pipes (apps/analysis/roofline.py)
    fp16_mean: float | None = None
    valu_mean: float | None = None  # AMD's vector ALU
    dram_mean: float | None = None
    nvlink_bps: float | None = None
    pcie_rx_bps: float | None = None
    pcie_tx_bps: float | None = None

    @property
    def hardware_xids(self) -> tuple[int, ...]:
        return tuple(x for x in self.xids if x in HARDWARE_XIDS)


@dataclass(frozen=True)
class NodeHealth:
    """One node over the job (node-shared: every job on the node sees the same numbers)."""

    host: str
    cpu_busy: float | None = None
    cpu_iowait: float | None = None  # share of CPU time idle with disk I/O outstanding
    mem_used_bytes: float | None = None
    ib_tx_bps: float | None = None
    ib_rx_bps: float | None = None
    ib_wait_per_s: float | None = None
    ib_errors: float | None = None
    ib_rate_min_bps: float | None = None
    ib_rate_max_bps: float | None = None
    net_tx_bps: float | None = None
    net_rx_bps: float | None = None
    fs_read_bps: float | None = None  # network file systems (NFS mounts), read by applications
    fs_write_bps: float | None = None

    @property
    def ib_degraded(self) -> bool:
        """One InfiniBand port runs slower than the node's fastest (a downgraded link)."""
        low, high = self.ib_rate_min_bps, self.ib_rate_max_bps
        return low is not None and high is not None and high > 0 and low < 0.75 * high


def gpu_health(series: Mapping[str, Series], window: Window) -> GpuHealth:
    """Summarise one GPU's health and traffic series over the job window."""
    values = {m: measured(s.points, window) for m, s in series.items()}
    temps = _values(values.get("temperature"))
    return GpuHealth(
        temp_mean=_mean(temps), temp_max=max(temps) if temps else None,
        sm_clock_busy=_busy_clock(values.get("sm_clock"), values.get("gpu_util")),
        thermal_share=_throttled(values, THERMAL_BITS, "thermal_throttle"),
        power_share=_throttled(values, POWER_BITS, "power_throttle"),
        hw_slowdown_share=_throttled(values, HW_SLOWDOWN_BITS, "hw_slowdown"),
        xids=tuple(sorted({int(v) for v in _values(values.get("xid")) if v > 0})),
        ecc_sbe=_new_errors(values.get("ecc_sbe")), ecc_dbe=_new_errors(values.get("ecc_dbe")),
        occupancy_mean=_mean(_values(values.get("sm_occupancy"))),
        fp64_mean=_mean(_values(values.get("fp64_active"))),
        fp32_mean=_mean(_values(values.get("fp32_active"))),
        fp16_mean=_mean(_values(values.get("fp16_active"))),
        valu_mean=_mean(_values(values.get("valu_active"))),
        dram_mean=_mean(_values(values.get("dram_active"))),
        nvlink_bps=_sum_means(values, ("nvlink_tx", "nvlink_rx")),
        pcie_rx_bps=_mean(_values(values.get("pcie_rx"))),
        pcie_tx_bps=_mean(_values(values.get("pcie_tx"))),
    )


def node_health(host: str, series: Mapping[str, Series], window: Window) -> NodeHealth:
    """Summarise one node's CPU, memory, InfiniBand, Ethernet and NFS series (rates per
    second).

    ``cpu_busy`` is the mean share of CPU time not idle, ``cpu_iowait`` the mean share in
    I/O wait (idle while the node's disk I/O is outstanding); ``mem_used_bytes`` the peak of
    memory in use (what matters for running out of it). ``ib_errors`` integrates the
    error rate over time: link error recoveries and downs.
    """
    points = {m: measured(s.points, window) for m, s in series.items()}
    values = {m: _values(p) for m, p in points.items()}
    errors = points.get("ib_errors")
    return NodeHealth(
        host=host, cpu_busy=_mean(values.get("cpu_busy")),
        cpu_iowait=_mean(values.get("cpu_iowait")),
        mem_used_bytes=max(values["mem_used"]) if values.get("mem_used") else None,
        ib_tx_bps=_mean(values.get("ib_tx")), ib_rx_bps=_mean(values.get("ib_rx")),
        ib_wait_per_s=_mean(values.get("ib_wait")),
        ib_errors=sum(v * w for (_, v), w in zip(errors, weights(errors, window), strict=True))
        if errors else None,
        ib_rate_min_bps=min(values["ib_rate_min"]) if values.get("ib_rate_min") else None,
        ib_rate_max_bps=max(values["ib_rate_max"]) if values.get("ib_rate_max") else None,
        net_tx_bps=_mean(values.get("net_tx")), net_rx_bps=_mean(values.get("net_rx")),
        fs_read_bps=_mean(values.get("fs_read")), fs_write_bps=_mean(values.get("fs_write")),
    )


def residency_mask(buckets: Mapping[str, Sequence[float | None]],
                   most: float = 0.5) -> list[float | None]:
    """Per bucket, a throttle bitmask from residencies (``RESIDENCY_BITS``: measure ->
    per-bucket share): the reasons that held the clocks ``most`` of the bucket or more, so
    an AMD GPU's events map reads like an NVIDIA one's (None: no residency measured)."""
    n = max((len(v) for v in buckets.values()), default=0)
    out: list[float | None] = []
    for k in range(n):
        seen = [(bits, shares[k]) for m, bits in RESIDENCY_BITS.items()
                if (shares := buckets.get(m)) and k < len(shares) and shares[k] is not None]
        out.append(float(sum(bits for bits, share in seen if share is not None
                             and share >= most)) if seen else None)
    return out


def nvlink_laggards(gpus: Sequence[tuple[str, float, float | None]], idle_below: float = 0.05,
                    low: float = 0.25) -> tuple[str, ...] | None:
    """GPUs that ran but moved under ``low`` of the other running GPUs' NVLink bytes (median).

    ``gpus``: (name, busy share, NVLink bytes/s or None). Only GPUs that ran count, on both
    sides: a GPU held and never used moves no NVLink traffic, and it belongs to the idle-GPU
    finding, not to the interconnect's (issue 28). None: fewer than two running GPUs with
    NVLink measured, nothing to compare.
    """
    rates = {name: bps for name, busy, bps in gpus if bps is not None and busy >= idle_below}
    if len(rates) < 2:
        return None
    return tuple(name for name, bps in rates.items()
                 if bps < low * statistics.median(r for o, r in rates.items() if o != name))


def _values(points: Sequence[Point] | None) -> list[float]:
    return [v for _, v in points] if points else []


def _mean(values: Sequence[float] | None) -> float | None:
    return statistics.fmean(values) if values else None


def _sum_means(values: Mapping[str, list[Point]], measures: Sequence[str]) -> float | None:
    means = [m for measure in measures if (m := _mean(_values(values.get(measure)))) is not None]
    return sum(means) if means else None


def _throttled(values: Mapping[str, list[Point]], bits: int, residency: str) -> float | None:
    """Share of the time the clocks were held back for one reason: from the throttle
    bitmask where the exporter writes one (NVIDIA), else from the reason's residency."""
    if values.get("throttle_reasons"):
        return _bit_share(values["throttle_reasons"], bits)
    shares = _values(values.get(residency))
    return min(1.0, max(0.0, statistics.fmean(shares))) if shares else None


def _bit_share(points: Sequence[Point] | None, bits: int) -> float | None:
    """Share of samples whose bitmask has any of ``bits`` set."""
    if not points:
        return None
    return sum(1 for _, v in points if int(v) & bits) / len(points)


def _busy_clock(clock: Sequence[Point] | None, util: Sequence[Point] | None) -> float | None:
    """Mean SM clock while the GPU was busy (all samples when utilisation is unknown)."""
    if not clock:
        return None
    busy_at = {t for t, v in util or () if v >= BUSY_UTIL}
    busy = [v for t, v in clock if t in busy_at] if busy_at else []
    return statistics.fmean(busy or [v for _, v in clock])


def _new_errors(points: Sequence[Point] | None) -> int | None:
    """Errors counted during the job (volatile ECC counters reset with the driver)."""
    if not points:
        return None
    return round(counter_increase(points))
