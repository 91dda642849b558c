"""An in-memory telemetry source for unit tests (the adapter boundary, nothing deeper)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from apps.analysis.timeseries import GpuKey, Series, Window
from apps.clusters.adapters.telemetry import GpuInterval, JobTelemetry, plan


@dataclass
class FakeSource:
    """Serves fixed per-GPU (and per-node) values at every 30 s scrape of the window, with
    Prometheus' ``warnings`` if given, or raises ``error``."""

    values: dict[GpuKey, dict[str, float]] = field(default_factory=dict)
    error: Exception | None = None
    nodes: dict[str, dict[str, float]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    name: str = "prometheus"
    calls: int = 0

    def fetch(self, job_id: str, window: Window,
              intervals: Sequence[GpuInterval]) -> JobTelemetry:
        self.calls += 1
        if self.error is not None:
            raise self.error
        p = plan(window, 30)
        times = [window.start + 30 * (i + 1) for i in range(int(window.seconds // 30))]
        result = JobTelemetry(p, "label")
        result.gpus = {key: {m: Series(m, {}, tuple((t, v) for t in times))
                             for m, v in measures.items()}
                       for key, measures in self.values.items()}
        result.uuids = {key: f"GPU-{key.host}-{key.gpu}" for key in self.values}
        result.nodes = {host: {m: Series(m, {}, tuple((t, v) for t in times))
                               for m, v in measures.items()}
                        for host, measures in self.nodes.items()}
        result.warnings = list(self.warnings)
        return result
