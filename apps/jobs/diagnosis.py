"""Diagnosis service: a job's facts from what is stored, the rules over them, the findings.

The rules are rows admins edit (``DiagnosisRule``); the engine is pure
(``apps/analysis/diagnosis.py``). ``diagnose_job`` runs after every archive and trace import
and replaces the job's diagnosis findings: safe to run twice.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q

from apps.accounts.models import Contact
from apps.analysis.diagnosis import Fact, Finding, evaluate
from apps.analysis.health import HARDWARE_XIDS, nvlink_laggards
from apps.analysis.hostlist import expand as expand_hostlist
from apps.analysis.idleness import facts as idleness_facts
from apps.analysis.idleness import is_idle
from apps.analysis.straggler_story import (
    TelemetryStraggler,
    TraceStraggler,
    merge,
    one_story,
    rank_gpu,
)
from apps.analysis.stragglers import HARDWARE_KINDS
from apps.clusters.models import Node
from apps.jobs.idleness import idle_rules, job_idleness, run_hours, shares
from apps.jobs.models import (
    DiagnosisRule,
    Job,
    JobFinding,
    JobMetrics,
    JobMetricSummary,
    JobNodeMetrics,
    TraceRun,
)
from apps.jobs.node_facts import host_facts, network_facts, receive_facts

log = logging.getLogger(__name__)

NVLINK_LOW = 0.25  # a GPU moving under a quarter of its peers' NVLink bytes
SLOW_ELSEWHERE_DAYS = 30


def diagnose_job(job: Job, rules: RuleSet | None = None) -> list[JobFinding]:
    """Evaluate the enabled rules on ``job`` and store what fired (replacing earlier rows).

    Pass a ``RuleSet`` when diagnosing many jobs: the rules and contacts are then read once.
    """
    return diagnose_many([job], rules)[job.pk]


def diagnose_many(jobs: Sequence[Job], rules: RuleSet | None = None
                  ) -> dict[int, list[JobFinding]]:
    """``diagnose_job`` for each of ``jobs`` in turn, reading their rows in a few queries.

    The answers are those of calling ``diagnose_job`` job after job: a job's
    ``gpu_slow_elsewhere`` counts no job that comes after it in ``jobs`` (the archive
    stores a batch, then diagnoses it). One transaction replaces the findings.
    """
    rules = rules or RuleSet.load()
    stored = _Stored.of(jobs)
    found: dict[int, list[JobFinding]] = {}
    for position, job in enumerate(jobs):
        later = {j.pk for j in jobs[position + 1:]}
        facts = stored.facts(job, later)
        # telemetry and a trace naming one straggler: one finding, one owner
        findings = merge(evaluate(rules.pure, facts), stored.story(job, facts))
        found[job.pk] = [_row(job, f, rules.by_key.get(f.rule), rules) for f in findings]
        if findings:
            log.debug("diagnosis: job %s: %s", job, ", ".join(f.rule for f in findings))
    with transaction.atomic():
        JobFinding.objects.filter(job__in=jobs, source=JobFinding.Source.DIAGNOSIS).delete()
        JobFinding.objects.bulk_create([row for rows in found.values() for row in rows])
    return found


@dataclass(frozen=True)
class RuleSet:
    """The enabled rules (as rows and as the pure engine's rules) and the contacts."""

    rows: tuple[DiagnosisRule, ...]
    pure: tuple[Any, ...]
    contacts: tuple[Contact, ...]

    @classmethod
    def load(cls) -> RuleSet:
        rows = tuple(DiagnosisRule.objects.filter(enabled=True).prefetch_related("conditions")
                     .select_related("contact"))
        return cls(rows, tuple(r.as_rule(list(r.conditions.all())) for r in rows),
                   tuple(Contact.objects.order_by("name")))

    @property
    def by_key(self) -> dict[str, DiagnosisRule]:
        return {r.key: r for r in self.rows}


def _row(job: Job, finding: Finding, rule: DiagnosisRule | None,
         rules: RuleSet) -> JobFinding:
    """The stored finding; ``rule`` is None for the straggler story, which no rule wrote."""
    route, contact = (route_for(rule, job, rules.contacts) if rule is not None
                      else _route_area(finding.area, job, rules.contacts))
    return JobFinding(
        job=job, source=JobFinding.Source.DIAGNOSIS, rule=rule, key=finding.rule,
        area=finding.area, severity=finding.severity, title=finding.title[:200],
        text=finding.text, hint=finding.hint, route=route, contact=contact,
        evidence=[{"fact": e.fact, "label": e.label, "value": e.value, "shown": e.shown,
                   "anchor": e.anchor} for e in finding.evidence])


def route_for(rule: DiagnosisRule, job: Job,
              contacts: Sequence[Contact] | None = None) -> tuple[str, Contact | None]:
    """Whom a finding goes to: the rule's contact, the researcher (code), or the area's
    contact for the job's cluster, else the platform-wide one."""
    if rule.contact is not None:
        return JobFinding.Route.CONTACT, rule.contact
    if rule.area == DiagnosisRule.Area.CODE:
        return JobFinding.Route.RESEARCHER, None
    contact = _area_contact(rule, job, contacts)
    return (JobFinding.Route.CONTACT, contact) if contact else (JobFinding.Route.NONE, None)


def _route_area(area: str, job: Job,
                contacts: Sequence[Contact]) -> tuple[str, Contact | None]:
    """Whom a finding without a rule goes to: the researcher (code) or the area's contact."""
    if area == DiagnosisRule.Area.CODE:
        return JobFinding.Route.RESEARCHER, None
    contact = _contact_for(area, job, contacts)
    return (JobFinding.Route.CONTACT, contact) if contact else (JobFinding.Route.NONE, None)


def _area_contact(rule: DiagnosisRule, job: Job,
                  contacts: Sequence[Contact] | None) -> Contact | None:
    return _contact_for(rule.area, job, contacts)


def _contact_for(area: str, job: Job, contacts: Sequence[Contact] | None) -> Contact | None:
    if contacts is None:
        contacts = list(Contact.objects.order_by("name"))
    fitting = [c for c in contacts if c.area == area
               and c.cluster_id in (job.cluster_id, None)]
    own = [c for c in fitting if c.cluster_id == job.cluster_id]
    return next(iter(own or fitting), None)


# --- Facts ---------------------------------------------------------------------------------


def job_facts(job: Job) -> dict[str, Fact]:
    """Everything the rules may read about ``job``, from the stored archive and traces.

    Facts that were not measured are absent, so no rule fires on them.
    """
    return _Stored.of([job]).facts(job)


@dataclass
class _Stored:
    """The stored rows the facts of some jobs read, fetched in one query per table."""

    metrics: dict[int, JobMetrics]
    summaries: dict[int, list[JobMetricSummary]]
    nodes: dict[int, list[JobNodeMetrics]]
    traces: dict[int, TraceRun]
    stragglers: list[tuple[int, str, str, int, int, Any]]  # job, uuid, host, gpu, cluster, start
    node_cpus: dict[tuple[int, str], int]  # (cluster, host) -> the node's CPUs

    @classmethod
    def of(cls, jobs: Sequence[Job]) -> _Stored:
        pks = [j.pk for j in jobs]
        metrics = {m.job_id: m for m in JobMetrics.objects.filter(job_id__in=pks)}
        summaries: dict[int, list[JobMetricSummary]] = {}
        for s in JobMetricSummary.objects.for_jobs(list(jobs)):  # Meta order: job, host, GPU
            summaries.setdefault(s.job_id, []).append(s)
        nodes: dict[int, list[JobNodeMetrics]] = {}
        for n in JobNodeMetrics.objects.for_jobs(list(jobs)):
            nodes.setdefault(n.job_id, []).append(n)
        traces: dict[int, TraceRun] = {}
        for t in TraceRun.objects.filter(job_id__in=pks).prefetch_related("ranks"):
            traces.setdefault(t.job_id, t)  # Meta order: the latest first
        hosts = {n.host for rows in nodes.values() for n in rows}
        node_cpus = {(c, name): cpus for c, name, cpus in Node.objects.filter(
            cluster_id__in={j.cluster_id for j in jobs}, name__in=hosts).values_list(
            "cluster_id", "name", "cpus")} if hosts else {}
        return cls(metrics, summaries, nodes, traces, _stragglers(jobs, summaries), node_cpus)

    def facts(self, job: Job, later: set[int] | frozenset[int] = frozenset()
              ) -> dict[str, Fact]:
        """``job``'s facts; ``later``: jobs whose straggler GPUs it must not count yet."""
        facts: dict[str, Fact] = {"nodes": float(job.node_count),
                                  "multi_node": float(job.node_count > 1)}
        metrics = self.metrics.get(job.pk)
        measured = metrics is not None and metrics.has_data
        # running: the time its telemetry covers (what "busy over N hours" read)
        hours = run_hours(job, metrics if measured else None)
        if hours is not None:
            facts["run_hours"] = hours
        if metrics is not None and measured:
            summaries = self.summaries.get(job.pk, [])
            facts.update(efficiency_facts(metrics, summaries))
            facts.update(idleness_facts(job_idleness(job, metrics)))
            facts.update(straggler_facts(metrics))
            facts.update(health_facts(summaries))
            facts.update(_slow_elsewhere(job, summaries, [
                row for row in self.stragglers if row[0] not in later]))
            nodes = self.nodes.get(job.pk, [])
            facts.update(network_facts(nodes))
            facts.update(host_facts(nodes, job.cpus, [
                self.node_cpus.get((job.cluster_id, n.host), 0) for n in nodes]))
            facts.update(receive_facts(summaries, nodes, job.node_count > 1))
        trace = self.traces.get(job.pk)
        if trace is not None:
            facts.update(trace_facts(trace))
        return facts

    def story(self, job: Job, facts: dict[str, Fact]) -> Finding | None:
        """The straggler story when telemetry and the latest trace both name one."""
        metrics, trace = self.metrics.get(job.pk), self.traces.get(job.pk)
        if metrics is None or trace is None or not facts.get("straggler_found"):
            return None
        return one_story(trace_straggler(trace, job), TelemetryStraggler(
            gpus=tuple(s["gpu"] for s in metrics.straggler_detail.get("stragglers", [])),
            hardware=bool(facts.get("straggler_hardware")),
            cause=str(facts.get("straggler_cause", ""))))


def trace_straggler(trace: TraceRun, job: Job) -> TraceStraggler | None:
    """The trace's straggler rank and the GPU it ran on, named as telemetry names GPUs."""
    row = trace.straggler_row()
    if row is None:
        return None
    return TraceStraggler(
        rank=row.rank, phase=trace.straggler_phase, excess_ms=trace.straggler_excess_ms or 0.0,
        gpu=rank_gpu(row.device_host, row.device_index, job_nodes(job)),
        intermittent=trace.straggler_intermittent, steps=tuple(trace.straggler_steps))


def job_nodes(job: Job) -> list[str]:
    """The job's node names (Slurm's host list expanded)."""
    return expand_hostlist(job.nodes) if job.nodes else []


def efficiency_facts(metrics: JobMetrics,
                     summaries: Sequence[JobMetricSummary]) -> dict[str, Fact]:
    """The job-level split and means, and which GPUs sat idle (``apps.analysis.idleness``).

    Busy, computing and held idle are the stored split's shares (``idleness.shares``: what
    the efficiency card, the job list and the alerts print), the GPUs' own when the split
    has no hours."""
    total = sum(s.measured_s for s in summaries) or 1.0
    busy = sum((s.useful + s.waiting) * s.measured_s for s in summaries) / total
    computing = sum(s.useful * s.measured_s for s in summaries) / total
    held_idle = sum(s.held_idle * s.measured_s for s in summaries) / total
    split = shares(metrics)
    if split is not None:
        hours = metrics.useful_hours + metrics.waiting_hours + metrics.held_idle_hours + \
            metrics.no_process_hours
        busy, held_idle, computing = split[0], split[1], metrics.useful_hours / hours
    rules = idle_rules()
    idle = [s for s in summaries if is_idle(s.useful + s.waiting, rules)]
    facts: dict[str, Fact] = {
        "gpus": float(len(summaries)), "sm_measured": float(metrics.measure == "sm_active"),
        "busy": busy, "computing": computing,
        "computing_share": computing / busy if busy > 0 else None,
        "waiting": busy - computing, "idle": 1.0 - busy,
        "held_idle": held_idle if summaries else None,
        "tensor": metrics.means.get("tensor_active"),
        "idle_gpu_share": len(idle) / len(summaries) if summaries else None,
        "idle_gpus": ", ".join(f"{s.host}:{s.gpu_index}" for s in idle[:8]) or None,
        "occupancy": _weighted(summaries, "occupancy_mean"),
        "fp64": _weighted(summaries, "fp64_mean"),
        "waiting_with_traffic": _weighted(summaries, "waiting_with_traffic"),
        "pcie_rx_gbs": _gbs(_weighted(summaries, "pcie_rx_bps")),
    }
    return {k: v for k, v in facts.items() if v is not None}


def straggler_facts(metrics: JobMetrics) -> dict[str, Fact]:
    """The stored straggler verdict as facts: nothing named on one GPU; absent without data."""
    if not metrics.straggler_status:
        return {}
    named = metrics.straggler_detail.get("stragglers", [])
    facts: dict[str, Fact] = {"straggler_found": float(bool(named)), "straggler_hardware": 0.0}
    if named:
        # Only evidence pointing at the device counts: the software power limit and heat
        # above the waiting peers' follow from the heaviest load (issue 28).
        kinds = {e["kind"] for e in metrics.straggler_detail.get("evidence", [])}
        first = named[0]
        facts.update(
            straggler_gpu=", ".join(s["gpu"] for s in named),
            straggler_slowdown=float(first["slowdown"]),
            straggler_hardware=float(bool(kinds & HARDWARE_KINDS)),
            straggler_cause=CAUSE_WORDS.get(first["cause"], "no throttle reason, clock drop "
                                                            "or error on the device"),
            waiting_gpu_count=float(len(metrics.straggler_detail.get("waiting_gpus", []))))
    return facts


CAUSE_WORDS = {"thermal": "thermal throttling", "clock": "SM clocks below its peers' at the "
               "same load", "xid": "XID errors", "ecc": "ECC errors",
               "hw_slowdown": "a hardware slowdown or power brake",
               "power_limit": "it works hardest and so runs at its software power limit, a "
                              "consequence of its load, not a fault"}


def health_facts(summaries: Sequence[JobMetricSummary]) -> dict[str, Fact]:
    """XIDs, ECC, throttling and heat: the worst GPU, or totals over GPUs."""
    facts: dict[str, Fact] = {}
    xid_gpus = [s for s in summaries if HARDWARE_XIDS & set(s.xids or [])]
    if any(s.xids is not None for s in summaries):
        facts["xid_gpus"] = float(len(xid_gpus))
        codes = sorted({x for s in xid_gpus for x in s.xids if x in HARDWARE_XIDS})
        if codes:
            facts["xid_codes"] = ", ".join(map(str, codes))
    for field in ("ecc_dbe", "ecc_sbe"):
        known = [getattr(s, field) for s in summaries if getattr(s, field) is not None]
        if known:
            facts[field] = float(sum(known))
    throttled = [s for s in summaries if s.thermal_share is not None]
    if throttled:
        worst = max(throttled, key=lambda s: s.thermal_share or 0.0)
        facts.update(thermal_share=worst.thermal_share,
                     thermal_gpu=f"{worst.host}:{worst.gpu_index}")
    temps = [s.temp_max for s in summaries if s.temp_max is not None]
    if temps:
        facts["temp_max"] = max(temps)
    facts.update(_nvlink_facts(summaries))
    return facts


def _nvlink_facts(summaries: Sequence[JobMetricSummary]) -> dict[str, Fact]:
    """NVLink laggards among the GPUs that ran (an unused GPU is the idle-GPU finding's:
    the site's one idle reading decides which GPUs did no work)."""
    low = nvlink_laggards([(f"{s.host}:{s.gpu_index}", s.useful + s.waiting, s.nvlink_bps)
                           for s in summaries], idle_rules().idle_below, NVLINK_LOW)
    if low is None:
        return {}
    facts: dict[str, Fact] = {"nvlink_low_gpus": float(len(low))}
    if low:
        facts["nvlink_low_names"] = ", ".join(low[:8])
    return facts


def slow_elsewhere_facts(job: Job, summaries: Sequence[JobMetricSummary]) -> dict[str, Fact]:
    """How many other recent jobs named one of this job's GPUs the straggler (the worst)."""
    return _slow_elsewhere(job, summaries, _stragglers([job], {job.pk: list(summaries)}))


def _stragglers(jobs: Sequence[Job], summaries: dict[int, list[JobMetricSummary]]
                ) -> list[tuple[int, str, str, int, int, Any]]:
    """The stored straggler GPUs that the jobs' ``gpu_slow_elsewhere`` may count (a superset:
    ``_slow_elsewhere`` picks each job's own), in one query."""
    mine = [(j, summaries[j.pk]) for j in jobs if summaries.get(j.pk) and j.start_time]
    if not mine:
        return []
    since = min(j.start_time for j, _ in mine if j.start_time) - timedelta(days=SLOW_ELSEWHERE_DAYS)
    uuids = {s.gpu_uuid for _, rows in mine for s in rows if s.gpu_uuid}
    hosts = {s.host for _, rows in mine for s in rows}
    return list(JobMetricSummary.objects.filter(
        straggler=True, job__cluster_id__in={j.cluster_id for j, _ in mine},
        job__start_time__gte=since).filter(Q(gpu_uuid__in=uuids) | Q(host__in=hosts))
        .values_list("job_id", "gpu_uuid", "host", "gpu_index", "job__cluster_id",
                     "job__start_time"))


def _slow_elsewhere(job: Job, summaries: Sequence[JobMetricSummary],
                    stragglers: Sequence[tuple[int, str, str, int, int, Any]]
                    ) -> dict[str, Fact]:
    if not summaries or job.start_time is None:
        return {}
    since = job.start_time - timedelta(days=SLOW_ELSEWHERE_DAYS)
    uuids = {s.gpu_uuid for s in summaries if s.gpu_uuid}
    places = {(s.host, s.gpu_index) for s in summaries}
    hosts = {h for h, _ in places}
    others = {(other, uuid, host, index) for other, uuid, host, index, cluster, start
              in stragglers if other != job.pk and cluster == job.cluster_id
              and start >= since and (uuid in uuids or host in hosts)}
    counts: Counter[str] = Counter()
    for _job, uuid, host, index in others:  # one count per (job, GPU)
        if (uuid and uuid in uuids) or (not uuid and (host, index) in places):
            counts[uuid or f"{host}:{index}"] += 1
    if not counts:
        return {"gpu_slow_elsewhere": 0.0}
    gpu, count = counts.most_common(1)[0]
    names = {s.gpu_uuid: f"{s.host}:{s.gpu_index}" for s in summaries if s.gpu_uuid}
    return {"gpu_slow_elsewhere": float(count), "slow_gpu": names.get(gpu, gpu)}


def trace_facts(trace: TraceRun) -> dict[str, Fact]:
    """The latest trace analysis: phase shares and the straggler rank's phase."""
    ranks = list(trace.ranks.all())
    step = sum(r.step_ms for r in ranks)
    facts: dict[str, Fact] = {"trace": 1.0,
                              "trace_comm_bound": float(trace.communication_bound)}
    if step > 0:
        facts["trace_data_share"] = sum(r.data_loading_ms for r in ranks) / step
        facts["trace_comm_share"] = sum(r.communication_ms for r in ranks) / step
    phase = trace.straggler_phase if trace.straggler_rank is not None else ""
    facts.update(trace_straggler_data=float(phase == "data_loading"),
                 trace_straggler_compute=float(phase in ("forward", "backward")),
                 trace_straggler_optimizer=float(phase == "optimizer"))
    if phase:
        facts.update(trace_straggler_rank=str(trace.straggler_rank), trace_straggler_phase=phase,
                     trace_excess_ms=trace.straggler_excess_ms)
        row = trace.straggler_row()
        if row is not None and row.gpu_label:
            facts["trace_straggler_gpu"] = row.gpu_label
    if trace.gpu_idle_share is not None:
        facts["trace_gpu_idle"] = trace.gpu_idle_share
    return facts


def _weighted(summaries: Sequence[JobMetricSummary], field: str) -> float | None:
    pairs = [(getattr(s, field), s.measured_s) for s in summaries
             if getattr(s, field) is not None]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total > 0 else None


def _gbs(bps: float | None) -> float | None:
    return bps / 1e9 if bps is not None else None


def finding_summary(findings: Sequence[JobFinding]) -> dict[str, Any]:
    """Counts by area and the worst severity (for list badges and the API)."""
    order = {"info": 0, "warning": 1, "critical": 2}
    worst = max((f.severity for f in findings), key=lambda s: order.get(s, 0), default="")
    return {"count": len(findings), "worst": worst,
            "areas": dict(Counter(f.area for f in findings))}
