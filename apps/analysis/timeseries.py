"""Time series as every metric source hands them over (Prometheus, OpenMetrics files).

A ``Series`` is one metric of one labelled source: ``points`` are ``(unix seconds, value)``
floats in time order. Prometheus range results and OpenMetrics samples both become this
type, so the efficiency maths never knows where the numbers came from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

Point = tuple[float, float]


@dataclass(frozen=True)
class Series:
    """One time series: metric name, labels (without ``__name__``) and points."""

    metric: str
    labels: dict[str, str] = field(default_factory=dict)
    points: tuple[Point, ...] = ()

    def label(self, *names: str) -> str:
        """The first of ``names`` this series carries ('' when none)."""
        for name in names:
            value = self.labels.get(name)
            if value:
                return value
        return ""


@dataclass(frozen=True)
class Window:
    """A half-open time window ``(start, end]`` in unix seconds."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)


def finite(points: Iterable[Point]) -> list[Point]:
    """Drop NaN and infinite values (Prometheus sends them as strings, we parse them)."""
    return [(t, v) for t, v in points if math.isfinite(v)]


def clip(points: Iterable[Point], window: Window) -> list[Point]:
    """Points with ``start < t <= end``."""
    return [(t, v) for t, v in points if window.start < t <= window.end]


def measured(points: Iterable[Point], window: Window) -> list[Point]:
    """``clip(finite(points), window)`` in one pass: finite values with ``start < t <= end``
    (the summaries' input; one pass matters on a 64-GPU job page)."""
    start, end, isfinite = window.start, window.end, math.isfinite
    return [(t, v) for t, v in points if start < t <= end and isfinite(v)]


def regrid(points: Sequence[Point], window: Window, n: int,
           how: str = "mean") -> list[float | None]:
    """Reduce ``points`` into ``n`` equal buckets of ``window`` (None: no sample there).

    Bucket ``k`` covers ``(start + k*w, start + (k+1)*w]``, the same alignment Prometheus'
    ``avg_over_time(x[w])`` evaluated at ``start + (k+1)*w`` uses. ``how`` is ``mean``
    (measures), ``max`` (codes such as the last XID) or ``or`` (bitmasks such as throttle
    reasons: a bucket keeps every reason any of its samples showed).
    """
    if n <= 0 or window.seconds <= 0:
        return []
    width = window.seconds / n
    buckets: list[list[float]] = [[] for _ in range(n)]
    for t, v in points:
        if not window.start < t <= window.end or not math.isfinite(v):
            continue
        # The tolerance keeps a timestamp sitting on a bucket end (up to float and
        # millisecond rounding) in the bucket it ends.
        k = min(n - 1, max(0, math.ceil((t - window.start) / width - 1e-6) - 1))
        buckets[k].append(v)
    return [_reduce(values, how) if values else None for values in buckets]


def _reduce(values: list[float], how: str) -> float:
    if how == "max":
        return max(values)
    if how == "or":
        bits = 0
        for value in values:
            bits |= int(value) if value >= 0 else 0
        return float(bits)
    return sum(values) / len(values)


def counter_rate(points: Sequence[Point]) -> tuple[Point, ...]:
    """Per-second rate of a counter between consecutive samples, stamped at the later one.

    A drop is a counter reset (an exporter or driver restart): the new value is what was
    counted since, as Prometheus' ``rate()`` assumes.
    """
    rates = []
    for (t0, v0), (t1, v1) in pairwise(points):
        if t1 > t0:
            rates.append((t1, (v1 - v0 if v1 >= v0 else v1) / (t1 - t0)))
    return tuple(rates)


def counter_increase(points: Sequence[Point]) -> float:
    """How much a counter grew over ``points`` (resets counted as in ``counter_rate``)."""
    total = 0.0
    for (_, v0), (_, v1) in pairwise(points):
        total += v1 - v0 if v1 >= v0 else v1
    return total


def combine(series: Iterable[Sequence[Point]], how: str = "sum") -> tuple[Point, ...]:
    """Several series of one host into one, per timestamp: ``sum``, ``min``, ``max`` or
    ``mean`` (the InfiniBand ports of a node: traffic adds up, the slowest link is the
    minimum; its CPUs' idle rates average)."""
    by_time: dict[float, list[float]] = {}
    for points in series:
        for t, v in points:
            by_time.setdefault(t, []).append(v)
    picks: dict[str, Callable[[list[float]], float]] = {
        "sum": sum, "min": min, "max": max, "mean": lambda values: sum(values) / len(values)}
    pick = picks[how]
    return tuple((t, float(pick(values))) for t, values in sorted(by_time.items()))


@dataclass(frozen=True, order=True)
class GpuKey:
    """One physical GPU: the node's short host name and the NVML index (dcgm ``gpu``)."""

    host: str
    gpu: int

    def __str__(self) -> str:
        return f"{self.host}:{self.gpu}"


def merge(series: Iterable[Series]) -> tuple[Point, ...]:
    """Union of the points of several series of one source, one value per timestamp.

    One GPU's series splits whenever its labels change (``hpc_job`` appears, a job id
    changes) and a shared GPU has one identical copy per job: merging gives back the
    single timeline of the device.
    """
    parts = list(series)
    if len(parts) == 1:
        return parts[0].points  # the usual case: already one ordered timeline
    by_time: dict[float, float] = {}
    for item in parts:
        by_time.update(item.points)
    return tuple(sorted(by_time.items()))
