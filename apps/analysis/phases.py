"""Phase breakdown and straggler verdict over the per-rank traces of one job (pure).

The method (docs/traces.md): in synchronous data-parallel training every rank waits in
each collective for the last rank to arrive, so the ranks that *waited* show long
communication (and, under DDP, a long backward), while the rank that *caused* it shows
more own work: step time minus its collective time. The straggler is the rank with the
most own work per step against the median of the other ranks (leave-one-out, so two
ranks work), when that excess clears a relative and an absolute threshold and the rank is
last to arrive in most steps. Its phase is the one with the largest own-work excess.

``analyze(traces, config)`` returns a ``TraceAnalysis``; ``report(analysis)`` is the JSON
shape that ``manage.py analyze_trace --json`` prints and the API serves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from apps.analysis.step_phases import (
    OWN_PHASES,
    PHASES,
    PhaseConfig,
    RankSteps,
    StepPhases,
    rank_steps,
)
from apps.analysis.trace_types import DistributedInfo, Kind, RankTrace

__all__ = ["PHASES", "PhaseConfig", "RankResult", "Straggler", "TraceAnalysis",
           "TraceAnalysisError", "analyze", "recorded_span", "report"]


class TraceAnalysisError(ValueError):
    """Nothing in the traces can be analysed (no rank with a usable step)."""


@dataclass(frozen=True)
class RankResult:
    """One rank over the analysed steps; ``step_ms`` and ``phases_ms`` are per-step means."""

    rank: int
    steps: tuple[StepPhases, ...]
    sources: tuple[str, ...] = ()

    @property
    def step_ms(self) -> float:
        return sum(s.dur_ms for s in self.steps) / len(self.steps) if self.steps else 0.0

    @property
    def phases_ms(self) -> dict[str, float]:
        n = len(self.steps) or 1
        return {p: sum(s.phases_ms[p] for s in self.steps) / n for p in PHASES}


@dataclass(frozen=True)
class Straggler:
    """The rank that arrived last, the phase where it lost the time, and how much per step."""

    rank: int
    phase: str
    excess_ms: float


@dataclass(frozen=True)
class TraceAnalysis:
    """The verdict over all ranks. ``partial`` means ranks or steps are missing (see warnings)."""

    world_size: int
    steps: int
    ranks: tuple[RankResult, ...]
    dominant_phase: str | None
    straggler: Straggler | None
    waiting_ranks: tuple[int, ...]
    communication_bound: bool = False
    partial: bool = False
    timeline: str = "cpu"
    warnings: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        """The verdict in one sentence."""
        if self.straggler:
            s = self.straggler
            waiting = ", ".join(str(r) for r in self.waiting_ranks) or "none"
            return (f"rank {s.rank} is the straggler: {s.excess_ms:.1f} ms more own work per "
                    f"step than the other ranks, in {s.phase}; waiting ranks: {waiting}")
        if self.communication_bound:
            return ("communication-bound: ranks are balanced but spend most of each step in "
                    "collectives (network or message size), not a straggler")
        if len(self.ranks) < 2:
            return "a single rank: no straggler analysis"
        return f"no straggler: ranks are balanced; most time goes to {self.dominant_phase}"


# --- Entry point -------------------------------------------------------------------------


def analyze(traces: Sequence[RankTrace], config: PhaseConfig | None = None) -> TraceAnalysis:
    """Analyse the trace files of one run (one or more files per rank).

    1. Group files by rank (from distributedInfo) and check they belong to one run.
    2. Cut every file into steps and phases; merge the files of each rank.
    3. Keep the steps every rank has, and compare the ranks step by step.
    """
    config = config or PhaseConfig()
    if not traces:
        raise TraceAnalysisError("no trace files to analyse")
    world, warnings = _run_shape(traces)
    per_rank, more = _steps_by_rank([t for t in traces if _world(t) == world], config)
    warnings += more
    if not any(per_rank.values()):
        raise TraceAnalysisError("no rank has a usable training step: " + "; ".join(warnings))
    common, more = _common_steps(per_rank)
    warnings += more
    ranks = _rank_results(per_rank, common)
    missing = sorted(set(range(world)) - set(per_rank))
    if missing:
        warnings.append(f"partial result: the traces cover ranks {sorted(per_rank)} of world "
                        f"size {world}; missing ranks {missing} (a straggler among them "
                        f"cannot be named)")
    return _verdict(world, ranks, common, config, warnings, partial=bool(missing) or not common,
                    timeline=_timeline(traces))


def report(analysis: TraceAnalysis, digits: int = 3) -> dict[str, Any]:
    """The JSON shape of ``manage.py analyze_trace --json`` (issue 6)."""
    straggler = analysis.straggler
    return {
        "world_size": analysis.world_size,
        "steps": analysis.steps,
        "ranks": [{"rank": r.rank, "step_ms": round(r.step_ms, digits),
                   "phases_ms": {p: round(v, digits) for p, v in r.phases_ms.items()}}
                  for r in analysis.ranks],
        "dominant_phase": analysis.dominant_phase,
        "straggler": None if straggler is None else {
            "rank": straggler.rank, "phase": straggler.phase,
            "excess_ms": round(straggler.excess_ms, digits)},
        "waiting_ranks": list(analysis.waiting_ranks),
    }


# --- One run, ranks and steps ------------------------------------------------------------


def _world(trace: RankTrace) -> int:
    return trace.distributed.world_size if trace.distributed else 1


def _info(trace: RankTrace) -> DistributedInfo:
    return trace.distributed or DistributedInfo(rank=0, world_size=1)


def _run_shape(traces: Sequence[RankTrace]) -> tuple[int, list[str]]:
    """The world size most files agree on, and warnings about files that look foreign."""
    warnings = [f"{t.source}: no distributedInfo (not a torch.distributed run?): treated as "
                f"rank 0 of 1" for t in traces if t.distributed is None]
    worlds = Counter(_world(t) for t in traces)
    world = worlds.most_common(1)[0][0]
    for trace in traces:
        if _world(trace) != world:
            warnings.append(f"{trace.source}: world size {_world(trace)} differs from the "
                            f"other files' {world}: traces from a different job? left out")
    backends = {_info(t).backend for t in traces if _world(t) == world}
    if len(backends) > 1:
        warnings.append(f"files disagree on the backend ({sorted(backends)}): traces from "
                        f"different jobs?")
    warnings += _time_overlap_warnings([t for t in traces if _world(t) == world])
    return world, warnings


def _time_overlap_warnings(traces: Sequence[RankTrace]) -> list[str]:
    """Ranks of one run trace the same seconds; a file that overlaps no other is foreign."""
    spans = {t.source: span for t in traces if (span := _absolute_span(t)) is not None}
    if len(spans) < 2:
        return []
    lonely = [source for source, (lo, hi) in spans.items()
              if not any(lo < other_hi and other_lo < hi
                         for other, (other_lo, other_hi) in spans.items() if other != source)]
    return [f"{source}: recorded at a time no other file covers: traces from a different "
            f"run or job?" for source in lonely]


def recorded_span(traces: Sequence[RankTrace]) -> tuple[int, int] | None:
    """When the traces were recorded: first and last instant, in epoch nanoseconds."""
    spans = [span for t in traces if (span := _absolute_span(t)) is not None]
    if not spans:
        return None
    return int(min(lo for lo, _ in spans) * 1000), int(max(hi for _, hi in spans) * 1000)


def _absolute_span(trace: RankTrace) -> tuple[float, float] | None:
    """First and last instant of the file, in epoch microseconds."""
    if trace.base_time_ns is None or not trace.events:
        return None
    base_us = trace.base_time_ns / 1000
    return (base_us + min(e.ts for e in trace.events),
            base_us + max(e.end for e in trace.events))


def _steps_by_rank(traces: Sequence[RankTrace],
                   config: PhaseConfig) -> tuple[dict[int, dict[int, StepPhases]], list[str]]:
    """Every rank's steps by step number; a step seen twice for one rank is a duplicate."""
    per_rank: dict[int, dict[int, StepPhases]] = {}
    warnings: list[str] = []
    for trace in traces:
        cut: RankSteps = rank_steps(trace, config)
        warnings += cut.warnings
        rank = _info(trace).rank
        steps = per_rank.setdefault(rank, {})
        duplicates = sorted(set(steps) & {s.step for s in cut.steps})
        if duplicates:
            warnings.append(f"{trace.source}: duplicate rank {rank} (steps {_span(duplicates)} "
                            f"already read from another file); its copies were ignored")
        for step in cut.steps:
            steps.setdefault(step.step, step)
    return per_rank, warnings


def _common_steps(per_rank: Mapping[int, Mapping[int, StepPhases]]) -> tuple[list[int], list[str]]:
    """Step numbers every rank has; a warning names the steps some ranks lack."""
    present = [set(steps) for steps in per_rank.values() if steps]
    common = sorted(set.intersection(*present)) if present else []
    every = set.union(*present) if present else set()
    warnings = []
    for rank, steps in sorted(per_rank.items()):
        if not steps:
            warnings.append(f"rank {rank}: no usable step")
        elif lacking := sorted(every - set(steps)):
            warnings.append(f"mismatched steps: rank {rank} has no step {_span(lacking)} "
                            f"(compared on the {len(common)} steps all ranks have)")
    if present and not common:
        warnings.append("partial result: the ranks share no step, so they cannot be "
                        "compared; each rank is shown over its own steps")
    return common, warnings


def _rank_results(per_rank: Mapping[int, Mapping[int, StepPhases]],
                  common: Sequence[int]) -> tuple[RankResult, ...]:
    results = []
    for rank, steps in sorted(per_rank.items()):
        chosen = [steps[n] for n in common] if common else [steps[n] for n in sorted(steps)]
        results.append(RankResult(rank, tuple(chosen)))
    return tuple(r for r in results if r.steps)


def _span(numbers: Sequence[int]) -> str:
    return str(numbers[0]) if len(numbers) == 1 else f"#{numbers[0]}..#{numbers[-1]}"


def _timeline(traces: Sequence[RankTrace]) -> str:
    return "gpu" if any(e.kind is Kind.KERNEL for t in traces for e in t.events) else "cpu"


# --- The verdict -------------------------------------------------------------------------


def _verdict(world: int, ranks: tuple[RankResult, ...], common: Sequence[int],
             config: PhaseConfig, warnings: list[str], partial: bool,
             timeline: str) -> TraceAnalysis:
    straggler = _straggler(ranks, config) if common and len(ranks) >= 2 else None
    waiting = _waiting_ranks(ranks, straggler)
    dominant = _dominant_phase(ranks)
    comm_bound = straggler is None and len(ranks) >= 2 and all(
        r.phases_ms["communication"] >= config.comm_bound_fraction * r.step_ms for r in ranks)
    return TraceAnalysis(world_size=world, steps=len(common), ranks=ranks,
                         dominant_phase=dominant, straggler=straggler, waiting_ranks=waiting,
                         communication_bound=comm_bound, partial=partial, timeline=timeline,
                         warnings=tuple(warnings))


def _loo_excess(values: Mapping[int, float], rank: int) -> float:
    """``rank``'s value minus the median of the other ranks' (leave-one-out)."""
    return values[rank] - median(v for r, v in values.items() if r != rank)


def _straggler(ranks: Sequence[RankResult], config: PhaseConfig) -> Straggler | None:
    """The rank with the most own work per step, if it clears both thresholds consistently."""
    steps = range(len(ranks[0].steps))
    own = [{r.rank: r.steps[i].own_ms for r in ranks} for i in steps]
    excess = {r.rank: median(_loo_excess(own[i], r.rank) for i in steps) for r in ranks}
    candidate = max(excess, key=lambda rank: excess[rank])
    step_ms = median(s.dur_ms for r in ranks for s in r.steps)
    threshold = max(config.min_excess_ms, config.min_excess_fraction * step_ms)
    last_share = sum(max(o, key=lambda rank: o[rank]) == candidate for o in own) / len(own)
    if excess[candidate] < threshold or last_share < config.min_step_share:
        return None
    return Straggler(candidate, _straggler_phase(ranks, candidate), excess[candidate])


def _straggler_phase(ranks: Sequence[RankResult], rank: int) -> str:
    """The own-work phase (communication excluded) with the largest excess over the others."""
    steps = range(len(ranks[0].steps))

    def excess(phase: str) -> float:
        return median(_loo_excess({r.rank: r.steps[i].phases_ms[phase] for r in ranks}, rank)
                      for i in steps)

    return max(OWN_PHASES, key=excess)


def _waiting_ranks(ranks: Sequence[RankResult], straggler: Straggler | None) -> tuple[int, ...]:
    """Ranks whose communication exceeds the straggler's by at least half its excess."""
    if straggler is None:
        return ()
    comm = {r.rank: median(s.phases_ms["communication"] for s in r.steps) for r in ranks}
    floor = comm[straggler.rank] + straggler.excess_ms / 2
    return tuple(r for r in sorted(comm) if r != straggler.rank and comm[r] >= floor)


def _dominant_phase(ranks: Sequence[RankResult]) -> str | None:
    totals = {p: sum(r.phases_ms[p] for r in ranks) for p in PHASES}
    return max(totals, key=lambda p: totals[p]) if any(totals.values()) else None
