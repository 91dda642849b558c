"""Real PyTorch DDP traces, generated once per test session (see ``ddp_run.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.jobs.ddp_run import Scenario, generate

DELAY_MS = 20.0

# World size 3: two balanced runs and one straggler per phase, each on a different rank.
SCENARIOS_3 = [
    Scenario("balanced_a"),
    Scenario("balanced_b"),
    Scenario("slow_data", slow_rank=1, phase="data_loading", delay_ms=DELAY_MS),
    Scenario("slow_forward", slow_rank=2, phase="forward", delay_ms=DELAY_MS),
    Scenario("slow_backward", slow_rank=0, phase="backward", delay_ms=DELAY_MS),
    Scenario("slow_optimizer", slow_rank=1, phase="optimizer", delay_ms=DELAY_MS),
    # an intermittent straggler: a periodic hook in rank 2's backward, one step in three
    # (2.5 times the delay, so that it stands out on a loaded 2-core machine); 12 traced
    # steps give 4 slow ones among the 11 analysed
    Scenario("slow_backward_every_3", slow_rank=2, phase="backward", delay_ms=2.5 * DELAY_MS,
             steps=12, every=3),
]
# World size 2: the leave-one-out median is then the other rank alone.
SCENARIOS_2 = [
    Scenario("balanced_2"),
    Scenario("slow_data_2", slow_rank=0, phase="data_loading", delay_ms=DELAY_MS),
    Scenario("slow_optimizer_2", slow_rank=1, phase="optimizer", delay_ms=DELAY_MS),
]


@pytest.fixture(scope="session")
def ddp_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    """``{scenario: (trace folder, ground truth)}`` for every scenario above."""
    pytest.importorskip("torch", reason="torch (CPU) is in requirements-dev.txt")
    root = tmp_path_factory.mktemp("ddp")
    truths = {**generate(root / "ws3", SCENARIOS_3, world_size=3),
              **generate(root / "ws2", SCENARIOS_2, world_size=2)}
    return {name: (root / ("ws3" if name in {s.name for s in SCENARIOS_3} else "ws2")
                   / name / "traces", truth) for name, truth in truths.items()}
