"""``manage.py demo``: simulate a cluster (once) and load it, for ``make demo``.

The folder is simulated only when it has no ``cluster.json`` yet (``--fresh`` forces a
new one), so running ``make demo`` again reuses the same simulated month; loading it
again changes nothing. ``--simulate-only`` stops after the simulation: ``make demo`` runs it
beside ``migrate`` (the simulator needs no database), then runs ``demo`` again to load.

Times are counted from ``DEMO_T0`` (epoch seconds) when the Makefile set it: the start of
``make demo``, install included (issue 26: the command said "demo ready in 106 s" when the
portal answered 159 s after it was typed).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Simulate the demo cluster (if not done yet) and load it through the real importers."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", type=Path, default=Path("data/demo"))
        parser.add_argument("--nodes", type=int, default=16)
        parser.add_argument("--amd-nodes", type=int, default=2,
                            help="MI300X nodes beside the NVIDIA ones (AMD's exporter): the "
                                 "demo shows a mixed cluster; 0 for NVIDIA only")
        parser.add_argument("--days", type=float, default=30)
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument("--telemetry-step", type=int, default=3600,
                            help="seconds between telemetry samples for the month (the full "
                                 "30 s is ~30 GB for 16 nodes; see apps/simulator/README.md)")
        parser.add_argument("--fresh", action="store_true", help="simulate again")
        parser.add_argument("--simulate-only", action="store_true",
                            help="simulate (if needed) and stop: no database is touched")

    def handle(self, *args: Any, **opts: Any) -> None:
        folder: Path = opts["out"]
        if opts["fresh"] or not (folder / "cluster.json").exists():
            call_command("simulate", out=str(folder), nodes=opts["nodes"],
                         amd_nodes=opts["amd_nodes"], days=opts["days"],
                         seed=opts["seed"], telemetry_step=opts["telemetry_step"],
                         stdout=self.stdout)
        elif opts["simulate_only"] or not os.environ.get("DEMO_T0"):
            self.stdout.write(f"reusing the simulated cluster in {folder} (--fresh: a new one)")
        if opts["simulate_only"]:
            self.stdout.write(f"simulated month ready ({since_start()})")
            return
        call_command("load_demo", str(folder), stdout=self.stdout)
        self.stdout.write(f"demo data loaded ({since_start()})")


_STARTED = time.time()


def since_start() -> str:
    """Seconds since ``make demo`` started (``DEMO_T0``), else since this command did."""
    t0 = os.environ.get("DEMO_T0", "")
    if t0.isdigit():
        return f"{time.time() - int(t0):.0f} s after the make command started"
    return f"{time.time() - _STARTED:.0f} s"
