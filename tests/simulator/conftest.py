"""Simulator runs shared by the simulator tests (module-free, no database)."""

from __future__ import annotations

from pathlib import Path

import pytest

from apps.simulator import SimConfig, simulate

NOW = 1796000400  # 2026-11-30T01:00:00Z


def run(out: Path, **overrides: object) -> Path:
    settings = {"nodes": 4, "days": 3.0, "seed": 7, "now": NOW, "telemetry_step": 300,
                "telemetry_days": 1.0, **overrides}
    simulate(SimConfig(**settings), out)  # type: ignore[arg-type]
    return out


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 nodes (one per exporter group), 3 days, 1 day of telemetry at 5 min."""
    return run(tmp_path_factory.mktemp("small"))


@pytest.fixture(scope="session")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 nodes, 6 days, 3 days of hourly telemetry: big enough for every planted kind."""
    return run(tmp_path_factory.mktemp("full"), nodes=8, days=6.0, seed=1,
               telemetry_step=3600, telemetry_days=3.0)
