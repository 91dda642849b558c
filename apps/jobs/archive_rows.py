"""The job archive's stored rows: a summary, health and straggler verdict as model fields.

Pure shaping (no queries): ``archive.py`` computes, these turn the results into the fields of
``JobMetrics``, ``JobMetricSummary`` and ``JobNodeMetrics``, series compacted per channel.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from apps.analysis import compact
from apps.analysis.efficiency import GpuSummary
from apps.analysis.health import RESIDENCY_BITS, GpuHealth, NodeHealth, residency_mask
from apps.analysis.stragglers import StragglerVerdict
from apps.analysis.timeseries import GpuKey, Series, Window, regrid
from apps.clusters.adapters.telemetry import JobTelemetry


def hardware_fields(health: dict[GpuKey, GpuHealth]) -> dict[str, Any]:
    """GPUs with a hardware XID and the uncorrectable ECC errors over the job: what the
    job-success SLO reads (None where nothing was measured)."""
    if not health:
        return {"xid_gpus": None, "ecc_dbe": None}
    dbe = [h.ecc_dbe for h in health.values() if h.ecc_dbe is not None]
    return {"xid_gpus": sum(1 for h in health.values() if h.hardware_xids),
            "ecc_dbe": int(sum(dbe)) if dbe else None}


def straggler_fields(verdict: StragglerVerdict) -> dict[str, Any]:
    return {
        "straggler_status": verdict.status, "straggler_confidence": verdict.confidence,
        "straggler_summary": verdict.summary, "straggler_detail": straggler_detail(verdict),
    }


def straggler_detail(verdict: StragglerVerdict) -> dict[str, Any]:
    """The verdict as stored JSON: named GPUs, waiting GPUs, reasons, limits, evidence."""
    return {
        "stragglers": [{"gpu": str(s.key), "waiting": round(s.waiting, 4),
                        "peer_waiting": round(s.peer_waiting, 4),
                        "slowdown": round(s.slowdown, 4), "cause": s.cause}
                       for s in verdict.stragglers],
        "waiting_gpus": [str(k) for k in verdict.waiting_gpus],
        "reasons": list(verdict.reasons), "limits": list(verdict.limits),
        "evidence": [{"kind": e.kind, "gpu": e.gpu, "text": e.text, "value": e.value}
                     for e in verdict.evidence],
    }


def summary_row(s: GpuSummary, telemetry: JobTelemetry, h: GpuHealth,
                 slowdown: float | None, window: Window, n: int) -> dict[str, Any]:
    series = telemetry.gpus.get(s.key, {})
    return dict(
        host=s.key.host, gpu_index=s.key.gpu, gpu_uuid=telemetry.uuids.get(s.key, ""),
        measure=s.measure, measured_s=s.measured_seconds, mean=s.activity.mean,
        p5=s.activity.p5, p50=s.activity.p50, p95=s.activity.p95,
        idle_fraction=s.idle_fraction, useful=s.split.useful, waiting=s.split.waiting,
        held_idle=s.split.held_idle, no_process=s.split.no_process,
        util_mean=s.means.get("gpu_util"), tensor_mean=s.means.get("tensor_active"),
        fb_used_mib=s.means.get("fb_used"), power_w=s.means.get("power"),
        waiting_with_traffic=s.waiting_with_traffic,
        occupancy_mean=h.occupancy_mean, fp64_mean=h.fp64_mean, fp32_mean=h.fp32_mean,
        fp16_mean=h.fp16_mean, valu_mean=h.valu_mean, dram_mean=h.dram_mean,
        gpu_model=telemetry.models.get(s.key, "")[:128],
        temp_mean=h.temp_mean, temp_max=h.temp_max, sm_clock_busy=h.sm_clock_busy,
        thermal_share=h.thermal_share, power_share=h.power_share,
        hw_slowdown_share=h.hw_slowdown_share, xids=list(h.xids), ecc_sbe=h.ecc_sbe,
        ecc_dbe=h.ecc_dbe, nvlink_bps=h.nvlink_bps, pcie_rx_bps=h.pcie_rx_bps,
        pcie_tx_bps=h.pcie_tx_bps, straggler=slowdown is not None, slowdown=slowdown,
        series=compact.encode(channels(series, s.measure, window, n)),
    )


def node_row(h: NodeHealth, series: dict[str, Series], window: Window,
              n: int) -> dict[str, Any]:
    channels = {name: regrid(series[name].points, window, n)
                for name in NODE_CHANNELS if name in series}
    return dict(
        host=h.host, cpu_busy=h.cpu_busy, cpu_iowait=h.cpu_iowait, mem_used_bytes=h.mem_used_bytes,
        ib_tx_bps=h.ib_tx_bps, ib_rx_bps=h.ib_rx_bps,
        ib_wait_per_s=h.ib_wait_per_s, ib_errors=h.ib_errors,
        ib_rate_min_bps=h.ib_rate_min_bps, ib_rate_max_bps=h.ib_rate_max_bps,
        net_tx_bps=h.net_tx_bps, net_rx_bps=h.net_rx_bps, fs_read_bps=h.fs_read_bps,
        fs_write_bps=h.fs_write_bps, series=compact.encode(channels))


# stored channel -> (measure, how samples combine in a bucket)
GPU_CHANNELS: dict[str, tuple[str, str]] = {
    "gpu_util": ("gpu_util", "mean"), "tensor_active": ("tensor_active", "mean"),
    "fb_used": ("fb_used", "mean"), "power": ("power", "mean"),
    "occupancy": ("sm_occupancy", "mean"), "dram_active": ("dram_active", "mean"),
    "fp64_active": ("fp64_active", "mean"), "temperature": ("temperature", "mean"),
    "sm_clock": ("sm_clock", "mean"), "throttle": ("throttle_reasons", "or"),
    "xid": ("xid", "max"), "nvlink": ("nvlink_tx", "mean"), "pcie_rx": ("pcie_rx", "mean"),
    "pcie_tx": ("pcie_tx", "mean"),
}
NODE_CHANNELS = ("cpu_busy", "cpu_iowait", "mem_used", "ib_tx", "ib_rx", "ib_wait", "net_tx",
                 "net_rx", "fs_read", "fs_write")


def channels(series: dict[str, Series], measure: str, window: Window,
              n: int) -> dict[str, list[float | None]]:
    wanted = {"activity": (measure, "mean"), **GPU_CHANNELS}
    out = {channel: regrid(series[m].points, window, n, how)
           for channel, (m, how) in wanted.items() if m in series}
    if "throttle" not in out and any(m in series for m in RESIDENCY_BITS):
        # no bitmask (AMD): the events map reads the reasons' residencies
        out["throttle"] = residency_mask({m: regrid(series[m].points, window, n)
                                          for m in RESIDENCY_BITS if m in series})
    return out


def utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)
