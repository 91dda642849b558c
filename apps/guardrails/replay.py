"""Replaying the guardrails' beat over a month of telemetry files (the simulator's, an export).

For every started GPU job of a cluster, the job's telemetry is read once from the
OpenMetrics files (``OpenMetricsSource.stream``, the archive's own reader); then, at each
check time (``every`` seconds from the job's start, and at its end), the telemetry up to
that time is summarised by the archive's own summariser (``archive.summarise``: efficiency,
health, the straggler verdict) and read as the beat reads a live snapshot
(``live.view_from_rows``, the input-stall rules). The first time each alert kind fires is
what the beat would have sent then. Nothing is stored: the replay is read-only.

``manage.py guardrail_report`` compares these alerts with the simulator's ground truth.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.db.models import QuerySet

from apps.analysis.guardrails import AlertConfig, Raised, all_idle_since, evaluate
from apps.analysis.guardrails_policy import (
    CANCEL,
    CLEAR,
    WARN,
    Decision,
    PolicyConfig,
    PolicyState,
    decide,
)
from apps.analysis.timeseries import Series, Window
from apps.clusters.adapters.telemetry import GpuInterval, JobTelemetry, plan
from apps.clusters.models import Cluster, Node
from apps.guardrails.live import StallRules, view_from_rows
from apps.guardrails.policy import config_for
from apps.jobs import archive
from apps.jobs.models import Job, JobGpu, JobMetrics, JobMetricSummary, JobNodeMetrics


@dataclass
class Replayed:
    """What the replay saw of one job: whether it had telemetry, and each alert kind's first
    firing (the check's time, epoch seconds, and the alert)."""

    job_id: int
    measured: bool = False
    checks: int = 0
    alerts: dict[str, tuple[float, Raised]] = field(default_factory=dict)
    decisions: list[tuple[float, Decision]] = field(default_factory=list)  # policy steps, dry run
    end: float = 0.0
    gpus: float = 0.0

    @property
    def policy(self) -> list[tuple[float, str]]:
        """The policy's steps as (when, action): warn, clear, cancel."""
        return [(t, d.action) for t, d in self.decisions]


Enough = Callable[[Job, Replayed], bool]  # enough of this job's replay?


def replay(cluster: Cluster, telemetry: Path, now: datetime, every: float,
           config: AlertConfig, policy: PolicyConfig | None = None,
           jobs: QuerySet[Job] | None = None,
           progress: Callable[[int, int], None] | None = None,
           enough: Enough | None = None) -> Iterator[Replayed]:
    """Each started GPU job of ``cluster`` (or ``jobs``) as the beat would have seen it.

    ``enough(job, replayed)``, asked after each check, ends a job's replay early when it says
    nothing more is wanted (the demo's stage: once what a job was picked for is raised);
    the checks before it are the same either way.
    """
    jobs = jobs if jobs is not None else Job.objects.filter(
        cluster=cluster, gpu_equivalent__gt=0, start_time__isnull=False)
    rows = {str(j.job_id): j for j in jobs.select_related("cluster").order_by("pk")}
    held = _held(list(rows.values()))
    windows = {key: _window(job, now) for key, job in rows.items()}
    source = archive.OpenMetricsSource([telemetry], archive.catalogue_for(cluster))
    cpus = dict(Node.objects.filter(cluster=cluster).values_list("name", "cpus"))
    stall_rules = StallRules.load()
    requests = [(key, windows[key], _intervals(held.get(job.pk, []), windows[key]))
                for key, job in rows.items()]
    for done, (key, read) in enumerate(source.stream(requests), start=1):
        yield _replay_job(rows[key], read, windows[key], source.catalogue.scrape_interval,
                          every, (config, policy or PolicyConfig()), stall_rules, cpus, enough)
        if progress:
            progress(done, len(rows))


def _window(job: Job, now: datetime) -> Window:
    assert job.start_time is not None
    end = job.end_time if job.end_time and not job.is_active else now
    start = job.start_time.timestamp()
    return Window(start, max(start + 1.0, min(end, now).timestamp()))


def _held(jobs: list[Job]) -> dict[int, list[JobGpu]]:
    out: dict[int, list[JobGpu]] = {}
    for gpu in JobGpu.objects.filter(job__in=jobs).select_related("node"):
        out.setdefault(gpu.job_id, []).append(gpu)
    return out


def _intervals(held: list[JobGpu], window: Window) -> list[GpuInterval]:
    return [GpuInterval(g.node.name, g.gpu_index, max(window.start, g.start.timestamp()),
                        min(window.end, g.end.timestamp() if g.end else window.end), g.gpu_uuid)
            for g in held]


def check_times(window: Window, every: float) -> list[float]:
    """When the beat would have looked: every ``every`` seconds after the start, and at the
    end (the last look before the job ended)."""
    times = []
    t = window.start + every
    while t < window.end:
        times.append(t)
        t += every
    return [*times, window.end]


def _replay_job(job: Job, read: JobTelemetry, window: Window, scrape: float, every: float,
                configs: tuple[AlertConfig, PolicyConfig], stall_rules: StallRules,
                cpus: dict[str, int], enough: Enough | None = None) -> Replayed:
    """Each check's alerts (the first firing per kind) and the idle-job policy's steps, as
    a dry run with no exemption: warned, withdrawn, cancelled (then the job would end)."""
    config, policy = configs[0], config_for(job, configs[1])
    result = Replayed(job.job_id, measured=bool(read.gpus), end=window.end,
                      gpus=job.gpu_equivalent)
    if not read.gpus:
        return result
    cut, warned = _Cutter(read), None
    for t in check_times(window, every):
        view = _view_at(job, cut.until(t, scrape), Window(window.start, t), stall_rules, cpus)
        result.checks += 1
        for alert in evaluate(view, config):
            if alert.kind not in result.alerts:
                result.alerts[alert.kind] = (t, alert)
        step = decide(PolicyState(t, all_idle_since(view, config.idle_below), warned), policy)
        if step.action in (WARN, CLEAR, CANCEL):
            result.decisions.append((t, step))
            warned = t if step.action == WARN else None
        if step.action == CANCEL or (enough is not None and enough(job, result)):
            break
    return result


class _Cutter:
    """The job's telemetry up to a time, cheaply (points are in time order)."""

    def __init__(self, read: JobTelemetry) -> None:
        self.read = read
        self.times = {id(s): [p[0] for p in s.points] for ch in
                      (*read.gpus.values(), *read.nodes.values()) for s in ch.values()}

    def _cut(self, s: Series, t: float) -> Series:
        return Series(s.metric, s.labels, s.points[:bisect.bisect_right(self.times[id(s)], t)])

    def until(self, t: float, scrape: float) -> JobTelemetry:
        r = self.read
        out = JobTelemetry(plan(Window(r.plan.window.start, t), scrape), r.binding)
        out.gpus = {k: {m: self._cut(s, t) for m, s in ch.items()} for k, ch in r.gpus.items()}
        out.nodes = {h: {m: self._cut(s, t) for m, s in ch.items()} for h, ch in r.nodes.items()}
        out.uuids = r.uuids
        return out


def _view_at(job: Job, read: JobTelemetry, window: Window, stall_rules: StallRules,
             cpus: dict[str, int]) -> Any:
    """The live view at ``window.end``: the archive's summary as unsaved rows, then the
    beat's own reading of them."""
    now = datetime.fromtimestamp(window.end, tz=UTC)
    todo = archive.Todo(job.pk, window, [], job.gpu_equivalent * window.seconds / 3600,
                        job.gpus, False)
    summary = archive.summarise(todo, "openmetrics", read)
    metrics = JobMetrics(job=job, status=JobMetrics.Status.LIVE, **summary.fields)
    summaries = [JobMetricSummary(job=job, **row) for row in summary.summaries]
    nodes = [JobNodeMetrics(job=job, **row) for row in summary.nodes]
    return view_from_rows(job, metrics, summaries, nodes, [cpus.get(n.host, 0) for n in nodes],
                          stall_rules, now)
