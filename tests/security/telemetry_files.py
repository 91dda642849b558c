"""Write small OpenMetrics files for detection tests: dcgm-exporter GPU series and
node_exporter counters, one sample per step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

GPU_FAMILIES = {"util": "DCGM_FI_DEV_GPU_UTIL", "fb": "DCGM_FI_DEV_FB_USED",
                "tensor": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "power": "DCGM_FI_DEV_POWER_USAGE",
                "sm": "DCGM_FI_PROF_SM_ACTIVE"}


def gpu_lines(host: str, gpu: int, start: float, steps: int, step: float,
              values: Callable[[int], dict[str, float]], job: Callable[[int], str] | None = None,
              model: str = "NVIDIA H100 80GB HBM3") -> dict[str, list[str]]:
    """Per family, the sample lines of one GPU (``values(i)`` gives util %, fb MiB...)."""
    out: dict[str, list[str]] = {}
    for i in range(steps):
        t = start + (i + 1) * step
        labels = f'gpu="{gpu}",UUID="GPU-{host}-{gpu}",modelName="{model}",Hostname="{host}"'
        owner = job(i) if job else ""
        if owner:
            labels += f',hpc_job="{owner}"'
        for key, value in values(i).items():
            out.setdefault(GPU_FAMILIES[key], []).append(f"{GPU_FAMILIES[key]}{{{labels}}} "
                                                         f"{value} {t:.0f}")
    return out


def counter_lines(family: str, host: str, start: float, steps: int, step: float,
                  rate: Callable[[int], float], device: str = "mlx5_0") -> list[str]:
    total, lines = 0.0, []
    for i in range(steps + 1):
        t = start + i * step
        lines.append(f'{family}{{device="{device}",port="1",instance="{host}:9100",job="node"}} '
                     f"{total:.0f} {t:.0f}")
        total += rate(i) * step
    return lines


def cpu_lines(host: str, start: float, steps: int, step: float, busy: Callable[[int], float],
              cores: int = 4) -> list[str]:
    """node_exporter's per-core seconds: ``busy(i)`` of each core busy, the rest idle (and a
    ``user`` mode series the reader must leave out)."""
    lines = []
    for core in range(cores):
        idle = user = 0.0
        for i in range(steps + 1):
            t = start + i * step
            labels = f'cpu="{core}",instance="{host}:9100",job="node"'
            lines.append(f'node_cpu_seconds_total{{{labels},mode="idle"}} {idle:.1f} {t:.0f}')
            lines.append(f'node_cpu_seconds_total{{{labels},mode="user"}} {user:.1f} {t:.0f}')
            idle += (1 - busy(i)) * step
            user += busy(i) * step
    return lines


def write(path: Path, families: dict[str, list[str]]) -> Path:
    """One file: each family once (samples of a series contiguous), then # EOF."""
    body = []
    for family, lines in families.items():
        kind = "counter" if family.endswith("_total") else "gauge"
        name = family[:-6] if kind == "counter" else family
        body.append(f"# TYPE {name} {kind}")
        body += sorted(lines, key=lambda line: (line.split(" ")[0], float(line.split(" ")[-1])))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(body) + "\n# EOF\n")
    return path


def merge(*parts: dict[str, list[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for part in parts:
        for family, lines in part.items():
            out.setdefault(family, []).extend(lines)
    return out
