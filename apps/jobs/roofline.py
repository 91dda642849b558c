"""The job page's roofline and its API field, from the stored archive only (issue 30).

The archive stores each GPU's mean pipe and DRAM activities and its exporter's model
label (``JobMetricSummary``); ``apps/analysis/roofline.py`` places them against the
model's published peaks (``apps/analysis/gpu_peaks.py``). What a job without the fields
lacks is named in its exporter's words, from the cluster's metric catalogue, so a site
with renamed or prefixed series reads its own names (docs/roofline.md).
"""

from __future__ import annotations

from typing import Any

from apps.analysis.gpu_peaks import VENDOR_PIPES, pipe_words
from apps.analysis.roofline import GpuActivity, Roofline, RooflinePoint, roofline
from apps.clusters.adapters.catalogue import Catalogue
from apps.core.errors import AdapterError
from apps.jobs import charts
from apps.jobs.archive_sources import catalogue_for
from apps.jobs.models import Job, JobMetrics, JobMetricSummary

# the roofline's measure -> the archive's portal measure (apps/clusters/adapters/fields.py)
MEASURES = {"dram": "dram_active", "tensor": "tensor_active", "fp64": "fp64_active",
            "fp32": "fp32_active", "fp16": "fp16_active", "valu": "valu_active"}
ESTIMATE = ("An estimate from activity ratios, not counted FLOPs: each pipe's mean activity "
            "times its published dense peak, and DRAM activity times the peak memory "
            "bandwidth, over the job's measured time.")
# how a site turns the fields on, per exporter (dialect name)
ENABLE = {"dcgm": "dcgm-exporter -f deploy/prometheus/dcgm-collectors.csv (the profiling "
                  "module must run: DCGM's DCP fields)",
          "amd": "ProfilerMetrics on in the AMD Device Metrics Exporter's config"}


def job_roofline(job: Job, metrics: JobMetrics | None = None) -> Roofline:
    """The analysis over the job's stored GPU summaries (no Prometheus)."""
    metrics = metrics or JobMetrics.objects.filter(job=job).first()
    summaries = list(job.metric_summaries.order_by("host", "gpu_index"))
    if metrics is None or not metrics.has_data or not summaries:
        return roofline([])
    fallback = slurm_model(job)
    return roofline([activity(s, metrics.gpu_vendor, fallback) for s in summaries])


def activity(s: JobMetricSummary, vendor: str, fallback: str) -> GpuActivity:
    """One stored GPU as the analysis reads it; its model from the exporter, else Slurm."""
    pipes = {"tensor": s.tensor_mean, "fp64": s.fp64_mean, "fp32": s.fp32_mean,
             "fp16": s.fp16_mean, "valu": s.valu_mean}
    return GpuActivity(f"{s.host}:{s.gpu_index}", s.gpu_model or fallback, vendor,
                       s.dram_mean, pipes)


def slurm_model(job: Job) -> str:
    """The job's GPU model as Slurm names it, when it names one: the held nodes' GPU type
    (else the job's own), through the cluster's GPU types to a model name where one is set
    (``{"name": "h100", "model": "NVIDIA H100 80GB HBM3"}``); '' when several or none."""
    types = {t for t in job.gpus_held.values_list("node__gpu_type", flat=True) if t}
    types = types or {t for t in (job.gpu_types or {}) if t}
    if len(types) != 1:
        return ""
    (gpu_type,) = types
    models = {e.get("name"): e.get("model") for e in job.cluster.gpu_types or []
              if isinstance(e, dict)}
    return str(models.get(gpu_type) or gpu_type)


def missing_fields(job: Job, result: Roofline) -> list[str]:
    """The exporter series that would add what ``result`` lacks, in the cluster's names."""
    try:
        catalogue = catalogue_for(job.cluster)
    except AdapterError:
        catalogue = Catalogue()  # a broken override: the defaults' names still help
    wanted = [MEASURES[m] for m in result.missing]
    return [spec.name for _, dialect, spec in catalogue.pairs(wanted)
            if not result.vendor or dialect.vendor == result.vendor]


def enable_hints(job: Job, result: Roofline) -> list[str]:
    """How each exporter of the cluster (of the job's vendor) turns those fields on."""
    try:
        dialects = catalogue_for(job.cluster).dialects
    except AdapterError:
        dialects = Catalogue().dialects
    return [ENABLE[d.name] for d in dialects
            if d.name in ENABLE and (not result.vendor or d.vendor == result.vendor)]


def roofline_card(job: Job, metrics: JobMetrics | None) -> dict[str, Any]:
    """What the page's roofline section shows: the figure and table, or why not."""
    result = job_roofline(job, metrics)
    card: dict[str, Any] = {"roofline": result, "roofline_estimate": ESTIMATE,
                            "roofline_fields": missing_fields(job, result),
                            "roofline_hints": enable_hints(job, result) if result.missing else [],
                            "roofline_partial": [pipe_words(p, result.vendor)
                                                 for p in result.partial]}
    if result.ready:
        card["roofline_rows"] = [_row(p, result.vendor) for p in result.points]
        if any(p.plotted for p in result.points):
            card["roofline_figure"] = charts.roofline_chart(result)
    return card


def _row(p: RooflinePoint, vendor: str) -> dict[str, Any]:
    return {"gpu": p.gpu, "tflops": p.flops / 1e12, "tbps": p.bytes_per_s / 1e12,
            "intensity": p.intensity, "pipe": pipe_words(p.pipe, vendor), "bound": p.bound,
            "share": p.share_of_roof}


def roofline_payload(job: Job) -> dict[str, Any]:
    """The job detail API's ``roofline`` field: the same result the page draws."""
    result = job_roofline(job)
    peaks = result.peaks
    return {
        "status": result.status, "reason": result.reason,
        "estimate": ESTIMATE if result.ready else "", "model": result.model,
        "peaks": None if peaks is None else {
            "key": peaks.key, "name": peaks.name, "memory_bytes_per_s": peaks.memory_bps,
            "flops_per_s": dict(peaks.pipes), "sources": list(peaks.sources)},
        "points": [{"gpu": p.gpu, "flops_per_s": p.flops, "bytes_per_s": p.bytes_per_s,
                    "intensity": p.intensity, "pipe": p.pipe, "roof_flops_per_s": p.roof,
                    "share_of_roof": p.share_of_roof, "bound": p.bound,
                    "pipe_flops_per_s": dict(p.pipe_flops)} for p in result.points],
        "missing_fields": missing_fields(job, result),
        "uncounted_pipes": list(result.partial),
        "unmeasured_gpus": list(result.unmeasured_gpus),
        "vendor_pipes": list(VENDOR_PIPES.get(result.vendor, ())),
    }
