"""Stored verdicts against the simulator's ground truth: what was found, what was a false alarm.

``manage.py verdict_report GROUND_TRUTH_FILE --cluster NAME`` prints this. The ground truth
is read only here and in tests (STYLE.md §2.5): it never feeds an analysis.

A pathology counts as **found** when what is stored for its job says so in the same terms:

- ``straggler_gpu``: the straggler verdict names that (node, GPU);
- ``allreduce_wait``: the verdict names the straggler and at least half the waiting GPUs;
- ``input_pipeline_stall``: a finding for the storage contact (area ``data``);
- ``idle_allocated_gpus``, ``idle_notebook``, ``mostly_idle_notebook``, ``no_tensor_cores``:
  a finding citing the idle-GPU share, the time held idle (busy share and run time), or
  the tensor pipe;
- ``slow_ib_link`` (a node): a network finding on a multi-node job that ran on that node.

A pathology whose job has no stored telemetry cannot be found from telemetry: it is counted
apart (``unmeasured``). A **false alarm** is a finding or a named straggler on a healthy job:
one with no planted pathology or incident, no infrastructure failure, no planted trace
straggler (``truth["traces"]`` with a ``straggler_rank``), and (multi-node jobs) no node
with a planted pathology, such as a slow link, under it while it ran.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from apps.clusters.models import Cluster
from apps.jobs.models import Job, JobFinding, JobMetrics, JobMetricSummary, TraceRun

Check = Callable[[dict[str, Any], "Stored"], bool]


@dataclass
class Stored:
    """What Beacon stored for the jobs the ground truth names (loaded in a few queries)."""

    jobs: dict[int, Job]
    metrics: dict[int, JobMetrics]
    stragglers: dict[int, set[str]]
    findings: dict[int, list[JobFinding]]
    nodes: dict[int, set[str]]
    traces: dict[int, TraceRun]

    def measured(self, job_id: int | None) -> bool:
        metrics = self.metrics.get(job_id or -1)
        return metrics is not None and metrics.has_data

    def facts(self, job_id: int | None) -> set[str]:
        return {e["fact"] for f in self.findings.get(job_id or -1, []) for e in f.evidence}


@dataclass
class KindResult:
    kind: str
    total: int = 0
    measured: int = 0
    found: int = 0
    missed: list[str] = field(default_factory=list)

    @property
    def share(self) -> float | None:
        return self.found / self.measured if self.measured else None


@dataclass
class Report:
    kinds: list[KindResult]
    healthy: int
    healthy_measured: int
    false_alarms: dict[int, list[str]]
    traces: list[dict[str, Any]]


def _straggler(truth: dict[str, Any], stored: Stored) -> bool:
    entity = truth["entity"]
    return f"{entity['node']}:{entity['gpu']}" in stored.stragglers.get(entity["job_id"], set())


def _allreduce(truth: dict[str, Any], stored: Stored) -> bool:
    job_id, details = truth["entity"]["job_id"], truth["details"]
    metrics = stored.metrics.get(job_id)
    named = f"{details['straggler_node']}:{details['straggler_gpu']}"
    waiting = len((metrics.straggler_detail if metrics else {}).get("waiting_gpus", []))
    return named in stored.stragglers.get(job_id, set()) and \
        waiting >= details["waiting_gpus"] / 2


def _area(area: str) -> Check:
    return lambda truth, stored: any(f.area == area for f in
                                     stored.findings.get(truth["entity"]["job_id"], []))


def _cites(*facts: str) -> Check:
    return lambda truth, stored: set(facts) <= stored.facts(truth["entity"]["job_id"])


def _slow_ib(truth: dict[str, Any], stored: Stored) -> bool:
    node = truth["entity"]["node"]
    return any(stored.jobs[job_id].node_count >= 2 and node in stored.nodes.get(job_id, set())
               and f.area == "network" and node in f.text
               for job_id, findings in stored.findings.items() for f in findings)


CHECKS: dict[str, Check] = {
    "straggler_gpu": _straggler,
    "allreduce_wait": _allreduce,
    "input_pipeline_stall": _area("data"),
    "idle_allocated_gpus": _cites("idle_gpu_share"),
    "idle_notebook": _cites("busy", "run_hours"),
    "mostly_idle_notebook": _cites("busy", "run_hours"),
    "no_tensor_cores": _cites("tensor"),
    "slow_ib_link": _slow_ib,
}


def report(truth: Mapping[str, Any], cluster: Cluster) -> Report:
    """Compare the stored verdicts of ``cluster`` with the simulator's ground truth."""
    stored = load(cluster, {int(j) for j in truth["jobs"]})
    kinds = {kind: KindResult(kind) for kind in CHECKS}
    for finding in truth["findings"]:
        result = kinds.get(finding["kind"])
        if result is None:
            continue
        result.total += 1
        if not _measurable(finding, stored):
            continue
        result.measured += 1
        if CHECKS[finding["kind"]](finding, stored):
            result.found += 1
        else:
            result.missed.append(str(finding["entity"]["job_id"] or finding["entity"]["node"]))
    healthy = [j for j in healthy_jobs(truth) if not _on_sick_node(j, truth, stored)]
    measured = [j for j in healthy if stored.measured(j)]
    alarms = {j: _alarms(j, stored) for j in measured}
    return Report(list(kinds.values()), len(healthy), len(measured),
                  {j: a for j, a in alarms.items() if a}, _trace_results(truth, stored))


def _measurable(finding: dict[str, Any], stored: Stored) -> bool:
    """A job's pathology needs the job's telemetry; a node's needs a multi-node job with
    telemetry on that node (a link only shows in the collectives that cross it)."""
    job_id = finding["entity"]["job_id"]
    if job_id is not None:
        return stored.measured(job_id)
    node = finding["entity"]["node"]
    return any(stored.measured(j) and stored.jobs[j].node_count >= 2
               for j, hosts in stored.nodes.items() if node in hosts)


def healthy_jobs(truth: Mapping[str, Any]) -> list[int]:
    """Jobs with no planted pathology or incident, no infrastructure failure, and no
    planted trace straggler (a traced job whose rank was slowed: its diagnosis rightly
    reads the trace's phases, so a finding there is not a false alarm)."""
    touched = {f["entity"]["job_id"] for f in truth["findings"] if f["entity"]["job_id"]}
    touched |= {t["job_id"] for t in truth.get("traces", [])
                if t.get("straggler_rank") is not None}
    return sorted(int(j) for j, info in truth["jobs"].items()
                  if not info["pathologies"] and int(j) not in touched
                  and info["failure_cause"] != "infrastructure")


def _on_sick_node(job_id: int, truth: Mapping[str, Any], stored: Stored) -> bool:
    """A multi-node job on a node with a planted pathology (a slow link) suffers from it: a
    finding there is right, not a false alarm."""
    job = stored.jobs.get(job_id)
    if job is None or job.node_count < 2 or job.start_time is None:
        return False
    start = job.start_time.timestamp()
    end = job.end_time.timestamp() if job.end_time else float("inf")
    return any(f["category"] == "pathology" and f["entity"]["job_id"] is None
               and f["entity"]["node"] in stored.nodes.get(job_id, set())
               and f["window"]["start"] < end and start < f["window"]["end"]
               for f in truth["findings"])


def _alarms(job_id: int, stored: Stored) -> list[str]:
    alarms = [f.key for f in stored.findings.get(job_id, [])]
    if stored.stragglers.get(job_id):
        alarms.append("straggler " + ", ".join(sorted(stored.stragglers[job_id])))
    return alarms


def _trace_results(truth: Mapping[str, Any], stored: Stored) -> list[dict[str, Any]]:
    rows = []
    for traced in truth.get("traces", []):
        run = stored.traces.get(traced["job_id"])
        if run is None:
            continue
        phase = traced["straggler_phase"]
        rows.append({"job_id": traced["job_id"],
                     "expected": (traced["straggler_rank"], TRACE_PHASES.get(phase, phase)),
                     "got": (run.straggler_rank, run.straggler_phase or None)})
    return rows


# the simulator's phase names -> the trace analysis' (docs/traces.md)
TRACE_PHASES = {"dataloader": "data_loading"}


def load(cluster: Cluster, job_ids: set[int]) -> Stored:
    """Everything the checks read, in a handful of queries."""
    jobs = {j.job_id: j for j in Job.objects.filter(cluster=cluster, job_id__in=job_ids)}
    by_pk = {j.pk: j.job_id for j in jobs.values()}
    metrics = {by_pk[m.job_id]: m for m in JobMetrics.objects.filter(job_id__in=by_pk)}
    stragglers: dict[int, set[str]] = {}
    nodes: dict[int, set[str]] = {}
    for s in JobMetricSummary.objects.filter(job_id__in=by_pk).only(
            "job_id", "host", "gpu_index", "straggler"):
        nodes.setdefault(by_pk[s.job_id], set()).add(s.host)
        if s.straggler:
            stragglers.setdefault(by_pk[s.job_id], set()).add(f"{s.host}:{s.gpu_index}")
    findings: dict[int, list[JobFinding]] = {}
    for f in JobFinding.objects.filter(job_id__in=by_pk):
        findings.setdefault(by_pk[f.job_id], []).append(f)
    traces = {by_pk[t.job_id]: t for t in TraceRun.objects.filter(job_id__in=by_pk)
              .order_by("job_id", "-created_at")}
    return Stored(jobs, metrics, stragglers, findings, nodes, traces)


def render(result: Report) -> str:
    """The report as text: one line per kind, then the false alarms and the traces."""
    lines = [f"{'pathology':<22} {'found / measured':>17} {'planted':>8} {'share':>6}  missed"]
    for k in result.kinds:
        lines.append(_kind_line(k.kind, k.found, k.measured, k.total, k.missed))
    lines.append(_kind_line("all", sum(k.found for k in result.kinds),
                            sum(k.measured for k in result.kinds),
                            sum(k.total for k in result.kinds), []))
    alarms = len(result.false_alarms)
    share = f" ({alarms / result.healthy_measured * 100:.1f}%)" if result.healthy_measured else ""
    lines += ["", f"healthy jobs: {result.healthy} ({result.healthy_measured} with telemetry); "
                  f"false alarms: {alarms}{share}"]
    lines += [f"  job {j}: {', '.join(a)}" for j, a in sorted(result.false_alarms.items())]
    for t in result.traces:
        ok = "right" if t["expected"] == t["got"] else "WRONG"
        lines.append(f"trace of job {t['job_id']}: expected {t['expected']}, got {t['got']} "
                     f"({ok})")
    return "\n".join(lines)


def _kind_line(kind: str, found: int, measured: int, total: int, missed: list[str]) -> str:
    share = f"{found / measured * 100:.0f}%" if measured else "-"
    return (f"{kind:<22} {f'{found} / {measured}':>17} {total:>8} {share:>6}  "
            f"{', '.join(missed)}").rstrip()
