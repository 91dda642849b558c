"""Beacon's GPU-cluster simulator: a pure, seeded, streaming generator of real formats.

``simulate(SimConfig(...), out_dir)`` writes Slurm JSON, dcgm-exporter/node_exporter
OpenMetrics, Kineto traces, sshd logs, inventories and a ground-truth file. See
``README.md`` beside this file for the output layout. No Django here: the portal reads
the output through its real importers.
"""

from apps.simulator.config import SimConfig, SimulationError
from apps.simulator.run import Summary, simulate

__all__ = ["SimConfig", "SimulationError", "Summary", "simulate"]
