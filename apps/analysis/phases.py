"""Phase breakdown, GPU timeline and straggler verdict over the per-rank traces of one job (pure).

The method (docs/traces.md): in synchronous data-parallel training every rank waits in
each collective for the last rank to arrive, so the ranks that *waited* show long
communication (and, under DDP, a long backward), while the rank that *caused* it shows
more own work: step time minus its collective time. Step by step, the rank with the most
own work against the median of the other ranks (leave-one-out, so two ranks work) is the
one the others waited for, when that excess clears a relative and an absolute threshold.
A rank that does so in most steps is a straggler; one that does so in some steps while no
other rank ever does is an intermittent straggler (a periodic hook, a checkpoint, garbage
collection), and the steps are listed. Its phase is the one with the largest own-work
excess on those steps.

On GPU traces the verdict reads the GPU first: a GPU idle most of each step is starved by
its CPU, whatever the CPU phases say; communication costs only where it is exposed.

Traces of different runs are never compared: files that disagree on the GPU model, the
world size, the backend, or that were recorded at times no other file covers are named,
and no straggler is.

``analyze(traces, config)`` returns a ``TraceAnalysis``; it takes the files read
(``RankTrace``) or each already cut into its steps (``rank_digest.RankDigest``, what a
reader process hands back so that a big job's events never sit in memory together).
``report(analysis)`` is the JSON shape that ``manage.py analyze_trace --json`` prints and
the API serves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any

from apps.analysis.gpu_timeline import GpuStep, mean_gpu
from apps.analysis.rank_digest import RankDigest, absolute_span, digest
from apps.analysis.step_phases import (
    OWN_PHASES,
    PHASES,
    PhaseConfig,
    StepPhases,
)
from apps.analysis.trace_types import Origin, RankTrace

__all__ = ["PHASES", "PhaseConfig", "RankResult", "Straggler", "TraceAnalysis",
           "TraceAnalysisError", "analyze", "device_of", "recorded_span", "report",
           "with_skipped"]

GPU_IDLE_CHECKS = ("launch and dispatch overhead on the CPU (Python, many small kernels: "
                   "fuse them or capture CUDA graphs)",
                   "synchronising calls (.item(), .cpu(), .tolist(), cudaStreamSynchronize, "
                   "blocking host-device copies: use pinned memory and non_blocking=True)",
                   "the input pipeline (DataLoader workers, pin_memory, prefetching)")


class TraceAnalysisError(ValueError):
    """Nothing in the traces can be analysed (no rank with a usable step)."""


@dataclass(frozen=True)
class RankResult:
    """One rank over the analysed steps; ``step_ms``, ``phases_ms``, ``gpu`` are per-step means."""

    rank: int
    steps: tuple[StepPhases, ...]
    sources: tuple[str, ...] = ()
    origin: Origin = field(default_factory=Origin)

    @property
    def step_ms(self) -> float:
        return sum(s.dur_ms for s in self.steps) / len(self.steps) if self.steps else 0.0

    @property
    def phases_ms(self) -> dict[str, float]:
        """Every phase of ``PHASES``, then unmapped annotations by name (largest first)."""
        n = len(self.steps) or 1
        totals: dict[str, float] = {p: 0.0 for p in PHASES}
        for step in self.steps:
            for label, ms in step.phases_ms.items():
                totals[label] = totals.get(label, 0.0) + ms
        extra = sorted((k for k in totals if k not in PHASES), key=lambda k: -totals[k])
        return {k: totals[k] / n for k in (*PHASES, *extra)}

    @property
    def gpu(self) -> GpuStep | None:
        return mean_gpu([s.gpu for s in self.steps if s.gpu is not None])

    @property
    def gpu_idle_share(self) -> float | None:
        gpu = self.gpu
        return gpu.idle_ms / gpu.window_ms if gpu and gpu.window_ms > 0 else None


@dataclass(frozen=True)
class Straggler:
    """The rank that arrived last, the phase where it lost the time, and how much per step.

    ``steps`` are the step numbers where it made the others wait; ``intermittent`` says it
    did so only on some steps (``excess_ms`` is then its excess on those steps).
    """

    rank: int
    phase: str
    excess_ms: float
    steps: tuple[int, ...] = ()
    compared: int = 0
    intermittent: bool = False
    origin: Origin = field(default_factory=Origin)


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
    gpu_idle_fraction: float = 0.3
    mixed_runs: bool = False

    @property
    def gpu_idle_share(self) -> float | None:
        """The median rank's share of each GPU step spent idle (``None`` on CPU traces)."""
        shares = [s for r in self.ranks if (s := r.gpu_idle_share) is not None]
        return median(shares) if shares else None

    @property
    def gpu_starved(self) -> bool:
        share = self.gpu_idle_share
        return share is not None and share >= self.gpu_idle_fraction

    @property
    def summary(self) -> str:
        """The verdict in one or two sentences."""
        sentences = []
        if self.straggler:
            sentences.append(straggler_sentence(self.straggler, self.waiting_ranks))
        if self.gpu_starved:
            sentences.append(f"the GPU is idle {self.gpu_idle_share:.0%} of each step: the "
                             f"CPU side cannot feed it")
        if not sentences:
            if self.mixed_runs:
                sentences.append("traces of different runs: no straggler named")
            elif self.communication_bound:
                sentences.append("communication-bound: ranks are balanced but spend most of "
                                 "each step in collectives (network or message size), not a "
                                 "straggler")
            elif len(self.ranks) < 2:
                traced = ("a single rank" if self.world_size < 2 else
                          f"only rank {self.ranks[0].rank} of {self.world_size} traced")
                sentences.append(f"{traced}: no straggler analysis; most time goes to "
                                 f"{self.dominant_phase}")
            else:
                sentences.append(f"no straggler: ranks are balanced; most time goes to "
                                 f"{self.dominant_phase}")
        return "; ".join(sentences)

    @property
    def checks(self) -> tuple[str, ...]:
        """What to check for the GPU-idle verdict (empty when the GPU is fed)."""
        return GPU_IDLE_CHECKS if self.gpu_starved else ()


def straggler_sentence(s: Straggler, waiting: Sequence[int]) -> str:
    where = f" (GPU {device_of(s.origin)})" if device_of(s.origin) else ""
    when = (f", on steps {_steps_text(s.steps)} only ({len(s.steps)} of {s.compared}: "
            f"intermittent)" if s.intermittent else "")
    return (f"rank {s.rank}{where} is the straggler: {s.excess_ms:.1f} ms more own work per "
            f"step than the other ranks, in {s.phase}{when}; waiting ranks: "
            f"{', '.join(str(r) for r in waiting) or 'none'}")


def device_of(origin: Origin) -> str:
    """``host:index`` (or ``GPU index`` without a host) of a rank, '' when unknown."""
    if origin.device is None:
        return ""
    return f"{origin.host}:{origin.device}" if origin.host else f"#{origin.device}"


def _steps_text(steps: Sequence[int]) -> str:
    shown = ", ".join(f"#{n}" for n in steps[:12])
    return shown + (f" and {len(steps) - 12} more" if len(steps) > 12 else "")


# --- Entry point -------------------------------------------------------------------------


def analyze(traces: Sequence[RankTrace | RankDigest],
            config: PhaseConfig | None = None) -> TraceAnalysis:
    """Analyse the trace files of one run (one or more files per rank).

    1. Cut every file into steps and phases (unless a digest already is).
    2. Group files by rank (from distributedInfo) and check they belong to one run.
    3. Merge the files of each rank, keep the steps every rank has, and compare the ranks
       step by step.
    """
    config = config or PhaseConfig()
    if not traces:
        raise TraceAnalysisError("no trace files to analyse")
    return _analyze([_digested(t, config) for t in traces], config)


def _digested(trace: RankTrace | RankDigest, config: PhaseConfig) -> RankDigest:
    if not isinstance(trace, RankDigest):
        return digest(trace, config)
    if trace.config != config:
        raise ValueError(f"{trace.source} was cut into steps under another PhaseConfig")
    return trace


def _analyze(traces: Sequence[RankDigest], config: PhaseConfig) -> TraceAnalysis:
    world, warnings = _run_shape(traces)
    kept = [t for t in traces if _world(t) in (world, None)]
    warnings += [f"{t.source}: world size {_world(t)} differs from the other files' {world}: "
                 f"left out" for t in traces if _world(t) not in (world, None)]
    mixed = _mixed_runs(traces)
    warnings += mixed
    per_rank, origins, more = _steps_by_rank(kept)
    warnings += more
    if not any(per_rank.values()):
        # the reason is in the steps, not in distributedInfo or the run's shape
        raise TraceAnalysisError("no rank has a usable training step: " + "; ".join(more))
    world = max(world, max(per_rank) + 1)
    common, more = _common_steps(per_rank)
    warnings += more
    ranks = _rank_results(per_rank, origins, common)
    missing = sorted(set(range(world)) - set(per_rank))
    if missing:
        warnings.append(f"partial result: the traces cover ranks {sorted(per_rank)} of world "
                        f"size {world}; missing ranks {_ranks_text(missing)} (a straggler "
                        f"among them cannot be named)")
    return _verdict(world, ranks, common, config, warnings,
                    partial=bool(missing) or not common or bool(mixed),
                    timeline=_timeline(ranks), mixed=bool(mixed))


def with_skipped(analysis: TraceAnalysis, skipped: Sequence[str]) -> TraceAnalysis:
    """The analysis of the files that could be read, partial when some could not."""
    if not skipped:
        return analysis
    return replace(analysis, partial=True, warnings=(*skipped, *analysis.warnings))


def report(analysis: TraceAnalysis, digits: int = 3) -> dict[str, Any]:
    """The JSON shape of ``manage.py analyze_trace --json`` (docs/traces.md)."""
    straggler = analysis.straggler

    def gpu(result: RankResult) -> dict[str, float] | None:
        means = result.gpu
        return None if means is None else {k: round(v, digits)
                                           for k, v in means.as_dict().items()}

    return {
        "world_size": analysis.world_size,
        "steps": analysis.steps,
        "ranks": [{"rank": r.rank, "step_ms": round(r.step_ms, digits),
                   "phases_ms": {p: round(v, digits) for p, v in r.phases_ms.items()},
                   "gpu": gpu(r), "device": _device_json(r.origin)}
                  for r in analysis.ranks],
        "dominant_phase": analysis.dominant_phase,
        "straggler": None if straggler is None else {
            "rank": straggler.rank, "phase": straggler.phase,
            "excess_ms": round(straggler.excess_ms, digits),
            "steps": list(straggler.steps), "intermittent": straggler.intermittent,
            "device": _device_json(straggler.origin)},
        "waiting_ranks": list(analysis.waiting_ranks),
        "timeline": analysis.timeline,
        "verdict": analysis.summary,
    }


def _device_json(origin: Origin) -> dict[str, Any] | None:
    if origin.device is None:
        return None
    return {"host": origin.host or None, "index": origin.device,
            "name": origin.device_name or None}


# --- One run, ranks and steps ------------------------------------------------------------


def _world(trace: RankDigest) -> int | None:
    return trace.distributed.world_size if trace.distributed else 1


def _rank(trace: RankDigest) -> int:
    return trace.distributed.rank if trace.distributed else 0


def _run_shape(traces: Sequence[RankDigest]) -> tuple[int, list[str]]:
    """The world size most files agree on, and warnings about files without one."""
    warnings = [f"{t.source}: no distributedInfo (not a torch.distributed run?): treated as "
                f"rank 0 of 1" for t in traces if t.distributed is None]
    worlds = Counter(w for t in traces if (w := _world(t)) is not None)
    world = worlds.most_common(1)[0][0] if worlds else max(_rank(t) for t in traces) + 1
    return world, warnings


def _mixed_runs(traces: Sequence[RankDigest]) -> list[str]:
    """Evidence that the files come from different runs or jobs (each a warning).

    A run is one world size, one backend and NCCL version, one GPU model, and its ranks
    trace the same seconds; on one host, one process is one rank.
    """
    found: list[str] = []
    keys: tuple[tuple[str, Callable[[RankDigest], object]], ...] = (
        ("world size", lambda t: t.distributed and t.distributed.world_size),
        ("backend", lambda t: t.distributed and t.distributed.backend),
        ("NCCL version", lambda t: t.distributed and t.distributed.nccl_version),
        ("GPU model", lambda t: t.origin.device_name or " + ".join(t.origin.devices)))
    for label, key in keys:
        values: dict[Any, list[str]] = {}
        for trace in traces:
            if value := key(trace):
                values.setdefault(value, []).append(_name(trace))
        if len(values) > 1:
            found.append(f"the files disagree on the {label}: " + "; ".join(
                f"{v} ({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
                for v, names in values.items()))
    processes: dict[tuple[str, int], set[int]] = {}
    for trace in traces:
        if trace.origin.host and trace.origin.pid is not None:
            processes.setdefault((trace.origin.host, trace.origin.pid), set()).add(_rank(trace))
    found += [f"process {pid} on {host} wrote ranks {sorted(ranks)}: one process is one rank"
              for (host, pid), ranks in processes.items() if len(ranks) > 1]
    found += _time_overlap_warnings(traces)
    if found:
        found.append("traces of different runs or jobs are not compared: no straggler is "
                     "named (analyse each run's files on their own)")
    return found


def _name(trace: RankDigest) -> str:
    return trace.source.rsplit("/", 1)[-1]


def _time_overlap_warnings(traces: Sequence[RankDigest]) -> list[str]:
    """Ranks of one run trace the same seconds; a file that overlaps no other is foreign."""
    if len(traces) < 2:
        return []
    spans = {t.source: span for t in traces if (span := t.span_us) is not None}
    if len(spans) < 2:
        return []
    lonely = [source for source, (lo, hi) in spans.items()
              if not any(lo < other_hi and other_lo < hi
                         for other, (other_lo, other_hi) in spans.items() if other != source)]
    return [f"{source}: recorded at a time no other file covers: traces from a different "
            f"run or job?" for source in lonely]


def recorded_span(traces: Sequence[RankTrace | RankDigest]) -> tuple[int, int] | None:
    """When the traces were recorded: first and last instant, in epoch nanoseconds."""
    spans = [span for t in traces if (span := _span_us(t)) is not None]
    if not spans:
        return None
    return int(min(lo for lo, _ in spans) * 1000), int(max(hi for _, hi in spans) * 1000)


def _span_us(trace: RankTrace | RankDigest) -> tuple[float, float] | None:
    return trace.span_us if isinstance(trace, RankDigest) else absolute_span(trace)


def _steps_by_rank(traces: Sequence[RankDigest]
                   ) -> tuple[dict[int, dict[int, StepPhases]], dict[int, Origin], list[str]]:
    """Every rank's steps by step number; a step seen twice for one rank is a duplicate."""
    per_rank: dict[int, dict[int, StepPhases]] = {}
    origins: dict[int, Origin] = {}
    warnings: list[str] = []
    for trace in traces:
        cut = trace.cut
        warnings += cut.warnings
        rank = _rank(trace)
        steps = per_rank.setdefault(rank, {})
        if trace.origin.device is not None or rank not in origins:
            origins[rank] = trace.origin
        duplicates = sorted(set(steps) & {s.step for s in cut.steps})
        if duplicates:
            warnings.append(f"{trace.source}: duplicate rank {rank} (steps {_span(duplicates)} "
                            f"already read from another file); its copies were ignored")
        for step in cut.steps:
            steps.setdefault(step.step, step)
    return per_rank, origins, warnings


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
                  origins: Mapping[int, Origin], common: Sequence[int]) -> tuple[RankResult, ...]:
    results = []
    for rank, steps in sorted(per_rank.items()):
        chosen = [steps[n] for n in common] if common else [steps[n] for n in sorted(steps)]
        results.append(RankResult(rank, tuple(chosen), origin=origins[rank]))
    return tuple(r for r in results if r.steps)


def _span(numbers: Sequence[int]) -> str:
    return str(numbers[0]) if len(numbers) == 1 else f"#{numbers[0]}..#{numbers[-1]}"


def _ranks_text(ranks: Sequence[int]) -> str:
    return str(list(ranks)) if len(ranks) <= 16 else f"[{ranks[0]}..{ranks[-1]}]"


def _timeline(ranks: Sequence[RankResult]) -> str:
    return "gpu" if any(s.gpu is not None for r in ranks for s in r.steps) else "cpu"


# --- The verdict -------------------------------------------------------------------------


def _verdict(world: int, ranks: tuple[RankResult, ...], common: Sequence[int],
             config: PhaseConfig, warnings: list[str], partial: bool,
             timeline: str, mixed: bool) -> TraceAnalysis:
    compare = bool(common) and len(ranks) >= 2 and not mixed
    straggler = _straggler(ranks, config) if compare else None
    waiting = _waiting_ranks(ranks, straggler)
    dominant = _dominant_phase(ranks)
    comm_bound = compare and straggler is None and all(
        r.phases_ms["communication"] >= config.comm_bound_fraction * r.step_ms for r in ranks)
    return TraceAnalysis(world_size=world, steps=len(common), ranks=ranks,
                         dominant_phase=dominant, straggler=straggler, waiting_ranks=waiting,
                         communication_bound=comm_bound, partial=partial, timeline=timeline,
                         warnings=tuple(warnings), gpu_idle_fraction=config.gpu_idle_fraction,
                         mixed_runs=mixed)


def _loo_excess(values: Mapping[int, float], rank: int) -> float:
    """``rank``'s value minus the median of the other ranks' (leave-one-out)."""
    return values[rank] - median(v for r, v in values.items() if r != rank)


def _straggler(ranks: Sequence[RankResult], config: PhaseConfig) -> Straggler | None:
    """The rank the others waited for: in most steps, or in some steps and no other rank.

    Step by step, the rank with the most own work is flagged when its excess over the
    median of the others clears both thresholds. A consistent straggler also has the
    largest median excess over all steps. An intermittent one clears twice the thresholds
    in enough steps (``intermittent_min_steps``, ``intermittent_min_share``) while no other
    rank does so more than once.
    """
    indexes = range(len(ranks[0].steps))
    numbers = [s.step for s in ranks[0].steps]
    own = [{r.rank: r.steps[i].own_ms for r in ranks} for i in indexes]
    step_ms = median(s.dur_ms for r in ranks for s in r.steps)
    threshold = max(config.min_excess_ms, config.min_excess_fraction * step_ms)
    last = [max(o, key=lambda rank: o[rank]) for o in own]
    flagged = {i: last[i] for i in indexes if _loo_excess(own[i], last[i]) >= threshold}

    excess = {r.rank: median(_loo_excess(own[i], r.rank) for i in indexes) for r in ranks}
    candidate = max(excess, key=lambda rank: excess[rank])
    share = sum(rank == candidate for rank in last) / len(own)
    origin = next(r.origin for r in ranks if r.rank == candidate)
    if excess[candidate] >= threshold and share >= config.min_step_share:
        chosen = [i for i, rank in flagged.items() if rank == candidate]
        return Straggler(candidate, _straggler_phase(ranks, candidate, list(indexes)),
                         excess[candidate], tuple(numbers[i] for i in chosen),
                         len(own), origin=origin)

    # intermittent: flagged by twice the margin (host noise rarely reaches it) in enough
    # steps, while any other rank is so at most once (a one-off is noise, not a culprit)
    strong = {i: rank for i, rank in flagged.items()
              if _loo_excess(own[i], rank) >= 2 * threshold}
    culprits = Counter(strong.values()).most_common()
    if not culprits or any(count > 1 for _, count in culprits[1:]):
        return None
    rank, count = culprits[0]
    if count < config.intermittent_min_steps or count < config.intermittent_min_share * len(own):
        return None
    chosen = sorted(i for i, r in strong.items() if r == rank)
    return Straggler(rank, _straggler_phase(ranks, rank, chosen),
                     median(_loo_excess(own[i], rank) for i in chosen),
                     tuple(numbers[i] for i in chosen), len(own), intermittent=True,
                     origin=next(r.origin for r in ranks if r.rank == rank))


def _straggler_phase(ranks: Sequence[RankResult], rank: int, indexes: Sequence[int]) -> str:
    """The own-work phase (communication excluded) with the largest excess over the others,
    on the given steps; unmapped annotations compete under their own names."""
    labels = {label for r in ranks for i in indexes for label in r.steps[i].phases_ms
              if label != "communication"} | set(OWN_PHASES)

    def excess(phase: str) -> float:
        return median(_loo_excess({r.rank: r.steps[i].phases_ms.get(phase, 0.0)
                                   for r in ranks}, rank) for i in indexes)

    return max(sorted(labels, key=lambda p: (p not in OWN_PHASES, p)), key=excess)


def _waiting_ranks(ranks: Sequence[RankResult], straggler: Straggler | None) -> tuple[int, ...]:
    """Ranks that waited for the straggler: over its steps and the steps after them (a rank
    late in its optimizer makes the others wait in the next step's collective), their
    communication exceeds the straggler's by at least half its excess on those steps."""
    if straggler is None:
        return ()
    numbers = [s.step for s in ranks[0].steps]
    flagged = set(straggler.steps) or set(numbers)
    after = {numbers[i + 1] for i, n in enumerate(numbers[:-1]) if n in flagged}
    chosen = flagged | after
    comm = {r.rank: sum(s.phases_ms["communication"] for s in r.steps if s.step in chosen)
            for r in ranks}
    floor = comm[straggler.rank] + straggler.excess_ms * len(flagged) / 2
    return tuple(r for r in sorted(comm) if r != straggler.rank and comm[r] >= floor)


def _dominant_phase(ranks: Sequence[RankResult]) -> str | None:
    totals: dict[str, float] = {}
    for rank in ranks:
        for phase, ms in rank.phases_ms.items():
            totals[phase] = totals.get(phase, 0.0) + ms
    return max(totals, key=lambda p: totals[p]) if any(totals.values()) else None
