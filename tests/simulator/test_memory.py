"""Telemetry streams: four times the days of telemetry must not grow the peak memory."""

from __future__ import annotations

import tracemalloc

from tests.simulator.conftest import run


def _peak(out, telemetry_days: float) -> int:
    tracemalloc.start()
    try:
        run(out, nodes=4, days=4.0, telemetry_step=300, telemetry_days=telemetry_days)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_memory_stays_flat_when_telemetry_days_grow(tmp_path):
    small = _peak(tmp_path / "one", 1.0)
    large = _peak(tmp_path / "four", 4.0)
    assert large < small * 1.3, (small, large)
