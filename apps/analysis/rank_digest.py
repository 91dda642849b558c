"""One rank's trace reduced to what the comparison of ranks reads (pure).

A ``RankTrace`` holds every kept event of its file (tens of megabytes of Python objects for
a 100 MB trace); comparing ranks needs only each rank's steps and phases and what tells two
runs apart. ``digest(trace, config)`` cuts the file into steps at once, so its events can
go before the next file is read: a job of 64 ranks is analysed in the memory of one rank
(issue 29), and the cutting runs where the file was read (a reader process).
"""

from __future__ import annotations

from dataclasses import dataclass

from apps.analysis.step_phases import PhaseConfig, RankSteps, rank_steps
from apps.analysis.trace_types import DistributedInfo, Origin, RankTrace

# Timestamps above this are epoch microseconds (after 2001-09-09): traces without
# baseTimeNanoseconds carry absolute times; relative ones stay under ~7.9e12 (a trimonth).
EPOCH_US_FLOOR = 1e15


@dataclass(frozen=True)
class RankDigest:
    """What ``phases.analyze`` reads of one trace file: who wrote it, when, and its steps.

    ``span_us`` is the file's first and last instant in epoch microseconds (``None`` when
    its times are relative and it has no ``baseTimeNanoseconds``); ``config`` is the one
    the steps were cut with, so a digest is never compared under another.
    """

    source: str
    distributed: DistributedInfo | None
    origin: Origin
    sha256: str
    span_us: tuple[float, float] | None
    cut: RankSteps
    config: PhaseConfig

    @property
    def rank(self) -> int | None:
        return self.distributed.rank if self.distributed else None


def digest(trace: RankTrace, config: PhaseConfig) -> RankDigest:
    """Cut ``trace`` into steps and phases and keep only that (see the module)."""
    return RankDigest(source=trace.source, distributed=trace.distributed, origin=trace.origin,
                      sha256=trace.sha256, span_us=absolute_span(trace),
                      cut=rank_steps(trace, config), config=config)


def absolute_span(trace: RankTrace) -> tuple[float, float] | None:
    """First and last instant of the file, in epoch microseconds.

    With ``baseTimeNanoseconds`` the times are relative to it; without, many real traces
    carry epoch microseconds already (recognised by their size); otherwise unknown.
    """
    if not trace.events:
        return None
    lo, hi = min(e.ts for e in trace.events), max(e.end for e in trace.events)
    if trace.base_time_ns is not None:
        base_us = trace.base_time_ns / 1000
        return base_us + lo, base_us + hi
    return (lo, hi) if lo >= EPOCH_US_FLOOR else None
