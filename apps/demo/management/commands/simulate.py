"""``manage.py simulate``: write a simulated cluster's real-format outputs into a folder.

A thin wrapper around the pure ``apps.simulator`` package; see ``apps/simulator/README.md``
for the layout it writes.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.batch import forked
from apps.core.progress import Progress
from apps.simulator import SimConfig, SimulationError, simulate
from apps.simulator.config import round_now


def _now_arg(value: str) -> int:
    """``--now`` as Unix seconds or ISO 8601 (``2026-11-30T00:00:00Z``)."""
    try:
        return int(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(f"--now {value!r}: expected Unix seconds or ISO 8601") from None
    return int((parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp())


def _check_room(cfg: SimConfig, out: Path, max_gb: float) -> None:
    """Refuse, before writing anything, a run whose telemetry would not fit (30 s samples
    for a whole month are about 1 GB a day for 16 nodes)."""
    need = cfg.telemetry_bytes
    hint = ("pick a coarser --telemetry-step (3600: about "
            f"{replace(cfg, telemetry_step=3600).telemetry_bytes / 1e9:.2f} GB) or fewer "
            "--telemetry-days")
    if need > max_gb * 1e9:
        raise SimulationError(
            f"the telemetry would take about {need / 1e9:.1f} GB ({cfg.nodes} nodes, "
            f"{cfg.telemetry_step} s samples), more than --max-telemetry-gb {max_gb:g}: {hint}")
    parent = next((p for p in (out, *out.resolve().parents) if p.exists()), Path("/"))
    free = shutil.disk_usage(parent).free
    if need > free:
        raise SimulationError(f"the telemetry would take about {need / 1e9:.1f} GB but "
                              f"{parent} has {free / 1e9:.1f} GB free: {hint}")


class Command(BaseCommand):
    help = "Simulate a GPU cluster and write Slurm JSON, telemetry, traces, logs, ground truth."
    # the simulator is pure (no database, no URLs, no apps' state): Django's checks guard
    # nothing it uses and cost about a second
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=16, help="nodes of 8 GPUs (1-512)")
        parser.add_argument("--days", type=float, default=30, help="days of jobs ending at now")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--out", required=True, help="output folder (created if missing)")
        parser.add_argument("--now", type=str, default=None,
                            help="the portal's now (Unix seconds or ISO 8601); default: "
                                 "the current time floored to the hour")
        parser.add_argument("--telemetry-step", type=int, default=30,
                            help="seconds between telemetry samples (divides 21600)")
        parser.add_argument("--telemetry-days", type=float, default=None,
                            help="recent days that get telemetry (default: all; 0: none)")
        parser.add_argument("--cluster", default="demo", help="Slurm ClusterName")
        parser.add_argument("--amd-nodes", type=int, default=0,
                            help="MI300X nodes (AMD Device Metrics Exporter) in a partition "
                                 "mi300x of their own, after the --nodes NVIDIA nodes")
        parser.add_argument("--max-telemetry-gb", type=float, default=10,
                            help="refuse to start when the telemetry would be larger "
                                 "(default 10; the estimate is printed)")
        parser.add_argument("--no-incidents", action="store_true",
                            help="plant no security incident and install patched versions: "
                                 "a healthy month, the security rules' clean baseline")

    def handle(self, *args: Any, **opts: Any) -> None:
        now = _now_arg(opts["now"]) if opts["now"] else round_now(time.time())
        cfg = SimConfig(nodes=opts["nodes"], days=opts["days"], seed=opts["seed"], now=now,
                        telemetry_step=opts["telemetry_step"],
                        telemetry_days=opts["telemetry_days"], cluster=opts["cluster"],
                        incidents=not opts["no_incidents"], amd_nodes=opts["amd_nodes"])
        try:
            _check_room(cfg.validated(), Path(opts["out"]), opts["max_telemetry_gb"])
        except SimulationError as exc:
            raise CommandError(str(exc)) from None
        started = time.monotonic()
        try:
            # the telemetry is written by a forked child while the rest is (same bytes)
            summary = simulate(cfg, opts["out"], progress=Progress(self.stdout),
                               background=partial(forked, chunk=1))
        except SimulationError as exc:
            raise CommandError(str(exc)) from None
        except OSError as exc:
            raise CommandError(f"--out {opts['out']!r}: {exc.strerror or exc}") from None
        self.stdout.write(
            f"simulated {cfg.nodes} nodes{f' and {cfg.amd_nodes} MI300X' if cfg.amd_nodes else ''}"
            f" x {cfg.days:g} days into {summary.out}: "
            f"{summary.jobs} jobs, {summary.scripts} job scripts, "
            f"{len(summary.telemetry_files)} telemetry windows, {summary.trace_files} trace "
            f"files, {summary.findings} ground-truth findings "
            f"({time.monotonic() - started:.1f} s)")
