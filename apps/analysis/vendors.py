"""GPU vendors: what each calls the portal's vendor-neutral measures (pure).

The measures keep one key whatever the exporter (``gpu_util`` is "busy", ``sm_active``
"computing", ``nvlink`` the GPU-to-GPU link); pages name them as the GPU's vendor does, so
an MI300X job says "GFX activity" and "XGMI" where an H100 job says "GPU utilisation" and
"NVLink". ``vendor`` is ``nvidia``, ``amd``, or several joined by ``+`` (a job, or a
cluster, mixing both): NVIDIA's words then, the measure keys being NVIDIA's.
"""

from __future__ import annotations

from collections.abc import Iterable

VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD"}

_WORDS: dict[str, dict[str, str]] = {
    "nvidia": {"sm_active": "SM active", "gr_engine_active": "graphics engine active",
               "gpu_util": "GPU utilisation (duty cycle)", "sm_clock": "SM clock",
               "nvlink": "NVLink", "tensor_active": "tensor pipe active"},
    "amd": {"sm_active": "VALU busy (gpu_prof_sm_active)",
            "gpu_util": "GFX activity (gpu_gfx_activity)", "sm_clock": "GFX clock",
            "nvlink": "XGMI", "tensor_active": "MFMA utilisation"},
}


def measure_words(key: str, vendor: str = "") -> str:
    """What ``key`` (a measure, or ``nvlink`` for the GPU-to-GPU link) is called on
    ``vendor``'s GPUs; NVIDIA's words when the vendor is unknown or mixed."""
    words = _WORDS.get(vendor, {})
    return words.get(key) or _WORDS["nvidia"].get(key, key)


def joined(vendors: Iterable[str]) -> str:
    """Several GPUs' vendors as one value: ``amd``, ``nvidia``, ``amd+nvidia`` or ''."""
    return "+".join(sorted({v for v in vendors if v}))
