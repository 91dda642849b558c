"""A job's GPUs on a roofline, estimated from activity ratios (issue 30, item 2).

Pure: each GPU's mean pipe and DRAM activities over the job and its model in, points and
the model's roofs out (docs/roofline.md). The model, an estimate and not counted FLOPs:

- achieved FLOP/s of a pipe ≈ its activity × that pipe's dense peak (``gpu_peaks.PEAKS``);
  the GPU's FLOP/s is the sum over the pipes measured;
- achieved memory bandwidth ≈ DRAM activity × the model's peak HBM bandwidth;
- arithmetic intensity = FLOP/s ÷ bytes/s;
- the roof at that intensity = min(peak of the GPU's busiest pipe, intensity × bandwidth),
  and the GPU is memory-bound left of that pipe's ridge, compute-bound right of it.

An activity ratio says how many cycles a pipe was busy, not how much each cycle did: the
estimate errs high for a pipe kept busy by narrow or dependent instructions, and low for
FP8/INT8 tensor work (twice the FP16 rate the tensor peak assumes). Activities are means
over the job's measured time, idle stretches included. A GPU whose pipes or DRAM were not
measured gets no point, and the result names what was missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from apps.analysis.gpu_peaks import VENDOR_PIPES, GpuPeaks, peaks_for

READY, NO_FIELDS, UNKNOWN_MODEL, MIXED_MODELS, NO_GPUS = (
    "ready", "no_fields", "unknown_model", "mixed_models", "no_gpus")


@dataclass(frozen=True)
class GpuActivity:
    """One GPU over the job: mean activity (0..1) per pipe and of DRAM; None: not measured.

    ``model`` is what names its model: the exporter's label, else the Slurm GPU type.
    """

    gpu: str
    model: str
    vendor: str
    dram: float | None
    pipes: Mapping[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class RooflinePoint:
    """One GPU placed on its model's roofline (rates per second, intensity FLOP/byte)."""

    gpu: str
    flops: float
    bytes_per_s: float
    intensity: float | None  # None: no DRAM traffic measured (nothing to divide by)
    pipe_flops: Mapping[str, float]
    pipe: str  # the pipe doing most of the FLOPs: its peak is this GPU's compute roof
    roof: float  # attainable FLOP/s at this intensity
    bound: str  # memory, compute, idle (no pipe activity)

    @property
    def share_of_roof(self) -> float | None:
        return self.flops / self.roof if self.roof > 0 and self.flops > 0 else None

    @property
    def plotted(self) -> bool:
        """A point a log-log chart can draw (positive on both axes)."""
        return self.flops > 0 and bool(self.intensity)


@dataclass(frozen=True)
class Roofline:
    """The job's roofline: its model's peaks, a point per GPU measured, and what is missing.

    ``missing`` lists the measures (``dram`` or a pipe) no GPU of the job had: the page
    names the exporter fields that would add them. ``partial`` pipes were missing from the
    FLOP count of points that were drawn: their FLOP/s are low by those pipes' work.
    """

    status: str
    reason: str
    peaks: GpuPeaks | None = None
    model: str = ""
    vendor: str = ""
    points: tuple[RooflinePoint, ...] = ()
    missing: tuple[str, ...] = ()
    partial: tuple[str, ...] = ()
    unmeasured_gpus: tuple[str, ...] = ()

    @property
    def ready(self) -> bool:
        return self.status == READY


def roofline(gpus: Sequence[GpuActivity]) -> Roofline:
    """Place each GPU of a job on its model's roofline, or say why it cannot be.

    1. No GPU: nothing to place. 2. Which measures some GPU had, of those its vendor's
    exporter offers: without DRAM activity and at least one pipe, the fields are missing.
    3. One model, known to ``gpu_peaks``: else unknown (or mixed), never guessed.
    4. A point per GPU that had DRAM and a pipe measured.
    """
    if not gpus:
        return Roofline(NO_GPUS, "No GPU of this job has stored metrics.")
    vendor = _vendor(gpus)
    wanted = ("dram", *VENDOR_PIPES.get(vendor, VENDOR_PIPES["nvidia"]))
    seen = {m for g in gpus for m in wanted if _value(g, m) is not None}
    missing = tuple(m for m in wanted if m not in seen)
    if "dram" not in seen or seen == {"dram"}:
        return Roofline(NO_FIELDS, "The profiling fields a roofline needs were not scraped: "
                        "DRAM activity and at least one pipe's activity.", vendor=vendor,
                        missing=missing)
    models = sorted({g.model.strip() for g in gpus})
    if len(models) > 1:
        return Roofline(MIXED_MODELS, f"The job's GPUs are of several models ({', '.join(models)})"
                        ": one roofline would be wrong for some of them.", vendor=vendor,
                        missing=missing)
    model = models[0]
    peaks = peaks_for(model)
    if peaks is None:
        return Roofline(UNKNOWN_MODEL, _unknown(model), model=model, vendor=vendor,
                        missing=missing)
    placed = [p for g in gpus if (p := place(g, peaks)) is not None]
    unmeasured = tuple(g.gpu for g in gpus if not any(g.gpu == p.gpu for p in placed))
    partial = tuple(m for m in missing if m != "dram")
    return Roofline(READY, "", peaks, model, vendor, tuple(placed), missing, partial, unmeasured)


def place(gpu: GpuActivity, peaks: GpuPeaks) -> RooflinePoint | None:
    """One GPU's point, from the pipes its model has a peak for; None without DRAM
    activity or any such pipe measured."""
    pipes = {p: a for p, a in gpu.pipes.items() if a is not None and p in peaks.pipes}
    if gpu.dram is None or not pipes:
        return None
    pipe_flops = {p: _unit(a) * peaks.pipes[p] for p, a in pipes.items()}
    flops = sum(pipe_flops.values())
    moved = _unit(gpu.dram) * peaks.memory_bps
    intensity = flops / moved if moved > 0 else None
    # the busiest pipe by FLOPs sets the compute roof; ties go to the vendor's order
    order = VENDOR_PIPES[peaks.vendor]
    pipe = max(pipe_flops, key=lambda p: (pipe_flops[p], -order.index(p)))
    peak = peaks.pipes[pipe]
    roof = peak if intensity is None else min(peak, intensity * peaks.memory_bps)
    if flops <= 0:
        bound = "idle"
    elif intensity is None or intensity >= peaks.ridge[pipe]:
        bound = "compute"
    else:
        bound = "memory"
    return RooflinePoint(gpu.gpu, flops, moved, intensity, pipe_flops, pipe, roof, bound)


def _value(gpu: GpuActivity, measure: str) -> float | None:
    return gpu.dram if measure == "dram" else gpu.pipes.get(measure)


def _vendor(gpus: Sequence[GpuActivity]) -> str:
    vendors = {g.vendor for g in gpus if g.vendor}
    return vendors.pop() if len(vendors) == 1 else ""


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value))


def _unknown(model: str) -> str:
    if not model:
        return ("The GPU model is not known: the exporter gave no model label and Slurm no "
                "GPU type, so no peaks can be chosen.")
    return (f"No published peaks are kept for the GPU model {model!r} (or the name does not "
            "say which variant, SXM or PCIe): no roofline is drawn rather than a guessed one.")
