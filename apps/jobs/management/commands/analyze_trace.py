"""``manage.py analyze_trace PATH [PATH ...] [--json]``: phases and straggler of a run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.analysis.phases import PHASES, TraceAnalysis, TraceAnalysisError, report
from apps.core.errors import AdapterError
from apps.jobs.traces import analyze_paths, trace_config


class Command(BaseCommand):
    help = ("Analyse PyTorch profiler traces (one file per rank; each PATH a folder of "
            "per-rank files or a file, gzipped or not): phases per rank and the straggler.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
        parser.add_argument("--json", action="store_true",
                            help="print the analysis as JSON (warnings go to stderr)")
        parser.add_argument("--min-excess-ms", type=float,
                            help="absolute straggler threshold (default from settings)")
        parser.add_argument("--min-excess-pct", type=float,
                            help="relative straggler threshold, %% of the median step")
        parser.add_argument("--jobs", type=int, default=0, metavar="N",
                            help="read files in N processes (default: one per CPU core)")
        parser.add_argument("--phase", action="append", default=[], metavar="NAME=PHASE",
                            help=f"map a record_function name to a phase ({', '.join(PHASES)})")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            workers = options["jobs"] or os.cpu_count() or 1
            analysis = analyze_paths(options["paths"], _config(options), workers=workers)
        except (AdapterError, TraceAnalysisError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        for warning in analysis.warnings:
            self.stderr.write(f"warning: {warning}")
        if options["json"]:
            self.stdout.write(json.dumps(report(analysis), indent=1))
        else:
            self.stdout.write(render_text(analysis))


def _config(options: dict[str, Any]) -> Any:
    overrides: dict[str, Any] = {}
    if options["min_excess_ms"] is not None:
        overrides["min_excess_ms"] = options["min_excess_ms"]
    if options["min_excess_pct"] is not None:
        overrides["min_excess_fraction"] = options["min_excess_pct"] / 100
    if options["phase"]:
        config = trace_config()
        mapping = dict(config.annotation_phases)
        for item in options["phase"]:
            name, sep, phase = item.partition("=")
            if not sep:
                raise CommandError(f"--phase {item!r}: expected NAME=PHASE")
            mapping[name] = phase
        overrides["annotation_phases"] = mapping
    return trace_config(**overrides)


def render_text(analysis: TraceAnalysis) -> str:
    """The analysis as a readable table and verdict, for a terminal."""
    lines = [f"{len(analysis.ranks)} of {analysis.world_size} ranks, {analysis.steps} steps "
             f"compared ({analysis.timeline} timeline; mean ms per step)"
             + ("  [PARTIAL]" if analysis.partial else ""), ""]
    header = ["rank", "step", *PHASES]
    lines.append("  ".join(f"{h:>13}" for h in header))
    for rank in analysis.ranks:
        cells = [str(rank.rank), f"{rank.step_ms:.2f}",
                 *(f"{rank.phases_ms[p]:.2f}" for p in PHASES)]
        lines.append("  ".join(f"{c:>13}" for c in cells))
    lines += ["", f"dominant phase: {analysis.dominant_phase}", f"verdict: {analysis.summary}"]
    return "\n".join(lines)
