"""A running job's live view, from what the archive computed for it (no new readings).

The beat refreshes a running job's snapshot with the job page's own path
(``apps.jobs.archive.archive_job``: Prometheus, the efficiency split, the health and
straggler verdicts) and builds the guardrails' ``LiveJob`` from those rows. The replay of
a simulated month (``guardrail_report``) builds the same view from the same summariser's
rows computed in memory (``archive.summarise``) at each check time, so both read one
code path: ``view_from_rows``.

The input stall is the diagnosis engine's own verdict: the enabled ``GUARDRAILS_STALL_RULES``
(the ``input-stall`` rules by default) evaluated on the job's facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from apps.analysis import compact
from apps.analysis.diagnosis import Fact, Rule, evaluate
from apps.analysis.guardrails import AlertConfig, GpuTrack, LiveJob, Stall, Straggler
from apps.clusters.models import Node
from apps.jobs.diagnosis import (
    RuleSet,
    efficiency_facts,
    health_facts,
    straggler_facts,
)
from apps.jobs.idleness import idle_rules, job_idleness, run_hours
from apps.jobs.models import Job, JobMetrics, JobMetricSummary, JobNodeMetrics
from apps.jobs.node_facts import host_facts, receive_facts


def alert_config() -> AlertConfig:
    """The thresholds from settings (``GUARDRAILS_*``)."""
    return AlertConfig(
        idle_minutes=settings.GUARDRAILS_IDLE_MINUTES,
        interactive_idle_minutes=settings.GUARDRAILS_INTERACTIVE_IDLE_MINUTES,
        rules=idle_rules(), min_run_minutes=settings.GUARDRAILS_MIN_RUN_MINUTES)


def is_interactive(job: Job) -> bool:
    return job.partition in settings.GUARDRAILS_INTERACTIVE_PARTITIONS


@dataclass(frozen=True)
class StallRules:
    """The diagnosis rules that count as an input stall (enabled ones, loaded once)."""

    rules: tuple[Rule, ...]

    @classmethod
    def load(cls, ruleset: RuleSet | None = None) -> StallRules:
        ruleset = ruleset or RuleSet.load()
        wanted = set(settings.GUARDRAILS_STALL_RULES)
        return cls(tuple(r for r in ruleset.pure if r.key in wanted))

    def stall(self, facts: dict[str, Fact]) -> Stall | None:
        fired = evaluate(self.rules, facts)
        if not fired:
            return None
        # The most specific reading wins (storage or CPU before the plain stall).
        best = sorted(fired, key=lambda f: f.rule == "input-stall")[0]
        return Stall(best.rule, best.title, best.text, best.hint)


def view_from_rows(job: Job, metrics: JobMetrics, summaries: Sequence[JobMetricSummary],
                   nodes: Sequence[JobNodeMetrics], node_cpus: Sequence[int],
                   stall_rules: StallRules, now: datetime) -> LiveJob:
    """The live view of ``job`` from its archive rows (stored, or computed in memory)."""
    assert job.start_time is not None
    start = metrics.window_start.timestamp() if metrics.window_start else \
        job.start_time.timestamp()
    tracks = tuple(_track(s, start, metrics.step_s) for s in summaries)
    facts = _facts(job, metrics, summaries, nodes, node_cpus, now)
    return LiveJob(start=job.start_time.timestamp(), now=now.timestamp(), gpus=tracks,
                   interactive=is_interactive(job), straggler=_straggler(metrics),
                   stall=stall_rules.stall(facts) if metrics.has_data else None,
                   idleness=job_idleness(job, metrics, now=now) if metrics.has_data else None)


def _track(summary: JobMetricSummary, start: float, step: float) -> GpuTrack:
    """One GPU's stored series as samples: bucket ``k`` ends at ``start + (k + 1) * step``
    (``timeseries.regrid``). Busy is the utilisation where exported, else the activity."""
    channels = compact.decode(bytes(summary.series))
    busy = channels.get("gpu_util") or channels.get("activity") or []
    memory = channels.get("fb_used") or []
    times = tuple(start + (k + 1) * step for k in range(len(busy)))
    return GpuTrack(f"{summary.host}:{summary.gpu_index}", times, tuple(busy), tuple(memory))


def _straggler(metrics: JobMetrics) -> Straggler | None:
    named = (metrics.straggler_detail or {}).get("stragglers", [])
    if not named:
        return None
    first = named[0]
    evidence = tuple(e["text"] for e in metrics.straggler_detail.get("evidence", [])
                     if e.get("gpu") == first["gpu"])
    return Straggler(first["gpu"], first.get("cause", "unknown"), float(first["slowdown"]),
                     len(metrics.straggler_detail.get("waiting_gpus", [])), evidence[:4])


def _facts(job: Job, metrics: JobMetrics, summaries: Sequence[JobMetricSummary],
           nodes: Sequence[JobNodeMetrics], node_cpus: Sequence[int],
           now: datetime) -> dict[str, Fact]:
    """The diagnosis facts the stall rules read (as ``apps.jobs.diagnosis`` computes them)."""
    assert job.start_time is not None
    hours = run_hours(job, metrics, now)
    facts: dict[str, Fact] = {"nodes": float(job.node_count),
                              "multi_node": float(job.node_count > 1),
                              "run_hours": hours if hours is not None else 0.0}
    if metrics.has_data:
        facts.update(efficiency_facts(metrics, summaries))
        facts.update(straggler_facts(metrics))
        facts.update(health_facts(summaries))
        facts.update(host_facts(nodes, job.cpus, node_cpus))
        facts.update(receive_facts(summaries, nodes, job.node_count > 1))
    return facts


def stored_view(job: Job, stall_rules: StallRules, now: datetime) -> LiveJob | None:
    """The live view from the job's stored snapshot (None: nothing measured yet)."""
    metrics = JobMetrics.objects.filter(job=job).first()
    if metrics is None or not metrics.has_data or job.start_time is None:
        return None
    summaries = list(job.archived_gpus())
    nodes = list(job.archived_nodes())
    return view_from_rows(job, metrics, summaries, nodes, node_cpus_of(job, nodes),
                          stall_rules, now)


def node_cpus_of(job: Job, nodes: Sequence[JobNodeMetrics]) -> list[int]:
    cpus = dict(Node.objects.filter(cluster_id=job.cluster_id, name__in=[n.host for n in nodes])
                .values_list("name", "cpus"))
    return [cpus.get(n.host, 0) for n in nodes]
