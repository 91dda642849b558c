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
