"""A running job of bob's with telemetry faked at the adapter boundary (values by time)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from apps.analysis.timeseries import GpuKey, Series, Window
from apps.clusters.adapters.telemetry import GpuInterval, JobTelemetry, plan
from apps.jobs.models import Job
from tests.conftest import make_job

BUSY = {"gpu_util": 0.95, "sm_active": 0.7, "tensor_active": 0.4, "fb_used": 60000.0,
        "power": 500.0}
IDLE = {"gpu_util": 0.0, "sm_active": 0.0, "tensor_active": 0.0, "fb_used": 300.0,
        "power": 70.0}
HELD = {**IDLE, "fb_used": 18000.0}
START = datetime(2026, 11, 20, 6, 0, tzinfo=__import__("datetime").UTC)

Profile = Callable[[GpuKey, float], dict[str, float]]


@dataclass
class TimedSource:
    """Serves ``profile(gpu, t)`` at every 60 s scrape of the window, for ``gpus``, and
    fixed node values (``nodes``: host -> measure -> value)."""

    gpus: Sequence[GpuKey]
    profile: Profile
    name: str = "prometheus"
    calls: list[Window] = field(default_factory=list)
    nodes: dict[str, dict[str, float]] = field(default_factory=dict)

    def fetch(self, job_id: str, window: Window,
              intervals: Sequence[GpuInterval]) -> JobTelemetry:
        self.calls.append(window)
        times = [window.start + 60 * (i + 1) for i in range(int(window.seconds // 60))]
        result = JobTelemetry(plan(window, 60), "label")
        result.gpus = {key: {m: Series(m, {}, tuple((t, self.profile(key, t)[m]) for t in times))
                             for m in self.profile(key, window.start)} for key in self.gpus}
        result.nodes = {host: {m: Series(m, {}, tuple((t, v) for t in times))
                               for m, v in values.items()} for host, values in self.nodes.items()}
        return result


def gpus(n: int) -> list[GpuKey]:
    return [GpuKey("gpu01", i) for i in range(n)]


def after(minutes: float, then: dict[str, float], before: dict[str, float] = BUSY) -> Profile:
    """Busy until ``minutes`` after the start, then ``then``."""
    edge = START.timestamp() + minutes * 60
    return lambda key, t: before if t < edge else then


@pytest.fixture
def running(world) -> Job:
    """bob's 4-GPU job, running since START (world's month), partition gpu."""
    world.users["bob"].email = "bob@example.org"
    world.users["bob"].save()
    return make_job(world.cluster, 555, world.users["bob"], world.team_a,
                    state=Job.State.RUNNING, end_time=None, start_time=START,
                    submit_time=START - timedelta(minutes=5), gpus=4, gpu_equivalent=4.0,
                    gpu_types={"h100": 4}, name="llm-train")
