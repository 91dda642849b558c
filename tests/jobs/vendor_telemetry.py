"""One data-parallel job's telemetry in either exporter's text: dcgm-exporter (H100) or AMD's
Device Metrics Exporter (MI300X), from the same numbers. One GPU is a thermal straggler:
hot, clocked down, throttled, computing while its peers wait in collectives."""

from __future__ import annotations

from pathlib import Path

STEP = 30


def _dcgm(host: str, gpu: int, job: str, hot: bool) -> dict[str, tuple[str, float]]:
    labels = f'gpu="{gpu}",UUID="GPU-{host}-{gpu}",modelName="NVIDIA H100 80GB HBM3",' \
             f'Hostname="{host}",hpc_job="{job}"'
    sm = 0.86 if hot else 0.41
    return {"DCGM_FI_DEV_GPU_UTIL": (labels, 97), "DCGM_FI_PROF_SM_ACTIVE": (labels, sm),
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (labels, 0.3),
            "DCGM_FI_DEV_FB_USED": (labels, 70000), "DCGM_FI_DEV_POWER_USAGE": (labels, 650),
            "DCGM_FI_DEV_GPU_TEMP": (labels, 89 if hot else 68),
            "DCGM_FI_DEV_SM_CLOCK": (labels, 1150 if hot else 1980),
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": (labels, 0x40 if hot else 0),
            "DCGM_FI_PROF_NVLINK_TX_BYTES": (labels, 2e10),
            "DCGM_FI_PROF_PCIE_RX_BYTES": (labels, 6e8)}


def _amd(host: str, gpu: int, job: str, hot: bool) -> dict[str, tuple[str, float]]:
    labels = f'gpu_id="{gpu}",serial_number="69225{gpu}",card_model="AMD Instinct MI300X",' \
             f'gpu_partition_id="0",gpu_compute_partition_type="spx",hostname="{host}",' \
             f'job_id="{job}",job_user="ann",job_partition="mi300x"'
    return {"gpu_gfx_activity": (labels, 97), "gpu_prof_sm_active": (labels, 86 if hot else 41),
            "gpu_prof_tensor_active_percent": (labels, 30), "gpu_used_vram": (labels, 150000),
            "gpu_package_power": (labels, 690), "gpu_junction_temperature": (
                labels, 101 if hot else 78),
            "gpu_violation_socket_thermal_residency_percentage": (labels, 100 if hot else 0),
            "gpu_violation_ppt_residency_percentage": (labels, 0),
            "gpu_ecc_uncorrect_total": (labels, 0),
            **{f"gpu_clock@{i}": (f'{labels},clock_type="system",clock_index="{i}"',
                                  1200 if hot else 2100) for i in range(2)}}


def write_job(path: Path, vendor: str, host: str, job: str, start: float, minutes: int,
              hot_gpu: int, gpus: int = 8) -> Path:
    """The job's samples every ``STEP`` seconds, one series per line block, ``# EOF``."""
    make = _amd if vendor == "amd" else _dcgm
    times = [start + STEP * (k + 1) for k in range(minutes * 60 // STEP)]
    lines = []
    for gpu in range(gpus):
        for name, (labels, value) in make(host, gpu, job, gpu == hot_gpu).items():
            lines += [f"{name.split('@')[0]}{{{labels}}} {value} {t}" for t in times]
        if vendor == "amd":  # XGMI: kilobytes accumulated per link, 7 links at 2.8 GB/s
            lines += [f'gpu_xgmi_link_tx{{gpu_id="{gpu}",hostname="{host}",job_id="{job}",'
                      f'link_index="{link}"}} {2.8e6 * STEP * (k + 1):.0f} {t}'
                      for link in range(1, 8) for k, t in enumerate(times)]
    path.write_text("\n".join(lines) + "\n# EOF\n")
    return path
