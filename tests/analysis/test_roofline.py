"""The roofline from activity ratios (issue 30, item 2): peaks by model, points, reasons."""

from __future__ import annotations

import pytest

from apps.analysis.gpu_peaks import BY_KEY, PEAKS, peaks_for
from apps.analysis.roofline import (
    MIXED_MODELS,
    NO_FIELDS,
    NO_GPUS,
    READY,
    UNKNOWN_MODEL,
    GpuActivity,
    place,
    roofline,
)

H100 = "NVIDIA H100 80GB HBM3"
MI300X = "AMD Instinct MI300X"


@pytest.mark.parametrize(("model", "key"), [
    # dcgm-exporter's modelName as nvidia-smi prints it
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
    ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
    # AMD's card_model; Slurm GPU types
    ("AMD Instinct MI300X", "mi300x"),
    ("AMD Instinct MI300X OAM", "mi300x"),
    ("AMD Instinct MI325X", "mi325x"),
    ("AMD Instinct MI250X", "mi250x"),
    ("mi300x", "mi300x"),
    ("h100-sxm", "h100-sxm"),
    # not kept, or not saying which variant: unknown, never guessed
    ("h100", None),
    ("a100", None),
    ("NVIDIA H100 NVL", None),
    ("NVIDIA H200 NVL", None),
    ("AMD Instinct MI250", None),
    ("NVIDIA L40S", None),
    ("", None),
])
def test_a_model_name_finds_its_peaks_or_none(model, key):
    found = peaks_for(model)
    assert (found.key if found else None) == key


@pytest.mark.parametrize(("key", "pipe", "tflops", "tbps"), [
    ("h100-sxm", "tensor", 989.5, 3.35), ("h100-sxm", "fp64", 34, 3.35),
    ("h100-pcie", "fp32", 51, 2.0), ("h200", "tensor", 989.5, 4.8),
    ("a100-40gb", "fp16", 78, 1.555), ("a100-80gb-sxm", "tensor", 312, 2.039),
    ("mi300x", "tensor", 1307.4, 5.3), ("mi300x", "valu", 163.4, 5.3),
    ("mi325x", "tensor", 1307.4, 6.0), ("mi250x", "valu", 47.9, 3.2768),
])
def test_the_published_peaks_are_kept_dense(key, pipe, tflops, tbps):
    peaks = BY_KEY[key]
    assert peaks.pipes[pipe] == pytest.approx(tflops * 1e12)
    assert peaks.memory_bps == pytest.approx(tbps * 1e12)


def test_every_model_cites_a_source_and_has_a_pipe_per_exporter_field():
    for peaks in PEAKS:
        assert peaks.sources and all("http" in s for s in peaks.sources)
        expected = {"nvidia": {"fp64", "fp32", "fp16", "tensor"}, "amd": {"valu", "tensor"}}
        assert set(peaks.pipes) == expected[peaks.vendor]


def gpu(name: str = "n1:0", model: str = H100, vendor: str = "nvidia",
        dram: float | None = 0.5, **pipes: float | None) -> GpuActivity:
    return GpuActivity(name, model, vendor, dram, pipes)


H = BY_KEY["h100-sxm"]
M = BY_KEY["mi300x"]


@pytest.mark.parametrize(("activity", "peaks", "flops", "bps", "pipe", "bound"), [
    # tensor 40 % of 989.5 TF, DRAM 50 % of 3.35 TB/s: 395.8 TF at 236 FLOP/B, left of
    # the tensor ridge (295 FLOP/B): memory-bound
    (gpu(tensor=0.4), H, 0.4 * 989.5e12, 0.5 * 3.35e12, "tensor", "memory"),
    # a DRAM-light GEMM: intensity 989.5e12*0.9 / (0.05*3.35e12) = 5316 > ridge 295
    (gpu(dram=0.05, tensor=0.9), H, 0.9 * 989.5e12, 0.05 * 3.35e12, "tensor", "compute"),
    # pipes add up; the busiest by FLOPs sets the roof
    (gpu(tensor=0.1, fp32=0.5, fp64=0.2), H, 0.1 * 989.5e12 + 0.5 * 67e12 + 0.2 * 34e12,
     0.5 * 3.35e12, "tensor", "memory"),
    (gpu(tensor=0.0, fp32=0.6, fp16=0.0), H, 0.6 * 67e12, 0.5 * 3.35e12, "fp32", "compute"),
    # a stencil: FP64 busy, DRAM saturated -> memory-bound below the FP64 ridge (10.1)
    (gpu(dram=0.95, fp64=0.3), H, 0.3 * 34e12, 0.95 * 3.35e12, "fp64", "memory"),
    # AMD: the matrix cores and the VALU; 431 FLOP/B, right of the MFMA ridge (247)
    (gpu(model=MI300X, vendor="amd", dram=0.3, tensor=0.5, valu=0.2), M,
     0.5 * 1307.4e12 + 0.2 * 163.4e12, 0.3 * 5.3e12, "tensor", "compute"),
    (gpu(model=MI300X, vendor="amd", dram=0.9, tensor=0.5), M, 0.5 * 1307.4e12,
     0.9 * 5.3e12, "tensor", "memory"),
    # activities are ratios: a rounding above 1 counts as 1
    (gpu(dram=1.02, fp64=1.01), H, 34e12, 3.35e12, "fp64", "compute"),
    # nothing busy: a point that cannot be drawn, said to be idle
    (gpu(tensor=0.0, fp32=0.0), H, 0.0, 0.5 * 3.35e12, "tensor", "idle"),
])
def test_a_gpu_is_placed_from_its_activities(activity, peaks, flops, bps, pipe, bound):
    point = place(activity, peaks)
    assert point is not None
    assert point.flops == pytest.approx(flops)
    assert point.bytes_per_s == pytest.approx(bps)
    assert point.intensity == pytest.approx(flops / bps)
    assert (point.pipe, point.bound) == (pipe, bound)
    assert point.roof == pytest.approx(min(peaks.pipes[pipe], flops / bps * peaks.memory_bps))
    assert point.plotted is (flops > 0)


def test_the_roof_is_the_memory_slope_left_of_the_ridge_and_the_peak_right_of_it():
    left = place(gpu(dram=0.8, tensor=0.2), H)
    right = place(gpu(dram=0.01, tensor=0.2), H)
    assert left and right
    assert left.roof == pytest.approx(left.intensity * H.memory_bps)
    assert left.roof < H.pipes["tensor"]
    assert right.roof == H.pipes["tensor"]
    assert right.share_of_roof == pytest.approx(0.2)


def test_no_dram_traffic_has_no_intensity_and_is_not_drawn():
    point = place(gpu(dram=0.0, tensor=0.5), H)
    assert point and point.intensity is None and not point.plotted
    assert (point.bound, point.roof) == ("compute", H.pipes["tensor"])


@pytest.mark.parametrize(("activity", "placed"), [
    (gpu(dram=None, tensor=0.5), False),  # no DRAM activity
    (gpu(tensor=None, fp32=None), False),  # no pipe
    (gpu(valu=0.5), False),  # a pipe this model has no peak for (an AMD field on an H100)
    (gpu(fp16=0.1), True),
])
def test_a_gpu_without_dram_or_a_pipe_gets_no_point(activity, placed):
    assert (place(activity, H) is not None) is placed


@pytest.mark.parametrize(("gpus", "status", "missing", "partial"), [
    ([], NO_GPUS, (), ()),
    # dcgm-exporter without profiling (or DCP unsupported): nothing to draw from
    ([gpu(dram=None)], NO_FIELDS, ("dram", "tensor", "fp16", "fp32", "fp64"), ()),
    # DRAM alone, or pipes without DRAM, is not a roofline
    ([gpu(dram=0.4)], NO_FIELDS, ("tensor", "fp16", "fp32", "fp64"), ()),
    ([gpu(dram=None, tensor=0.3)], NO_FIELDS, ("dram", "fp16", "fp32", "fp64"), ()),
    # dcgm-exporter's default counters: tensor + DRAM, FP pipes missing from the count
    ([gpu(tensor=0.3)], READY, ("fp16", "fp32", "fp64"), ("fp16", "fp32", "fp64")),
    ([gpu(tensor=0.3, fp16=0.0, fp32=0.1, fp64=0.0)], READY, (), ()),
    # AMD without ProfilerMetrics: UMC activity alone
    ([gpu(model=MI300X, vendor="amd", dram=0.2)], NO_FIELDS, ("tensor", "valu"), ()),
    ([gpu(model=MI300X, vendor="amd", dram=0.2, tensor=0.4)], READY, ("valu",), ("valu",)),
    # a model without kept peaks, or none at all: said, not guessed
    ([gpu(model="NVIDIA L40S", tensor=0.3)], UNKNOWN_MODEL, ("fp16", "fp32", "fp64"), ()),
    ([gpu(model="", tensor=0.3)], UNKNOWN_MODEL, ("fp16", "fp32", "fp64"), ()),
    ([gpu(tensor=0.3), gpu("n2:0", model="NVIDIA H100 PCIe", tensor=0.3)], MIXED_MODELS,
     ("fp16", "fp32", "fp64"), ()),
])
def test_the_job_roofline_says_what_it_could_draw(gpus, status, missing, partial):
    result = roofline(gpus)
    assert (result.status, result.missing, result.partial) == (status, missing, partial)
    assert result.ready is (status == READY)
    assert bool(result.reason) is (status != READY)


def test_one_point_per_gpu_measured_and_the_others_named():
    result = roofline([gpu("n1:0", tensor=0.5), gpu("n1:1", tensor=0.4),
                       gpu("n1:2", dram=None, tensor=None)])
    assert result.status == READY and result.peaks is H and result.model == H100
    assert [p.gpu for p in result.points] == ["n1:0", "n1:1"]
    assert result.unmeasured_gpus == ("n1:2",)


def test_an_unknown_model_names_what_was_seen():
    result = roofline([gpu(model="NVIDIA L40S", tensor=0.3)])
    assert "'NVIDIA L40S'" in result.reason and not result.points
