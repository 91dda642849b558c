"""What each GPU exporter calls the portal's measures: dcgm-exporter and AMD's Device
Metrics Exporter (docs/metrics.md lists both fields with their sources).

A **dialect** is one exporter's spelling: its label names (job, host, GPU index, UUID,
model) and its series per portal measure (``MetricSpec``: name, factor to the portal's
unit, how samples combine). The measures are vendor-neutral (``gpu_util`` is "busy",
``sm_active`` "computing", ``nvlink_tx`` "GPU-to-GPU bytes sent"); what each one is called
on each vendor's GPUs is ``apps.analysis.vendors.measure_words``.

AMD notes (Device Metrics Exporter 1.x, ``docs/configuration/metricslist.md`` and
``pkg/amdgpu/gpuagent/gpuagent_metrics.go`` of ROCm/device-metrics-exporter):

- every field is a gauge, named in lower case after its ``GPU_*`` field, with an optional
  site prefix (``CommonConfig.MetricsFieldPrefix``, prepended as written: ``amd_``);
- activities are percentages (0-100); VRAM is in MB (MiB, as amd-smi counts);
- ``gpu_clock`` is one series per clock (``clock_type``: ``system`` is the GFX clock,
  written ``GPU_CLOCK_TYPE_SYSTEM`` before 1.3; ``clock_index``: one per XCD on MI300X);
- ``gpu_xgmi_link_rx``/``_tx`` accumulate kilobytes per link (``link_index``): rates are
  taken and the links summed;
- throttling is a set of residency percentages (MI3xx), not a bitmask;
- ``pcie_bandwidth`` (Mb/s) does not say which direction: it is not read as host-to-GPU
  copies (``pcie_rx``), which the input-stall evidence needs to be.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from apps.clusters.adapters.promql import check_metric

REDUCES = ("avg", "max", "rate")
COMBINES = ("mean", "sum")


@dataclass(frozen=True)
class MetricSpec:
    """One exporter series: its name, the factor to the portal's unit, and that unit.

    ``aliases`` are older names of the same field (dcgm-exporter renamed throttle reasons to
    clock event reasons); ``reduce`` is how samples combine within a window: ``avg`` for
    measures, ``max`` for codes and counters (an average of XID codes means nothing),
    ``rate`` for a running total the exporter writes as a gauge (per second). ``where``
    keeps only series whose label matches a regex (``clock_type``); ``over`` names a label
    splitting one GPU's series into parts (a link, a clock domain), combined by ``combine``.
    """

    name: str
    scale: float = 1.0
    unit: str = "ratio"
    aliases: tuple[str, ...] = ()
    reduce: str = "avg"
    where: tuple[tuple[str, str], ...] = ()
    over: str = ""
    combine: str = "mean"

    def __post_init__(self) -> None:
        if self.reduce not in REDUCES or self.combine not in COMBINES:
            raise ValueError(f"{self.name}: reduce {self.reduce!r}, combine {self.combine!r}")

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def prefixed(self, prefix: str) -> MetricSpec:
        """The same field under a site's name prefix (``amd_gpu_gfx_activity``)."""
        if not prefix:
            return self
        return replace(self, name=check_metric(prefix + self.name),
                       aliases=tuple(check_metric(prefix + a) for a in self.aliases))


# Portal measure -> dcgm-exporter field. Ratios are 0..1 in the portal.
DCGM_METRICS: dict[str, MetricSpec] = {
    "gpu_util": MetricSpec("DCGM_FI_DEV_GPU_UTIL", 0.01),
    "sm_active": MetricSpec("DCGM_FI_PROF_SM_ACTIVE"),
    "sm_occupancy": MetricSpec("DCGM_FI_PROF_SM_OCCUPANCY"),
    "gr_engine_active": MetricSpec("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    "tensor_active": MetricSpec("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
    "dram_active": MetricSpec("DCGM_FI_PROF_DRAM_ACTIVE"),
    "fp64_active": MetricSpec("DCGM_FI_PROF_PIPE_FP64_ACTIVE"),
    # the roofline's other pipes (docs/roofline.md); off in dcgm-exporter's own files
    "fp32_active": MetricSpec("DCGM_FI_PROF_PIPE_FP32_ACTIVE"),
    "fp16_active": MetricSpec("DCGM_FI_PROF_PIPE_FP16_ACTIVE"),
    "fb_used": MetricSpec("DCGM_FI_DEV_FB_USED", 1.0, "MiB"),
    "fb_free": MetricSpec("DCGM_FI_DEV_FB_FREE", 1.0, "MiB"),
    "power": MetricSpec("DCGM_FI_DEV_POWER_USAGE", 1.0, "W"),
    "temperature": MetricSpec("DCGM_FI_DEV_GPU_TEMP", 1.0, "°C"),
    "sm_clock": MetricSpec("DCGM_FI_DEV_SM_CLOCK", 1.0, "MHz"),
    # A bitmask: max_over_time keeps the highest bits, where the thermal (0x20, 0x40) and
    # power-brake (0x80) reasons sit; reading raw samples (OpenMetrics) ORs them exactly.
    "throttle_reasons": MetricSpec("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 1.0, "bitmask",
                                   aliases=("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",),
                                   reduce="max"),
    "xid": MetricSpec("DCGM_FI_DEV_XID_ERRORS", 1.0, "code", reduce="max"),
    "ecc_sbe": MetricSpec("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 1.0, "count", reduce="max"),
    "ecc_dbe": MetricSpec("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1.0, "count", reduce="max"),
    "nvlink_tx": MetricSpec("DCGM_FI_PROF_NVLINK_TX_BYTES", 1.0, "B/s"),
    "nvlink_rx": MetricSpec("DCGM_FI_PROF_NVLINK_RX_BYTES", 1.0, "B/s"),
    "pcie_tx": MetricSpec("DCGM_FI_PROF_PCIE_TX_BYTES", 1.0, "B/s"),
    "pcie_rx": MetricSpec("DCGM_FI_PROF_PCIE_RX_BYTES", 1.0, "B/s"),
}

GFX_CLOCK = ("clock_type", "system|GPU_CLOCK_TYPE_SYSTEM")
# Portal measure -> AMD Device Metrics Exporter field (without the site's prefix).
AMD_METRICS: dict[str, MetricSpec] = {
    # busy: the graphics (compute) engine's activity, like dcgm's GPU util a duty cycle
    "gpu_util": MetricSpec("gpu_gfx_activity", 0.01),
    # profiler fields (ProfilerMetrics on): VALU busy, occupancy, MFMA utilisation
    "sm_active": MetricSpec("gpu_prof_sm_active", 0.01),
    "sm_occupancy": MetricSpec("gpu_prof_occupancy_percent", 0.01),
    "tensor_active": MetricSpec("gpu_prof_tensor_active_percent", 0.01),
    # the vector ALU's issue utilisation: the roofline's VALU pipe (docs/roofline.md)
    "valu_active": MetricSpec("gpu_prof_valu_pipe_issue_util", 0.01),
    "dram_active": MetricSpec("gpu_umc_activity", 0.01),
    "fb_used": MetricSpec("gpu_used_vram", 1.0, "MiB"),
    "fb_free": MetricSpec("gpu_free_vram", 1.0, "MiB"),
    # MI3xx write the socket's power; MI2xx an average of it; both write gpu_power_usage
    "power": MetricSpec("gpu_package_power", 1.0, "W",
                        aliases=("gpu_average_package_power", "gpu_power_usage")),
    # the hotspot on MI3xx, the edge on MI2xx (which has no junction field)
    "temperature": MetricSpec("gpu_junction_temperature", 1.0, "°C",
                              aliases=("gpu_edge_temperature",)),
    "sm_clock": MetricSpec("gpu_clock", 1.0, "MHz", where=(GFX_CLOCK,), over="clock_index"),
    "thermal_throttle": MetricSpec("gpu_violation_socket_thermal_residency_percentage", 0.01),
    "power_throttle": MetricSpec("gpu_violation_ppt_residency_percentage", 0.01),
    "hw_slowdown": MetricSpec("gpu_violation_processor_hot_residency_percentage", 0.01),
    "ecc_sbe": MetricSpec("gpu_ecc_correct_total", 1.0, "count", reduce="max"),
    "ecc_dbe": MetricSpec("gpu_ecc_uncorrect_total", 1.0, "count", reduce="max"),
    "nvlink_tx": MetricSpec("gpu_xgmi_link_tx", 1024.0, "B/s", reduce="rate", over="link_index",
                            combine="sum"),
    "nvlink_rx": MetricSpec("gpu_xgmi_link_rx", 1024.0, "B/s", reduce="rate", over="link_index",
                            combine="sum"),
}

ACTIVITY_FALLBACK = ("sm_active", "gr_engine_active", "gpu_util")
# What an archive fetches for each GPU of a job (the rest is for the detail charts).
JOB_MEASURES = ("gpu_util", "sm_active", "gr_engine_active", "tensor_active", "dram_active",
                "fb_used", "power", "nvlink_tx", "pcie_tx",
                # health and traffic: straggler evidence, diagnosis, the per-GPU charts
                "sm_occupancy", "temperature", "sm_clock", "throttle_reasons",
                "xid", "ecc_sbe", "ecc_dbe", "nvlink_rx", "pcie_rx",
                # residencies where the exporter has no throttle bitmask (AMD)
                "thermal_throttle", "power_throttle", "hw_slowdown",
                # the roofline's pipes (DRAM and tensor are above)
                "fp64_active", "fp32_active", "fp16_active", "valu_active")
MEASURES = frozenset(DCGM_METRICS) | frozenset(AMD_METRICS)


@dataclass(frozen=True)
class Dialect:
    """One exporter's label names and series: what a cluster's ``metric_labels`` set."""

    name: str  # dcgm, amd
    vendor: str  # nvidia, amd
    job_label: str
    host_labels: tuple[str, ...]
    gpu_label: str
    uuid_labels: tuple[str, ...]
    model_label: str
    metrics: Mapping[str, MetricSpec]


DCGM = Dialect("dcgm", "nvidia", "hpc_job", ("Hostname", "hostname"), "gpu", ("UUID", "uuid"),
               "modelName", DCGM_METRICS)
# The exporter's Slurm integration writes job_id, job_user and job_partition (its prolog);
# hostname and gpu_id are always there, gpu_uuid only when listed in GPUConfig.Labels.
AMD = Dialect("amd", "amd", "job_id", ("hostname",), "gpu_id", ("gpu_uuid",), "card_model",
              AMD_METRICS)
DIALECTS = {d.name: d for d in (DCGM, AMD)}
