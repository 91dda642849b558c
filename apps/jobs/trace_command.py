"""``manage.py analyze_trace PATH [PATH ...] [--json]``, without Django.

Phases, GPU timeline and straggler of one run's profiler traces, printed, nothing stored.
Starting Django costs about 1.5 s of CPU, more than analysing most traces, so ``manage.py``
hands this command here before ``django.setup()``; the Django command
(``management/commands/analyze_trace.py``, for ``call_command``) runs the same code.

Nothing here may import Django: settings come from the same environment variables as
``portal/settings.py`` (``TRACE_STRAGGLER_MIN_EXCESS_MS``, ``TRACE_STRAGGLER_MIN_EXCESS_PCT``,
``TRACE_MAX_FILE_MB``, ``TRACE_MAX_DECOMPRESSED_MB``), with the same defaults; a test
checks they agree.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from apps.analysis.phases import (
    PHASES,
    TraceAnalysis,
    TraceAnalysisError,
    analyze,
    report,
    with_skipped,
)
from apps.analysis.rank_digest import digest
from apps.analysis.step_phases import PhaseConfig
from apps.core.errors import AdapterError
from apps.jobs.adapters.kineto import MIB, TraceLimits, read_trace_paths

NAME = "analyze_trace"
HELP = ("Analyse PyTorch profiler traces (one file per rank; each PATH a folder of per-rank "
        "files or a file, gzipped or not): phases and GPU timeline per rank, and the "
        "straggler.")
# name -> (default, minimum): as portal/settings.py reads them
ENV_SETTINGS = {
    "TRACE_STRAGGLER_MIN_EXCESS_MS": (5, 0),
    "TRACE_STRAGGLER_MIN_EXCESS_PCT": (15, 0),
    "TRACE_MAX_FILE_MB": (1024, 1),
    "TRACE_MAX_DECOMPRESSED_MB": (8192, 1),
}


class TraceCommandError(Exception):
    """What the command refuses, in one line (Django's CommandError says the same)."""


def env_int(name: str) -> int:
    """An integer setting from the environment, checked as ``portal/settings.env_int`` does."""
    default, minimum = ENV_SETTINGS[name]
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise TraceCommandError(f"configuration error: {name}={raw!r}: expected an "
                                f"integer") from None
    if value < minimum:
        raise TraceCommandError(f"configuration error: {name}={raw!r}: must be at least "
                                f"{minimum}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    parser.add_argument("--json", action="store_true",
                        help="print the analysis as JSON (warnings go to stderr)")
    parser.add_argument("--min-excess-ms", type=float,
                        help="absolute straggler threshold (default TRACE_STRAGGLER_MIN_EXCESS_MS)")
    parser.add_argument("--min-excess-pct", type=float,
                        help="relative straggler threshold, %% of the median step "
                             "(default TRACE_STRAGGLER_MIN_EXCESS_PCT)")
    parser.add_argument("--jobs", type=int, default=0, metavar="N",
                        help="read files in N processes (default: one per CPU core)")
    parser.add_argument("--phase", action="append", default=[], metavar="NAME=PHASE",
                        help=f"map a record_function name to a phase ({', '.join(PHASES)})")


def config_from(options: dict[str, Any]) -> PhaseConfig:
    """Thresholds from the environment, overridden by the options; ``--phase`` mappings."""
    ms, pct = options.get("min_excess_ms"), options.get("min_excess_pct")
    values: dict[str, Any] = {
        "min_excess_ms": float(env_int("TRACE_STRAGGLER_MIN_EXCESS_MS") if ms is None else ms),
        "min_excess_fraction": (env_int("TRACE_STRAGGLER_MIN_EXCESS_PCT")
                                if pct is None else pct) / 100,
    }
    if options.get("phase"):
        mapping = dict(PhaseConfig().annotation_phases)
        for item in options["phase"]:
            name, sep, phase = item.partition("=")
            if not sep:
                raise TraceCommandError(f"--phase {item!r}: expected NAME=PHASE")
            mapping[name] = phase
        values["annotation_phases"] = mapping
    return PhaseConfig(**values)


def limits_from_env() -> TraceLimits:
    return TraceLimits(max_file_bytes=env_int("TRACE_MAX_FILE_MB") * MIB,
                       max_decompressed_bytes=env_int("TRACE_MAX_DECOMPRESSED_MB") * MIB)


def execute(options: dict[str, Any], out: Callable[[str], Any],
            err: Callable[[str], Any]) -> None:
    """Analyse the paths and print the result; ``TraceCommandError`` says why not."""
    try:
        config = config_from(options)
        workers = options.get("jobs") or os.cpu_count() or 1
        # each file cut into its steps in the process that read it: in parallel, and the
        # events of one file are gone before the next is read
        reading = read_trace_paths(options["paths"], limits_from_env(), workers,
                                   partial(digest, config=config))
        analysis = with_skipped(analyze(reading.traces, config), reading.problems)
    except (AdapterError, TraceAnalysisError, ValueError) as exc:
        raise TraceCommandError(str(exc)) from exc
    for warning in analysis.warnings:
        err(f"warning: {warning}\n")
    out((json.dumps(report(analysis), indent=1) if options.get("json")
         else render_text(analysis)) + "\n")


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """``manage.py analyze_trace ...`` before Django: the exit status (1 on refusal)."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    parser = argparse.ArgumentParser(prog=f"manage.py {NAME}", description=HELP)
    add_arguments(parser)
    options = vars(parser.parse_args(argv))
    try:
        execute(options, stdout.write, stderr.write)
    except TraceCommandError as exc:
        stderr.write(f"CommandError: {exc}\n")  # what Django prints for a CommandError
        return 1
    return 0


# --- Text ---------------------------------------------------------------------------------


def render_text(analysis: TraceAnalysis) -> str:
    """The analysis as readable tables and a verdict, for a terminal."""
    lines = [f"{len(analysis.ranks)} of {analysis.world_size} ranks, {analysis.steps} steps "
             f"compared ({analysis.timeline} timeline; mean ms per step)"
             + ("  [PARTIAL]" if analysis.partial else ""), ""]
    lines += _table(["rank", "device", "step", *PHASES],
                    [[str(r.rank), _device(r), f"{r.step_ms:.2f}",
                      *(f"{r.phases_ms[p]:.2f}" for p in PHASES)] for r in analysis.ranks])
    unmapped = [(r.rank, k, v) for r in analysis.ranks for k, v in r.phases_ms.items()
                if k not in PHASES and v >= 0.005]
    if unmapped:
        lines += ["", "under annotations mapped to no phase (ms per step; --phase NAME=PHASE "
                      "maps them):"]
        lines += [f"  rank {rank}: {name}  {ms:.2f}" for rank, name, ms in unmapped[:30]]
    gpus = [(r, g) for r in analysis.ranks if (g := r.gpu) is not None]
    if gpus:
        lines += ["", "GPU timeline (mean ms per step, % of the GPU step):"]
        lines += _table(["rank", "GPU step", "idle", "compute", "communication", "exposed"],
                        [[str(r.rank), f"{g.window_ms:.2f}", *(
                            f"{v:.2f} ({_share(v, g.window_ms)})" for v in (
                                g.idle_ms, g.compute_ms, g.communication_ms,
                                g.exposed_communication_ms))] for r, g in gpus])
    lines += ["", f"dominant phase: {analysis.dominant_phase}", f"verdict: {analysis.summary}"]
    lines += [f"check: {c}" for c in analysis.checks]
    return "\n".join(lines)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    return ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True))
            for row in [header, *rows]]


def _device(rank: Any) -> str:
    origin = rank.origin
    if origin.device is None:
        return "-"
    return f"{origin.host}:{origin.device}" if origin.host else f"GPU {origin.device}"


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


if __name__ == "__main__":  # pragma: no cover - manage.py is the entry point
    sys.exit(main())
