"""Helpers the security rules share: runs of buckets, spans, means, severities, windows.

A *run* is a stretch of consecutive buckets meeting a condition (a gap of more than 1.5
buckets ends it); it lasts from its first bucket's start to its last bucket's end.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from apps.analysis.security_types import (
    SEVERITIES,
    Allow,
    GpuPoint,
    GpuTrack,
    Inputs,
    NodePoint,
    RuleConfig,
)


class Timed(Protocol):
    """A point or bucket that ends at ``t``."""

    @property
    def t(self) -> float: ...


P = TypeVar("P", bound=Timed)


def param(cfg: RuleConfig, name: str) -> Any:
    """A threshold from the rule's configuration (``security_rules.config`` fills every
    one, defaults included, so a missing name is a programming error)."""
    return cfg.params[name]


def lower(severity: str, steps: int) -> str:
    """``severity`` lowered by ``steps`` levels (never below info)."""
    index = SEVERITIES.index(severity) if severity in SEVERITIES else 0
    return SEVERITIES[max(0, index - steps)]


def runs(points: Sequence[P], keep: Callable[[P], bool], step: float) -> list[list[int]]:
    """Indices of maximal stretches of consecutive kept points."""
    out: list[list[int]] = []
    current: list[int] = []
    for i, point in enumerate(points):
        if not keep(point):
            current = _close(out, current)
            continue
        if current and point.t - points[current[-1]].t > 1.5 * step:
            current = _close(out, current)
        current.append(i)
    _close(out, current)
    return out


def _close(out: list[list[int]], current: list[int]) -> list[int]:
    if current:
        out.append(current)
    return []


def span(points: Sequence[P], run: list[int], step: float) -> tuple[float, float]:
    """(start of the first bucket, end of the last) of a run."""
    return points[run[0]].t - step, points[run[-1]].t


def long_enough(points: Sequence[P], run: list[int], step: float, minutes: float) -> bool:
    start, end = span(points, run, step)
    return end - start >= minutes * 60 - 1e-6


def mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None and math.isfinite(v)]
    return sum(known) / len(known) if known else None


def reportable(inputs: Inputs, end: float) -> bool:
    """A run is reported when it ends inside the run's window (not in the look-back)."""
    return end > inputs.start


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def window(start: float, end: float) -> dict[str, str]:
    return {"start": iso(start), "end": iso(end)}


def gpu_tracks(inputs: Inputs) -> tuple[float, tuple[GpuTrack, ...]]:
    frame = inputs.frame
    return (frame.step, frame.gpus) if frame else (60.0, ())


def quiet(allow: Allow, host: str, point: GpuPoint | NodePoint,
          track: GpuTrack | None = None) -> bool:
    """Whether a quiet window covers the point: a GPU's point (``track`` given) is quiet in
    a node's windows and in its own GPU's; a node's point only in whole-node windows."""
    if not allow.quiet:
        return False
    if track is None:
        return bool(allow.quiet_reason(host, point.t))
    return bool(allow.quiet_reason(host, point.t, track.gpu, track.uuid))


def as_int(text: str) -> int | None:
    return int(text) if text.isdigit() else None
