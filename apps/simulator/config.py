"""Simulator settings and their validation (clear errors that name the argument)."""

from __future__ import annotations

from dataclasses import dataclass

WINDOW_SECONDS = 6 * 3600  # one OpenMetrics file per aligned 6 h window
MAX_NODES = 512
MAX_DAYS = 366
# OpenMetrics text written per node per telemetry step (8 GPUs x 16 dcgm fields with their
# labels, plus node_exporter series): 272 MB for 16 nodes x 726 hourly steps, 260 MB for
# 16 nodes x 720 steps at 30 s (apps/simulator/README.md); about 23 kB either way.
TELEMETRY_BYTES_PER_NODE_STEP = 23_000


class SimulationError(ValueError):
    """An invalid simulator argument; the message names the argument and the rule."""


@dataclass(frozen=True)
class SimConfig:
    """What to simulate.

    ``now`` is the portal's "now" (Unix seconds, UTC); the month of jobs ends there.
    ``telemetry_days`` is how many recent days get telemetry (default: all of them).
    ``incidents=False`` plants no security incident and installs patched versions: a
    healthy month (the pathologies stay, as near misses), the rules' clean baseline.
    """

    nodes: int = 16
    days: float = 30.0
    seed: int = 1
    now: int = 0
    telemetry_step: int = 30
    telemetry_days: float | None = None
    cluster: str = "demo"
    traced_jobs: int = 6
    incidents: bool = True
    amd_nodes: int = 0  # MI300X nodes (AMD Device Metrics Exporter) in a partition of their own

    def validated(self) -> SimConfig:
        """Return self after checking every field, or raise SimulationError."""
        _check(1 <= self.nodes <= MAX_NODES, f"--nodes must be between 1 and {MAX_NODES}",
               self.nodes)
        _check(0 < self.days <= MAX_DAYS, f"--days must be > 0 and <= {MAX_DAYS}", self.days)
        _check(self.seed >= 0, "--seed must be >= 0", self.seed)
        _check(self.now > 0, "--now must be a positive Unix time", self.now)
        step = self.telemetry_step
        _check(step >= 10 and WINDOW_SECONDS % step == 0,
               "--telemetry-step must be >= 10 s and divide 21600 (6 h) evenly, "
               "e.g. 15, 30, 60, 300, 900, 3600", step)
        tdays = self.telemetry_days
        _check(tdays is None or 0 <= tdays <= self.days,
               "--telemetry-days must be between 0 and --days", tdays)
        _check(bool(self.cluster) and self.cluster.replace("-", "").isalnum(),
               "--cluster must be letters, digits and dashes", self.cluster)
        _check(self.traced_jobs >= 0, "traced_jobs must be >= 0", self.traced_jobs)
        _check(0 <= self.amd_nodes <= MAX_NODES - self.nodes,
               f"--amd-nodes must be between 0 and {MAX_NODES} less --nodes", self.amd_nodes)
        return self

    @property
    def start(self) -> int:
        """First second of the simulated period."""
        return self.now - int(self.days * 86400)

    @property
    def telemetry_start(self) -> int:
        """First second that has telemetry, aligned down to a 6 h window."""
        days = self.days if self.telemetry_days is None else self.telemetry_days
        first = self.now - int(days * 86400)
        return first - first % WINDOW_SECONDS


    @property
    def telemetry_bytes(self) -> int:
        """About how much telemetry text a run writes (before it starts: a guard for disks)."""
        if self.telemetry_days == 0:
            return 0
        steps = (self.now - self.telemetry_start) // self.telemetry_step
        # an AMD node writes its XGMI links one by one: about twice a dcgm node's text
        return (self.nodes + 2 * self.amd_nodes) * steps * TELEMETRY_BYTES_PER_NODE_STEP


def _check(ok: bool, message: str, value: object) -> None:
    if not ok:
        raise SimulationError(f"{message} (got {value!r})")


def round_now(epoch: float) -> int:
    """The default "now": the current time floored to the hour (stable within an hour)."""
    return int(epoch) - int(epoch) % 3600
