"""GPU efficiency of one job: what the allocated GPU-hours were spent on.

Inputs are per-GPU series in portal units (ratios 0..1, MiB), from Prometheus or from an
OpenMetrics file alike. Hours come from Slurm (allocation x elapsed), never from counting
samples: Prometheus supplies only the *weighting* (the fraction of measured time spent in
each state), which is applied to Slurm's hours (shared prometheus notes §11).

Each sample (a scrape, or a window mean) is split into:

- **useful**: SM active (the activity measure);
- **waiting**: busy but not computing, ``max(util, sm) - sm``. A kernel was resident, the
  SMs were not: the NCCL-waiting signature ("util high, SM low"). Where NVLink/PCIe
  traffic is measured, the share of waiting time with traffic is reported too;
- **held idle**: no kernel, but a process holds GPU memory (``Thresholds.memory_held_mib``);
- **no process**: no kernel and no memory held (at most a bare CUDA context).

With duty cycle (GPU util) alone, busy time cannot be split: it all counts as useful and
the result is flagged as an upper bound.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise

from apps.analysis.idleness import RULES as IDLE_RULES
from apps.analysis.timeseries import GpuKey, Point, Series, Window, measured

ACTIVITY_FALLBACK = ("sm_active", "gr_engine_active", "gpu_util")
MEASURE_NAMES = {
    "sm_active": "SM active",
    "gr_engine_active": "graphics engine active",
    "gpu_util": "GPU utilisation (duty cycle)",
}
TRAFFIC = ("nvlink_tx", "nvlink_rx", "pcie_tx", "ib_tx")
MEAN_MEASURES = ("gpu_util", "sm_active", "gr_engine_active", "tensor_active", "dram_active",
                 "fb_used", "power")


@dataclass(frozen=True)
class Thresholds:
    """Where "idle" and "memory held" start: the site's one reading (``idleness.IdleRules``,
    settings ``IDLE_BELOW_PERCENT`` and ``MEMORY_HELD_MIB``), so the split agrees with the
    findings and the alerts."""

    idle_activity: float = IDLE_RULES.idle_below  # activity below this counts as idle
    memory_held_mib: float = IDLE_RULES.memory_held_mib  # more than a bare CUDA context
    traffic_bytes: float = 1e6  # B/s of NVLink/PCIe traffic that counts as communicating


@dataclass(frozen=True)
class Split:
    """Time (fractions, seconds or hours: the caller says which) by what the GPU did."""

    useful: float = 0.0
    waiting: float = 0.0
    held_idle: float = 0.0
    no_process: float = 0.0

    @property
    def total(self) -> float:
        return self.useful + self.waiting + self.held_idle + self.no_process

    @property
    def busy(self) -> float:
        return self.useful + self.waiting

    def scaled(self, factor: float) -> Split:
        return Split(self.useful * factor, self.waiting * factor, self.held_idle * factor,
                     self.no_process * factor)

    def plus(self, other: Split) -> Split:
        return Split(self.useful + other.useful, self.waiting + other.waiting,
                     self.held_idle + other.held_idle, self.no_process + other.no_process)


@dataclass(frozen=True)
class Stats:
    """Time-weighted mean and percentiles of one measure."""

    mean: float
    p5: float
    p50: float
    p95: float


@dataclass(frozen=True)
class GpuSummary:
    """One GPU over the job: activity statistics, means per measure and the time split.

    ``split`` holds fractions of ``measured_seconds`` (they sum to 1).
    """

    key: GpuKey
    measure: str
    measured_seconds: float
    activity: Stats
    idle_fraction: float
    split: Split
    means: dict[str, float] = field(default_factory=dict)
    memory_measured: bool = True
    waiting_with_traffic: float | None = None


@dataclass(frozen=True)
class JobEfficiency:
    """The job-level answer: hours by state, the measure used and the verdict in words."""

    allocated_gpu_hours: float
    measure: str
    gpus: tuple[GpuSummary, ...]
    missing: tuple[GpuKey, ...]
    fractions: Split
    hours: Split
    coverage: float
    means: dict[str, float]
    verdict: str

    @property
    def has_data(self) -> bool:
        return bool(self.gpus)

    @property
    def upper_bound(self) -> bool:
        return self.measure in ("gpu_util", "gr_engine_active")

    @property
    def measure_note(self) -> str:
        return measure_note(self.measure)


# --- Per GPU ---------------------------------------------------------------------------


def choose_measure(series: Mapping[str, Series]) -> str | None:
    """The best activity measure with data: SM active -> GR engine active -> GPU util."""
    for measure in ACTIVITY_FALLBACK:
        if measure in series and any(math.isfinite(v) for _, v in series[measure].points):
            return measure
    return None


def weights(points: Sequence[Point], window: Window) -> list[float]:
    """Seconds each point stands for: the gap since the previous one, capped at twice the
    usual gap (a longer gap is missing data, not a long sample)."""
    if not points:
        return []
    times = [t for t, _ in points]
    diffs = [b - a for a, b in pairwise(times)]
    positive = [d for d in diffs if d > 0]
    usual = statistics.median(positive) if positive else max(window.seconds, 1.0)
    cap = 2 * usual
    first = min(usual, max(times[0] - window.start, 0.0)) or usual
    return [first] + [cap if d > cap else (d if d > 0 else 0.0) for d in diffs]


def weighted_stats(points: Sequence[Point], w: Sequence[float]) -> Stats:
    total = sum(w)
    if not points or total <= 0:
        return Stats(0.0, 0.0, 0.0, 0.0)
    mean = sum(v * x for (_, v), x in zip(points, w, strict=True)) / total
    ordered = sorted(zip((v for _, v in points), w, strict=True))
    return Stats(mean, *(_quantile(ordered, total, q) for q in (0.05, 0.5, 0.95)))


def _quantile(ordered: list[tuple[float, float]], total: float, q: float) -> float:
    running = 0.0
    for value, weight in ordered:
        running += weight
        if running >= q * total - 1e-9:
            return value
    return ordered[-1][0]


def summarise_gpu(key: GpuKey, series: Mapping[str, Series], window: Window,
                  thresholds: Thresholds = Thresholds()) -> GpuSummary | None:
    """Summarise one GPU's series over the job window (None: no activity data at all)."""
    measure = choose_measure(series)
    if measure is None:
        return None
    activity = measured(series[measure].points, window)
    if not activity:
        return None
    w = weights(activity, window)
    lookup = {m: dict(activity if m == measure else measured(s.points, window))
              for m, s in series.items()}
    split, traffic_share = _split(measure, activity, w, lookup, thresholds)
    total = sum(w)
    grid = ([t for t, _ in activity], w)
    idle = sum(x for (_, v), x in zip(activity, w, strict=True) if v < thresholds.idle_activity)
    return GpuSummary(
        key=key, measure=measure, measured_seconds=total,
        activity=weighted_stats(activity, w), idle_fraction=idle / total,
        split=split.scaled(1 / total), means=_means(lookup, window, grid),
        memory_measured="fb_used" in lookup and bool(lookup["fb_used"]),
        waiting_with_traffic=traffic_share,
    )


def _split(measure: str, activity: list[Point], w: list[float],
           lookup: dict[str, dict[float, float]],
           thresholds: Thresholds) -> tuple[Split, float | None]:
    """Seconds by state, and the share of waiting time with communication traffic.

    Plain float sums: this loop runs once per sample of every GPU of a job.
    """
    util = lookup.get("gpu_util", {}) if measure != "gpu_util" else {}
    memory = lookup.get("fb_used", {})
    traffic = [lookup[m] for m in TRAFFIC if lookup.get(m)]
    held_mib, min_traffic = thresholds.memory_held_mib, thresholds.traffic_bytes
    useful = waiting = held = empty = waiting_traffic = 0.0
    for (t, a), seconds in zip(activity, w, strict=True):
        a = min(1.0, max(0.0, a))
        u = util.get(t)
        busy = a if u is None else max(min(1.0, max(0.0, u)), a)
        useful += a * seconds
        waiting += (busy - a) * seconds
        mem = memory.get(t)
        if mem is None or mem >= held_mib:
            held += (1.0 - busy) * seconds
        else:
            empty += (1.0 - busy) * seconds
        if traffic and any(s.get(t, 0.0) >= min_traffic for s in traffic):
            waiting_traffic += (busy - a) * seconds
    share = waiting_traffic / waiting if traffic and waiting > 0 else None
    return Split(useful, waiting, held, empty), share


def _unit(value: float) -> float:
    return min(1.0, max(0.0, value))


def _means(lookup: dict[str, dict[float, float]], window: Window,
           grid: tuple[list[float], list[float]]) -> dict[str, float]:
    """Time-weighted means; series on the activity's timestamps reuse its weights."""
    means: dict[str, float] = {}
    for measure in MEAN_MEASURES:
        points = sorted(lookup.get(measure, {}).items())
        same = len(points) == len(grid[0]) and all(
            t == g for (t, _), g in zip(points, grid[0], strict=True))
        w = grid[1] if same else weights(points, window)
        total = sum(w)
        if total > 0:
            means[measure] = sum(v * x for (_, v), x in zip(points, w, strict=True)) / total
    return means


# --- Per job ---------------------------------------------------------------------------


def summarise_job(gpus: Mapping[GpuKey, Mapping[str, Series]], window: Window,
                  allocated_gpu_hours: float, expected: Sequence[GpuKey] = (),
                  thresholds: Thresholds = Thresholds(), gpu_count: int = 0) -> JobEfficiency:
    """Per-GPU summaries, then the job split scaled to Slurm's allocated GPU-hours.

    ``expected`` lists the GPUs Slurm says the job held; those without any series are
    reported as missing (never as zeros). ``gpu_count`` is Slurm's GPU count, for when
    the held GPUs are not known one by one.
    """
    summaries = tuple(s for key in sorted(gpus)
                      if (s := summarise_gpu(key, gpus[key], window, thresholds)) is not None)
    seen = {s.key for s in summaries}
    missing = tuple(sorted(k for k in set(expected) if k not in seen))
    measured = sum(s.measured_seconds for s in summaries)
    fractions = Split()
    for s in summaries:
        fractions = fractions.plus(s.split.scaled(s.measured_seconds / measured))
    allocated_seconds = allocated_gpu_hours * 3600
    result = JobEfficiency(
        allocated_gpu_hours=allocated_gpu_hours, measure=_weakest(summaries), gpus=summaries,
        missing=missing, fractions=fractions, hours=fractions.scaled(allocated_gpu_hours),
        coverage=measured / allocated_seconds if allocated_seconds > 0 else 0.0,
        means=_job_means(summaries), verdict="",
    )
    return _with_verdict(result, max(len(summaries) + len(missing), gpu_count))


def _weakest(summaries: Sequence[GpuSummary]) -> str:
    used = {s.measure for s in summaries}
    for measure in reversed(ACTIVITY_FALLBACK):
        if measure in used:
            return measure
    return ""


def _job_means(summaries: Sequence[GpuSummary]) -> dict[str, float]:
    means: dict[str, float] = {}
    for measure in MEAN_MEASURES:
        pairs = [(s.means[measure], s.measured_seconds) for s in summaries if measure in s.means]
        total = sum(w for _, w in pairs)
        if total > 0:
            means[measure] = sum(v * w for v, w in pairs) / total
    return means


# --- Words -----------------------------------------------------------------------------


def measure_note(measure: str) -> str:
    if measure == "gpu_util":
        return "profiling metrics unavailable: efficiency is an upper bound"
    if measure == "gr_engine_active":
        return "SM activity unavailable: graphics-engine activity used, an upper bound"
    return ""


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def _with_verdict(result: JobEfficiency, total_gpus: int) -> JobEfficiency:
    return replace(result, verdict=verdict(result, total_gpus))


def verdict(result: JobEfficiency, total_gpus: int) -> str:
    """One or two sentences a researcher can act on."""
    if not result.has_data:
        return "No GPU telemetry was found for this job's GPUs: its efficiency is unknown."
    f = result.fractions
    busy, computing = f.busy, f.useful
    if result.measure == "gpu_util":
        text = f"GPUs were busy {_pct(busy)} of the time. Profiling metrics unavailable: " \
               "efficiency is an upper bound."
    elif busy >= 0.3 and computing < 0.5 * busy:
        text = (f"GPUs were busy {_pct(busy)} of the time but computing {_pct(computing)}: "
                "most busy time was waiting.")
    elif f.held_idle >= 0.5:
        text = (f"GPUs sat idle {_pct(f.held_idle)} of the time with memory held: "
                "a process kept the GPUs without using them.")
    elif f.no_process >= 0.5:
        text = (f"GPUs had no process {_pct(f.no_process)} of the time: "
                "allocated but unused.")
    elif computing >= 0.6:
        text = f"GPUs were computing {_pct(computing)} of the time (busy {_pct(busy)})."
    else:
        text = (f"GPUs were busy {_pct(busy)} of the time and computing {_pct(computing)}; "
                f"idle {_pct(f.held_idle + f.no_process)}.")
    if total_gpus > len(result.gpus):
        text += f" Telemetry covers {len(result.gpus)} of {total_gpus} GPUs."
    return text
