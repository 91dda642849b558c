"""Sets of time intervals as sorted, non-overlapping ``(start, end)`` lists.

The phase breakdown is interval arithmetic: the union of collective spans on several
threads, a phase minus the communication inside it, a step window cut into labelled
segments. Everything here is linear after one sort.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence

Interval = tuple[float, float]
Segment = tuple[float, float, str]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Merge overlapping or touching intervals; empty and inverted ones vanish."""
    merged: list[Interval] = []
    current_start = current_end = 0.0
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= current_end:
            if end > current_end:
                current_end = end
                merged[-1] = (current_start, end)
        else:
            current_start, current_end = start, end
            merged.append((start, end))
    return merged


class IntervalSet:
    """A merged interval list with its start and end times indexed, to cut windows fast."""

    __slots__ = ("ends", "merged", "starts")

    def __init__(self, intervals: Iterable[Interval]) -> None:
        self.merged = union(intervals)
        self.starts = [start for start, _ in self.merged]
        self.ends = [end for _, end in self.merged]  # sorted too: the intervals are disjoint

    def within(self, lo: float, hi: float) -> list[Interval]:
        """The part of the set inside ``[lo, hi)``."""
        if hi <= lo:
            return []
        first, last = bisect_right(self.ends, lo), bisect_left(self.starts, hi)
        part = self.merged[first:last]
        # every interval found ends after lo and starts before hi: clip the two ends only
        if part:
            if part[0][0] < lo:
                part[0] = (lo, part[0][1])
            if part[-1][1] > hi:
                part[-1] = (part[-1][0], hi)
        return part

    def __bool__(self) -> bool:
        return bool(self.merged)


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    """The parts of ``intervals`` inside ``[lo, hi)``."""
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]


def subtract(base: Sequence[Interval], cut: Sequence[Interval]) -> list[Interval]:
    """``base`` minus ``cut``, both merged lists."""
    out: list[Interval] = []
    j = 0
    for start, end in base:
        while j < len(cut) and cut[j][1] <= start:
            j += 1
        k, cursor = j, start
        while k < len(cut) and cut[k][0] < end:
            if cut[k][0] > cursor:
                out.append((cursor, cut[k][0]))
            cursor = max(cursor, cut[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def total(intervals: Iterable[Interval]) -> float:
    return sum(end - start for start, end in intervals)


def partition(window: Interval, layers: Sequence[tuple[str, Sequence[Interval]]]) -> list[Segment]:
    """Cut ``window`` into labelled segments; an earlier layer wins where layers overlap.

    Each layer is a label and its intervals. Time no layer covers is left out
    (the caller calls it "other").
    """
    lo, hi = window
    covered: list[Interval] = []
    segments: list[Segment] = []
    for label, intervals in layers:
        own = subtract(union(clip(intervals, lo, hi)), covered)
        segments += [(start, end, label) for start, end in own]
        covered = union([*covered, *own])
    return sorted(segments)


def label_at(segments: Sequence[Segment], starts: Sequence[float], when: float) -> str | None:
    """The label of the segment holding ``when`` (``starts`` = the segments' start times)."""
    index = bisect_right(starts, when) - 1
    if index >= 0 and segments[index][0] <= when < segments[index][1]:
        return segments[index][2]
    return None
