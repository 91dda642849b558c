"""Telemetry streams: four times the days of telemetry must not grow the peak memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Each measurement in a fresh interpreter: tracemalloc counts every thread's allocations, and
# a pytest worker that ran other tests first may have threads of theirs still allocating
# (seen in CI: 0.9 MB for one day, 8.7 MB for four, with the simulator itself unchanged).
MEASURE = """
import sys, tracemalloc
from pathlib import Path
from tests.simulator.conftest import run
tracemalloc.start()
run(Path(sys.argv[1]), nodes=4, days=4.0, telemetry_step=300, telemetry_days=float(sys.argv[2]))
print(tracemalloc.get_traced_memory()[1])
"""


def _peak(out: Path, telemetry_days: float) -> int:
    done = subprocess.run([sys.executable, "-c", MEASURE, str(out), str(telemetry_days)],
                          cwd=ROOT, capture_output=True, text=True, check=True, timeout=600)
    return int(done.stdout.split()[-1])


def test_peak_memory_stays_flat_when_telemetry_days_grow(tmp_path):
    small = _peak(tmp_path / "one", 1.0)
    large = _peak(tmp_path / "four", 4.0)
    assert large < small * 1.3, (small, large)
