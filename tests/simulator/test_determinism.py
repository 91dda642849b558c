"""Same seed, same bytes; another seed, another month."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.simulator.conftest import run


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_it_writes_byte_identical_output_for_the_same_seed(tmp_path, small_run):
    again = run(tmp_path / "again")
    assert _digest(again) == _digest(small_run)


def test_it_writes_another_workload_for_another_seed(tmp_path, small_run):
    other = run(tmp_path / "other", seed=8)
    sacct = "slurm/sacct.json"
    assert (other / sacct).read_bytes() != (small_run / sacct).read_bytes()


def test_telemetry_written_in_a_forked_child_is_the_same_bytes(tmp_path, small_run):
    """`manage.py simulate` writes the telemetry in the background while the rest is written."""
    from functools import partial

    from apps.core.batch import forked
    from apps.simulator import SimConfig, simulate
    from tests.simulator.conftest import NOW

    out = tmp_path / "forked"
    summary = simulate(SimConfig(nodes=4, days=3.0, seed=7, now=NOW, telemetry_step=300,
                                 telemetry_days=1.0), out, background=partial(forked, chunk=1))
    assert summary.telemetry_files and all(p.parent == out / "telemetry"
                                           for p in summary.telemetry_files)
    assert _digest(out) == _digest(small_run)
