"""Published peaks of the GPU models the roofline knows, as data (issue 30, item 2).

One row per model: its dense peak FLOP/s per pipe the exporters measure, its peak memory
bandwidth, the names its exporter and Slurm give it, and where each figure comes from
(docs/roofline.md repeats the table with the same sources). Every figure is the vendor's
own, without structured sparsity; a figure not on the vendor's sheet is derived and says
how. The pipes:

- ``fp64``, ``fp32``, ``fp16``: NVIDIA's FP64/FP32/FP16 (non-tensor) pipes, as dcgm-exporter's
  ``DCGM_FI_PROF_PIPE_FP64_ACTIVE`` / ``_FP32_`` / ``_FP16_`` measure them;
- ``tensor``: NVIDIA's tensor (HMMA) pipe, ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE``, at the dense
  FP16/BF16 tensor peak; AMD's matrix cores (MFMA), ``gpu_prof_tensor_active_percent``, at
  the dense FP16/BF16 matrix peak;
- ``valu``: AMD's vector ALU, ``gpu_prof_valu_pipe_issue_util``, at the FP32 vector peak (the
  exporter does not say which precision the VALU ran).

``match`` patterns are searched, case-insensitively, in the exporter's model label
(dcgm-exporter's ``modelName``, AMD's ``card_model``) or a Slurm GPU type; a name that
matches no row, or a bare ``h100`` that does not say SXM or PCIe, is unknown: the page says
so rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

T = 1e12  # tera

NVIDIA_H100 = ("https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
               " (NVIDIA H100 Tensor Core GPU datasheet)")
HOPPER_WP = ("https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper "
             "(NVIDIA H100 Tensor Core GPU Architecture whitepaper, table 3: FP16 non-tensor)")
NVIDIA_H200 = ("https://www.nvidia.com/en-us/data-center/h200/ (NVIDIA H200 Tensor Core GPU "
               "datasheet)")
NVIDIA_A100 = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
               "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (NVIDIA A100 datasheet)")
AMPERE_WP = ("https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/"
             "nvidia-ampere-architecture-whitepaper.pdf (NVIDIA A100 Tensor Core GPU "
             "Architecture whitepaper, table 1: FP16 non-tensor)")
AMD_MI300X = ("https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html "
              "(AMD Instinct MI300X specifications)")
AMD_MI325X = ("https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html "
              "(AMD Instinct MI325X specifications)")
AMD_MI250X = ("https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html "
              "(AMD Instinct MI250X specifications)")


@dataclass(frozen=True)
class GpuPeaks:
    """One GPU model's published peaks: dense FLOP/s per pipe, memory bytes/s, sources."""

    key: str
    name: str
    vendor: str  # nvidia, amd
    pipes: Mapping[str, float]  # pipe -> peak FLOP/s (dense)
    memory_bps: float  # peak HBM bandwidth, bytes/s
    match: tuple[str, ...]  # regexes over a model label or Slurm GPU type
    sources: tuple[str, ...]
    notes: str = ""

    @property
    def ridge(self) -> dict[str, float]:
        """Per pipe, the intensity (FLOP/byte) where the memory roof meets its peak."""
        return {pipe: peak / self.memory_bps for pipe, peak in self.pipes.items()}


def _nvidia(fp64: float, fp32: float, fp16: float, tensor: float) -> dict[str, float]:
    return {"fp64": fp64 * T, "fp32": fp32 * T, "fp16": fp16 * T, "tensor": tensor * T}


def _amd(valu: float, mfma: float) -> dict[str, float]:
    return {"valu": valu * T, "tensor": mfma * T}


PEAKS: tuple[GpuPeaks, ...] = (
    GpuPeaks("h100-sxm", "NVIDIA H100 SXM5 80 GB", "nvidia", _nvidia(34, 67, 133.8, 989.5),
             3.35e12, (r"h100.*(sxm|hbm3)", r"h100[-_ ]?sxm"), (NVIDIA_H100, HOPPER_WP),
             "tensor: the datasheet's 1,979 TFLOPS FP16 with sparsity, halved"),
    GpuPeaks("h100-pcie", "NVIDIA H100 PCIe 80 GB", "nvidia", _nvidia(26, 51, 102.4, 756.5),
             2.0e12, (r"h100.*pcie",), (NVIDIA_H100, HOPPER_WP),
             "tensor: the datasheet's 1,513 TFLOPS FP16 with sparsity, halved"),
    GpuPeaks("h200", "NVIDIA H200 SXM 141 GB", "nvidia", _nvidia(34, 67, 133.8, 989.5),
             4.8e12, (r"h200(?!.*nvl)",), (NVIDIA_H200, HOPPER_WP),
             "the H100 SXM5's GH100 at the same clocks (the datasheets' FP64, FP32 and tensor "
             "figures are equal): FP16 non-tensor from the Hopper whitepaper"),
    GpuPeaks("a100-40gb", "NVIDIA A100 40 GB (SXM4 or PCIe)", "nvidia",
             _nvidia(9.7, 19.5, 78, 312), 1.555e12, (r"a100.*40\s*gb", r"a100[-_ ]?40g"),
             (NVIDIA_A100, AMPERE_WP)),
    GpuPeaks("a100-80gb-sxm", "NVIDIA A100 80 GB SXM4", "nvidia", _nvidia(9.7, 19.5, 78, 312),
             2.039e12, (r"a100.*sxm4?.*80\s*gb", r"a100.*80\s*gb.*sxm", r"a100[-_ ]?80g[-_ ]?sxm"),
             (NVIDIA_A100, AMPERE_WP)),
    GpuPeaks("a100-80gb-pcie", "NVIDIA A100 80 GB PCIe", "nvidia", _nvidia(9.7, 19.5, 78, 312),
             1.935e12, (r"a100.*pcie.*80\s*gb", r"a100.*80\s*gb.*pcie",
                        r"a100[-_ ]?80g[-_ ]?pcie"), (NVIDIA_A100, AMPERE_WP)),
    GpuPeaks("mi300x", "AMD Instinct MI300X", "amd", _amd(163.4, 1307.4), 5.3e12,
             (r"mi300x",), (AMD_MI300X,)),
    GpuPeaks("mi325x", "AMD Instinct MI325X", "amd", _amd(163.4, 1307.4), 6.0e12,
             (r"mi325x",), (AMD_MI325X,)),
    GpuPeaks("mi250x", "AMD Instinct MI250X", "amd", _amd(47.9, 383.0), 3.2768e12,
             (r"mi250x",), (AMD_MI250X,)),
)
BY_KEY = {p.key: p for p in PEAKS}
# What each vendor's exporter measures, in the order the page lists them.
VENDOR_PIPES: dict[str, tuple[str, ...]] = {"nvidia": ("tensor", "fp16", "fp32", "fp64"),
                                            "amd": ("tensor", "valu")}
PIPE_WORDS = {"tensor": "tensor pipe", "fp16": "FP16 pipe", "fp32": "FP32 pipe",
              "fp64": "FP64 pipe", "valu": "vector ALU (VALU)"}
AMD_PIPE_WORDS = {"tensor": "matrix cores (MFMA)"}


def peaks_for(model: str) -> GpuPeaks | None:
    """The row whose pattern ``model`` matches (a model label or Slurm GPU type); None
    when none does, or when two rows do (the name is ambiguous)."""
    text = model.strip().lower()
    if not text:
        return None
    found = {p.key for p in PEAKS if any(re.search(rx, text) for rx in p.match)}
    return BY_KEY[found.pop()] if len(found) == 1 else None


def pipe_words(pipe: str, vendor: str) -> str:
    """What the page calls ``pipe`` on ``vendor``'s GPUs."""
    return (AMD_PIPE_WORDS if vendor == "amd" else {}).get(pipe) or PIPE_WORDS.get(pipe, pipe)
