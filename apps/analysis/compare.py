"""Two or more jobs side by side: an aligned table and the differences named in words (pure).

A researcher asks "why was yesterday's run 20% slower than last week's?". The runs come in
as ``RunFigures`` (each job's stored figures: its Slurm record, its telemetry split, its
latest trace analysis, its diagnosis findings), oldest first; ``compare`` lines them up
(``Row``: one figure across the runs, ``Cell.missing`` saying why a run has none rather
than a zero) and names each difference big enough to matter against run 1, the baseline
("run 2's step time is 21% longer (…); the time lost is in communication (+340 ms/step)").
Stragglers, endings and findings are named across all runs ("in run 2 only").
Figures print through ``apps.analysis.figures`` so they read as on the job page.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from apps.analysis.figures import gpu_hours_text, share_text

# --- What makes a difference worth naming --------------------------------------------------

# Step time: a profiler's mean step moves a few percent between runs of the same code on the
# same nodes (data order, warm-up left in the window, clock boost); past 5% it is the run.
STEP_CHANGE = 0.05
# A phase is named as where the step's time went when it carries at least a quarter of the
# change: the phases around the main mover shift a little with it and are noise.
PHASE_SHARE = 0.25
# ... and at least this much per step: below a millisecond a trace's timer jitter dominates.
PHASE_MIN_MS = 1.0
# Run time: queue neighbours, file-system load and checkpoint timing move a run's wall time
# by several percent with nothing wrong; 10% is a run that did something else.
RUN_TIME_CHANGE = 0.10
# Efficiency shares (computing, idle with memory held): 5 points is the narrowest band of
# the efficiency scale (idle is < 5%) and above what a scrape interval's sampling moves.
SHARE_POINTS = 0.05

PHASES = ("data_loading", "forward", "backward", "communication", "optimizer", "other")
PHASE_WORDS = {"data_loading": "data loading", "forward": "forward", "backward": "backward",
               "communication": "communication (AllReduce and other collectives)",
               "optimizer": "optimizer", "other": "other (outside the named phases)"}
NO_TELEMETRY = "no telemetry stored"
NO_TRACE = "no trace analysed"
NOT_STARTED = "not started"


# --- What comes in ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceFigures:
    """A job's latest trace analysis: the mean step over its ranks, split into phases (ms)."""

    step_ms: float
    phases_ms: Mapping[str, float]
    ranks: int
    steps: int
    straggler_rank: int | None = None
    straggler_phase: str = ""
    straggler_gpu: str = ""  # "host:index" as telemetry names it, when the trace says


@dataclass(frozen=True)
class Telemetry:
    """A job's stored telemetry: shares of its allocated GPU time and the straggler verdict.

    ``timeline`` is the mean GPU busy share per stored point, its first point
    ``timeline_offset_s`` after the job's start, one every ``step_s``."""

    useful_share: float | None
    busy_share: float
    held_share: float
    straggler_status: str  # found, none, undetermined, not_applicable, "" (not judged)
    straggler_words: str = ""
    straggler_gpus: tuple[str, ...] = ()
    timeline: tuple[float | None, ...] = ()
    timeline_offset_s: float = 0.0
    step_s: float = 0.0
    timeline_measure: str = "gpu_util"  # busy (duty cycle); "activity" when not scraped


@dataclass(frozen=True)
class RunFigures:
    """One job's stored figures; ``telemetry`` and ``trace`` are None when it has none
    (``telemetry_missing`` says why: not archived yet, no series)."""

    ref: str  # cluster/job id
    state: str
    ending: str = ""  # the ending's kind (apps.analysis.endings), "" while it runs
    ending_title: str = ""
    gpus: float = 0.0
    gpu_model: str = ""
    nodes: int = 0
    run_s: float | None = None
    gpu_hours: float = 0.0
    telemetry: Telemetry | None = None
    telemetry_missing: str = NO_TELEMETRY
    trace: TraceFigures | None = None
    findings: tuple[tuple[str, str], ...] = ()  # (rule key, title)


# --- What goes out ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    value: float | str | None
    missing: str = ""  # why there is no value ("no trace analysed"), never a zero


@dataclass(frozen=True)
class Row:
    """One figure across the runs. ``kind`` says how it prints: text, share, gpu_hours,
    idle_share, ms, duration, gpus, count."""

    key: str
    label: str
    kind: str
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class Difference:
    topic: str  # size, step, run_time, efficiency, straggler, ending, finding
    text: str
    rows: tuple[str, ...] = ()  # the table rows it is about


@dataclass(frozen=True)
class Comparison:
    rows: tuple[Row, ...]
    differences: tuple[Difference, ...]
    notes: tuple[str, ...] = field(default=())  # what could not be compared, and why

    def differing_rows(self) -> set[str]:
        return {key for d in self.differences for key in d.rows}


def label(index: int) -> str:
    """``run 1`` for the first (oldest) job."""
    return f"run {index + 1}"


def compare(runs: Sequence[RunFigures]) -> Comparison:
    """The aligned table and the named differences; run 1 (the first) is the baseline."""
    if len(runs) < 2:
        raise ValueError("a comparison needs two runs or more")
    differences = [*_size(runs)]
    notes: list[str] = []
    base = runs[0]
    for i, run in enumerate(runs[1:], start=1):
        differences += _step(base, run, i, notes)
        differences += _run_time(base, run, i)
        differences += _efficiency(base, run, i)
    differences += _stragglers(runs, notes) + _trace_stragglers(runs) + _endings(runs)
    differences += _findings(runs)
    return Comparison(table(runs), tuple(differences), tuple(dict.fromkeys(notes)))


# --- The table -------------------------------------------------------------------------------


def table(runs: Sequence[RunFigures]) -> tuple[Row, ...]:
    """Every row, in the order the page shows them."""
    rows = [
        Row("state", "State", "text", tuple(Cell(r.state) for r in runs)),
        Row("ending", "Ending", "text", tuple(
            Cell(r.ending_title) if r.ending else Cell(None, "still running") for r in runs)),
        Row("gpus", "GPUs", "gpus", tuple(Cell(r.gpus) for r in runs)),
        Row("gpu_model", "GPU model", "text", tuple(Cell(r.gpu_model or "—") for r in runs)),
        Row("nodes", "Nodes", "count", tuple(Cell(r.nodes) for r in runs)),
        Row("run_time", "Run time", "duration", tuple(
            Cell(r.run_s) if r.run_s is not None else Cell(None, NOT_STARTED) for r in runs)),
        Row("gpu_hours", "GPU-hours", "gpu_hours", tuple(Cell(r.gpu_hours) for r in runs)),
        _telemetry_row(runs, "useful", "Computing (useful share)", "share",
                       lambda t: t.useful_share),
        _telemetry_row(runs, "busy", "GPU busy", "share", lambda t: t.busy_share),
        _telemetry_row(runs, "held", "Idle, memory held", "idle_share", lambda t: t.held_share),
        _telemetry_row(runs, "straggler", "Straggler (telemetry)", "text", _straggler_cell),
        _trace_row(runs, "step", "Step time (trace)", lambda t: t.step_ms),
    ]
    rows += [_trace_row(runs, f"phase_{p}", f"· {PHASE_WORDS[p].split(' (')[0]}", _phase(p))
             for p in PHASES]
    rows.append(Row("trace_straggler", "Straggler (trace)", "text", tuple(
        Cell(_trace_straggler_words(r.trace)) if r.trace else Cell(None, NO_TRACE)
        for r in runs)))
    rows.append(Row("findings", "Diagnosis", "text", tuple(
        Cell(" · ".join(title for _, title in r.findings) or "nothing found") for r in runs)))
    return tuple(rows)


def _telemetry_row(runs: Sequence[RunFigures], key: str, title: str, kind: str,
                   value: Callable[[Telemetry], float | str | None]) -> Row:
    def cell(run: RunFigures) -> Cell:
        if run.telemetry is None:
            return Cell(None, run.telemetry_missing or NO_TELEMETRY)
        got = value(run.telemetry)
        return Cell(got) if got is not None else Cell(None, "not measured")

    return Row(key, title, kind, tuple(cell(r) for r in runs))


def _trace_row(runs: Sequence[RunFigures], key: str, title: str,
               value: Callable[[TraceFigures], float]) -> Row:
    return Row(key, title, "ms", tuple(
        Cell(value(r.trace)) if r.trace else Cell(None, NO_TRACE) for r in runs))


def _phase(phase: str) -> Callable[[TraceFigures], float]:
    return lambda t: t.phases_ms.get(phase, 0.0)


def _straggler_cell(t: Telemetry) -> str:
    if t.straggler_status == "found" and t.straggler_gpus:
        return ", ".join(gpu_words(g) for g in t.straggler_gpus)
    return t.straggler_words or "not judged"


def _trace_straggler_words(t: TraceFigures) -> str:
    if t.straggler_rank is None:
        return "none"
    where = f" on {gpu_words(t.straggler_gpu)}" if t.straggler_gpu else ""
    phase = PHASE_WORDS.get(t.straggler_phase, t.straggler_phase).split(" (")[0]
    return f"rank {t.straggler_rank}{where}" + (f" ({phase})" if phase else "")


def gpu_words(gpu: str) -> str:
    """``gpu03:5`` as ``GPU 5 on node gpu03``; a label without a host as ``GPU #5``."""
    host, sep, index = gpu.rpartition(":")
    return f"GPU {index} on node {host}" if sep and host else f"GPU {gpu}"


# --- Differences against run 1 ---------------------------------------------------------------


def _size(runs: Sequence[RunFigures]) -> list[Difference]:
    """Different GPU counts or models: step times and GPU-hours are then not like for like."""
    shapes = [(r.gpus, r.gpu_model) for r in runs]
    if len(set(shapes)) == 1:
        return []
    said = ", ".join(f"{label(i)} {_gpus(g)} × {m or 'GPU'}" for i, (g, m) in enumerate(shapes))
    return [Difference("size", f"The runs differ in size ({said}): step times and GPU-hours "
                               "are not like for like.", ("gpus", "gpu_model"))]


def _step(base: RunFigures, run: RunFigures, i: int, notes: list[str]) -> list[Difference]:
    if base.trace is None or run.trace is None:
        if base.trace is not None or run.trace is not None:
            which = label(0) if base.trace is None else label(i)
            notes.append(f"{which} has no trace analysis: its step time and phases cannot be "
                         "compared (upload its profiler traces on its job page).")
        return []
    before, after = base.trace.step_ms, run.trace.step_ms
    if before <= 0 or abs(after - before) / before < STEP_CHANGE:
        return []
    change = (after - before) / before
    text = (f"{label(i)}'s step time is {share_text(abs(change))} "
            f"{'longer' if change > 0 else 'shorter'} ({_ms(after)} against {_ms(before)} "
            f"in {label(0)})")
    movers = _movers(base.trace, run.trace)
    if movers:
        where = ", ".join(f"{PHASE_WORDS[p]} ({delta:+,.0f} ms/step)" for p, delta in movers)
        text += f"; the time {'lost' if change > 0 else 'saved'} is in {where}"
    rows = ("step", *(f"phase_{p}" for p, _ in movers))
    return [Difference("step", text + ".", rows)]


def _movers(base: TraceFigures, run: TraceFigures) -> list[tuple[str, float]]:
    """The phases that carry the step's change, largest first."""
    total = run.step_ms - base.step_ms
    deltas = [(p, run.phases_ms.get(p, 0.0) - base.phases_ms.get(p, 0.0)) for p in PHASES]
    found = [(p, d) for p, d in deltas if d * total > 0 and abs(d) >= PHASE_MIN_MS
             and abs(d) >= PHASE_SHARE * abs(total)]
    return sorted(found, key=lambda pd: -abs(pd[1]))


def _run_time(base: RunFigures, run: RunFigures, i: int) -> list[Difference]:
    if not base.run_s or run.run_s is None or not base.ending or not run.ending:
        return []  # a run that has not ended has no run time to hold against another's
    change = (run.run_s - base.run_s) / base.run_s
    if abs(change) < RUN_TIME_CHANGE:
        return []
    return [Difference("run_time", f"{label(i)} ran {share_text(abs(change))} "
                                   f"{'longer' if change > 0 else 'shorter'} "
                                   f"({hours_minutes(run.run_s)} against "
                                   f"{hours_minutes(base.run_s)}), "
                                   f"{gpu_hours_text(run.gpu_hours)} against "
                                   f"{gpu_hours_text(base.gpu_hours)}.",
                       ("run_time", "gpu_hours"))]


def _efficiency(base: RunFigures, run: RunFigures, i: int) -> list[Difference]:
    a, b = base.telemetry, run.telemetry
    if a is None or b is None:
        return []
    out = []
    if a.useful_share is not None and b.useful_share is not None and \
            abs(b.useful_share - a.useful_share) >= SHARE_POINTS:
        out.append(Difference("efficiency", f"{label(i)}'s GPUs computed "
                                            f"{share_text(b.useful_share)} of their allocated "
                                            f"time, against {share_text(a.useful_share)} in "
                                            f"{label(0)}.", ("useful",)))
    if abs(b.held_share - a.held_share) >= SHARE_POINTS:
        out.append(Difference("efficiency", f"{label(i)}'s GPUs sat idle with memory held "
                                            f"{share_text(b.held_share)} of the time, against "
                                            f"{share_text(a.held_share)} in {label(0)}.",
                              ("held",)))
    return out


# --- Differences across all runs -------------------------------------------------------------


def _in_runs(indexes: Sequence[int], judged: int) -> str:
    """``in run 2 only`` / ``in runs 1 and 3``."""
    names = [str(i + 1) for i in indexes]
    if len(names) == 1:
        return f"in run {names[0]}" + (" only" if judged > 1 else "")
    return f"in runs {', '.join(names[:-1])} and {names[-1]}"


def _stragglers(runs: Sequence[RunFigures], notes: list[str]) -> list[Difference]:
    """A GPU the telemetry names a straggler in some judged runs, not in all of them."""
    verdicts = {i: r.telemetry for i, r in enumerate(runs) if r.telemetry is not None
                and r.telemetry.straggler_status in ("found", "none")}
    judged = list(verdicts)
    where: dict[str, list[int]] = {}
    for i, telemetry in verdicts.items():
        for gpu in telemetry.straggler_gpus:
            where.setdefault(gpu, []).append(i)
    if where and len(judged) < len(runs):
        notes.append("Stragglers are compared over the runs whose telemetry could judge "
                     "them: " + ", ".join(label(i) for i in judged) + ".")
    return [Difference("straggler", f"{gpu_words(gpu)} is the straggler "
                                    f"{_in_runs(found, len(judged))}.", ("straggler",))
            for gpu, found in where.items() if len(found) < len(judged)]


def _trace_stragglers(runs: Sequence[RunFigures]) -> list[Difference]:
    """A straggler rank in some traced runs' analyses, not in all of them."""
    traces = {i: r.trace for i, r in enumerate(runs) if r.trace is not None}
    where: dict[int, list[int]] = {}
    for i, trace in traces.items():
        if trace.straggler_rank is not None:
            where.setdefault(trace.straggler_rank, []).append(i)
    out = []
    for rank, found in where.items():
        if len(found) < len(traces):
            t = traces[found[0]]
            out.append(Difference("straggler", f"Rank {rank}"
                                  + (f" ({gpu_words(t.straggler_gpu)})" if t.straggler_gpu
                                     else "")
                                  + f" is the traces' straggler {_in_runs(found, len(traces))}.",
                                  ("trace_straggler",)))
    return out


def _endings(runs: Sequence[RunFigures]) -> list[Difference]:
    """Runs that ended differently: every run's state, the odd ones' ending in words."""
    if len({r.ending or r.state for r in runs}) == 1:
        return []
    parts = []
    for i, r in enumerate(runs):
        if not r.ending:
            parts.append(f"{label(i)} is still {r.state}")
            continue
        words = "" if r.ending == "completed" else f" ({r.ending_title.lower()})"
        parts.append(f"{label(i)} {'ended ' if not parts else ''}{r.state}{words}")
    return [Difference("ending", ", ".join(parts) + ".", ("state", "ending"))]


def _findings(runs: Sequence[RunFigures]) -> list[Difference]:
    """A diagnosis finding some runs have and others not."""
    where: dict[str, list[int]] = {}
    titles: dict[str, str] = {}
    for i, r in enumerate(runs):
        for key, title in r.findings:
            where.setdefault(key, []).append(i)
            titles[key] = title
    return [Difference("finding", f"The diagnosis found “{titles[key]}” "
                                  f"{_in_runs(found, len(runs))}.", ("findings",))
            for key, found in where.items() if len(found) < len(runs)]


# --- Words -----------------------------------------------------------------------------------


def hours_minutes(seconds: float) -> str:
    """A run time as ``5 h 10 min``, ``42 min`` or ``35 s``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


def _ms(value: float) -> str:
    return f"{value:,.0f} ms"


def _gpus(value: float) -> str:
    return f"{value:g}"
