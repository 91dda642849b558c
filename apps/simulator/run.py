"""Run the whole simulation and write every output into one folder (see README.md)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apps.simulator import hostfiles, reports, shares, slurm_json
from apps.simulator.cluster import Cluster, build_cluster
from apps.simulator.config import SimConfig
from apps.simulator.schedule import generate
from apps.simulator.telemetry import TelemetryWriter, idle_notebooks, mostly_idle_notebooks
from apps.simulator.traces import plan_traces, write_traces
from apps.simulator.truth import Finding, Truth, plant
from apps.simulator.workload import BURST_PARTITION, TRAITS, Job, gpu_limit

Progress = Callable[[str, int, int], None]


@dataclass
class Summary:
    """Counts of what was written, for the command's report and the tests."""

    out: Path
    jobs: int = 0
    scripts: int = 0
    telemetry_files: list[Path] = field(default_factory=list)
    trace_files: int = 0
    findings: int = 0


@dataclass
class Plan:
    """Everything decided before any file is written: the cluster, the scheduled month and
    its outages, the planted truth, and the periods the telemetry and the logs cover."""

    cfg: SimConfig
    cluster: Cluster
    jobs: list[Job]
    outages: list[Any]
    truth: Truth
    t0: int  # telemetry start (``now`` when --telemetry-days 0)
    logs_from: int  # first second of the sshd logs


def plan(cfg: SimConfig) -> Plan:
    """Build the cluster, schedule the month and plant the truth (cheap: writes nothing).

    The sshd logs cover the telemetry period, or the whole month when there is no telemetry.
    """
    cfg = cfg.validated()
    cluster = build_cluster(cfg.cluster, cfg.nodes, cfg.seed, cfg.amd_nodes)
    jobs, outages = generate(cluster, cfg.start, cfg.now, cfg.seed)
    t0 = _telemetry_start(cfg)
    seen_from = max(t0, cfg.start)
    logs_from = seen_from if seen_from < cfg.now else cfg.start
    truth = plant(cluster, jobs, cfg.now, seen_from, cfg.seed, cfg.incidents,
                  logs_from=logs_from)
    if cfg.telemetry_days != 0:
        _mark_idle_notebooks(truth, jobs, t0, cfg)
    return Plan(cfg, cluster, jobs, outages, truth, t0, logs_from)


Background = Callable[[Callable[[], Iterator[Path]]], Iterator[Path]]


def simulate(cfg: SimConfig, out_dir: Path | str, progress: Progress | None = None,
             background: Background | None = None) -> Summary:
    """Simulate ``cfg`` and write all outputs under ``out_dir`` (created if missing).

    1. cluster, workload (scheduled jobs, node outages) and planted truth: ``plan``;
    2. Slurm files and job scripts, host files (stage ``slurm``);
    3. traces, one job at a time (``traces``);
    4. telemetry, one 6 h window at a time (``telemetry``: the long part);
    5. ``ground_truth.json`` last, so a complete folder always has one.

    ``progress(stage, done, total)`` hears about each step of stages 2-4. ``background``,
    when given, runs a generator elsewhere and hands over what it yields (``manage.py
    simulate`` passes ``apps.core.batch.forked``): the telemetry is then written while
    stages 2 and 3 run; without it, after them, in this process. The bytes are the same.
    """
    planned = plan(cfg)
    cfg = planned.cfg
    out = Path(out_dir)
    for sub in ("slurm", "telemetry", "traces", "logs", "inventory", "collector"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    report = progress or (lambda stage, done, total: None)
    summary = Summary(out, jobs=len(planned.jobs))
    # the telemetry (most of the time) may be written in the background while this process
    # writes the rest: nothing those steps do changes what the telemetry reads
    windows, telemetry = _telemetry(planned, out / "telemetry", background)
    report("slurm", 0, 2)
    _write_slurm(out / "slurm", planned, summary)
    report("slurm", 1, 2)
    _write_host_files(out, planned)
    report("slurm", 2, 2)
    traced = _write_traces(out / "traces", planned, summary, report)
    report("telemetry", len(summary.telemetry_files), len(windows))
    for path in telemetry:
        summary.telemetry_files.append(path)
        report("telemetry", len(summary.telemetry_files), len(windows))
    summary.findings = _write_truth(out / "ground_truth.json", planned, traced)
    (out / "cluster.json").write_text(json.dumps(_describe(planned.cluster, cfg), indent=2)
                                      + "\n")
    return summary


def _telemetry(planned: Plan, directory: Path,
               background: Background | None) -> tuple[list[int], Iterator[Path]]:
    """The telemetry windows, and their files as they are written: by ``background``
    (started now), or here as the caller consumes them."""
    cfg = planned.cfg
    if cfg.telemetry_days == 0:
        return [], iter(())
    writer = TelemetryWriter(planned.cluster, planned.jobs, planned.truth, planned.outages,
                             cfg.telemetry_step, planned.t0, cfg.now, cfg.seed)
    windows = writer.windows()

    def write() -> Iterator[Path]:
        return (writer.write_window(directory, w0) for w0 in windows)

    if background is None:
        return windows, write()
    files = background(write)
    first = next(files, None)  # a generator starts its worker on the first request
    return windows, itertools.chain([first] if first else [], files)


def _mark_idle_notebooks(truth: Truth, jobs: list[Job], t0: int, cfg: SimConfig) -> None:
    """Healthy notebooks whose telemetry shows no work for hours held their GPUs idle:
    the ground truth lists them as ``idle_notebook`` (``telemetry.idle_notebooks``); those
    held for hours that worked only now and then, memory held, as ``mostly_idle_notebook``
    (``telemetry.mostly_idle_notebooks``)."""
    idle = idle_notebooks(jobs, truth, t0, cfg.now, cfg.telemetry_step)
    mostly = mostly_idle_notebooks(jobs, truth, t0, cfg.now, cfg.telemetry_step,
                                   {j.job_id for j in idle})
    for job in idle:
        _mark(truth, job, "idle_notebook", t0, cfg, cause="no burst of work in its whole run")
    for job, busy in mostly:
        _mark(truth, job, "mostly_idle_notebook", t0, cfg, busy=round(busy, 3),
              cause="works now and then, its GPU memory held all along")
    if mostly:
        truth.not_planted.pop("mostly_idle_notebook", None)


def _mark(truth: Truth, job: Job, kind: str, t0: int, cfg: SimConfig, **details: Any) -> None:
    start, end = max(job.start or 0, t0), min(job.end or cfg.now, cfg.now)
    job.pathologies.append(kind)
    truth.findings.append(Finding(kind, start, end, job.job_id, user=job.user,
                                  team=job.account,
                                  details={"held_hours": round((end - start) / 3600, 1),
                                           **details}))


def _telemetry_start(cfg: SimConfig) -> int:
    return cfg.now if cfg.telemetry_days == 0 else cfg.telemetry_start


def _write_slurm(directory: Path, planned: Plan, summary: Summary) -> None:
    cluster, cfg, truth = planned.cluster, planned.cfg, planned.truth
    ordered = sorted(planned.jobs, key=lambda j: j.job_id)
    with (directory / "sacct.json").open("w") as f:
        slurm_json.write_sacct(f, cluster, filter(slurm_json.in_window, ordered), cfg.now)
    queue = slurm_json.squeue(cluster, ordered, cfg.now)
    queued = {j["job_id"] for j in queue["jobs"]}
    with (directory / "sacct_by_id.json").open("w") as f:  # what the window drops
        slurm_json.write_sacct(f, cluster, (j for j in ordered if j.job_id in queued
                                            and not slurm_json.in_window(j)), cfg.now)
    with (directory / "sacct_exitcodes.txt").open("w") as f:
        f.write("JobIDRaw|ExitCode\n")
        f.writelines(f"{j.job_id}|{slurm_json.exit_text(j)}\n" for j in ordered
                     if j.state != "PENDING" and slurm_json.in_window(j))
    _dump(directory / "squeue.json", queue)
    _dump(directory / "sinfo.json", slurm_json.sinfo(cluster, ordered, planned.outages, cfg.now))
    (directory / "scontrol_partitions.txt").write_text(slurm_json.scontrol_partitions(cluster))
    (directory / "scontrol_reservations.txt").write_text(
        slurm_json.scontrol_reservations(cluster, planned.outages, cfg.now))
    (directory / "sacctmgr_qos.txt").write_text(shares.sacctmgr_qos())
    with (directory / "gpu-map.log").open("w") as f:
        f.writelines(slurm_json.gpu_map_log(cluster, ordered, cfg.now))
    used = shares.usage(cluster, ordered, cfg.now)
    limits = shares.limits(cluster, ordered, used)
    (directory / "sacctmgr_assoc.txt").write_text(shares.sacctmgr_assoc(cluster, limits))
    (directory / "sshare.txt").write_text(shares.sshare(cluster, used, limits))
    reports.write_reports(directory, cluster, ordered, cfg.start, cfg.now)
    summary.scripts = hostfiles.write_scripts(directory / "scripts", ordered, truth, cfg.seed)


def _write_host_files(out: Path, planned: Plan) -> None:
    cluster, jobs, truth, cfg = planned.cluster, planned.jobs, planned.truth, planned.cfg
    hostfiles.write_sshd_logs(out / "logs", cluster, jobs, truth, planned.logs_from, cfg.now,
                              cfg.seed)
    hostfiles.write_inventory(out / "inventory", cluster, truth, cfg.now,
                              patched=not cfg.incidents)
    by_id = {j.job_id: j for j in jobs}
    _dump(out / "collector" / "services.json",
          hostfiles.services(cluster, by_id, truth, cfg.now, cfg.seed))


def _write_traces(directory: Path, planned: Plan, summary: Summary,
                  report: Progress) -> list[dict[str, Any]]:
    traced = []
    plans = plan_traces(planned.cluster, planned.jobs, planned.truth.job_effects,
                        planned.cfg.traced_jobs, planned.cfg.seed)
    for number, trace in enumerate(plans, start=1):
        summary.trace_files += len(write_traces(planned.cluster, trace, directory))
        traced.append({"job_id": trace.job.job_id, "dir": f"traces/{trace.job.job_id}",
                       "backend": trace.backend, "kernel_naming": trace.kernel,
                       "world_size": trace.job.gpus, "straggler_rank": trace.straggler_rank,
                       "straggler_phase": trace.straggler_phase})
        report("traces", number, len(plans))
    return traced


def _write_truth(path: Path, planned: Plan, traced: list[dict[str, Any]]) -> int:
    cfg, truth = planned.cfg, planned.truth
    findings = truth.findings + (_cluster_wide(cfg, planned.t0) if cfg.incidents else [])
    doc = {
        "meta": {"seed": cfg.seed, "now": cfg.now, "start": cfg.start, "nodes": cfg.nodes,
                 "days": cfg.days, "cluster": planned.cluster.name,
                 "telemetry_start": planned.t0, "telemetry_step": cfg.telemetry_step,
                 "incidents": cfg.incidents},
        "findings": [f.as_dict(i + 1) for i, f in enumerate(
            sorted(findings, key=lambda f: (f.category, f.kind, f.start, f.job_id or 0)))],
        "not_planted": [{"kind": k, "reason": why} for k, why in sorted(truth.not_planted.items())],
        "traces": traced,
        "teams": _teams_truth(planned),
        "jobs": {str(j.job_id): _job_truth(j)
                 for j in sorted(planned.jobs, key=lambda j: j.job_id)},
    }
    _dump(path, doc)
    return len(findings)


def _cluster_wide(cfg: SimConfig, t0: int) -> list[Finding]:
    """Baseline versions that are themselves vulnerable, on every node."""
    return [Finding("vulnerable_software", t0, cfg.now, node=None,
                    details={"nodes": "all", "software": sw, "version": version, "cve": cve})
            for sw, version, cve in (("slurm", "22.05.8", "CVE-2023-49933"),
                                     ("munge", "0.5.15", "CVE-2026-25506"))]


def _job_truth(job: Job) -> dict[str, Any]:
    cause = "none"
    if job.state in ("NODE_FAIL",) or job.outcome == "XID":
        cause = "infrastructure"
    elif job.state in ("FAILED", "OUT_OF_MEMORY", "TIMEOUT"):
        cause = "user"
    elif job.state == "PREEMPTED":
        cause = "preemption"
    return {"kind": job.kind, "state": job.state, "exit_code": job.exit_code,
            "signal": job.signal, "failure_cause": cause, "pathologies": job.pathologies,
            "wait_reason": job.wait_reason, "eligible": job.eligible, "after": job.after or None,
            "burst": job.burst}


def _teams_truth(planned: Plan) -> dict[str, dict[str, Any]]:
    """What the month did to each team on purpose (``workload.TRAITS``), with its figures."""
    jobs, cluster = planned.jobs, planned.cluster
    out: dict[str, dict[str, Any]] = {}
    for team in cluster.teams:
        trait, words = TRAITS.get(team.account, ("none", "no trait planted"))
        mine = [j for j in jobs if j.account == team.account]
        details: dict[str, Any] = {
            "own_limit_waits": dict(sorted(Counter(
                j.wait_reason for j in mine if j.start is not None
                and j.wait_reason != "None").items()))}
        if trait == "contention":
            details.update(partition=BURST_PARTITION,
                           bursts=len({j.array_job_id for j in mine if j.burst}),
                           burst_tasks=sum(j.burst for j in mine))
        elif trait == "gpu_limit":
            details.update(grp_tres_gpus=gpu_limit(cluster))
        elif trait in ("idle_notebooks", "input_stalls"):
            kind = "idle_notebook" if trait == "idle_notebooks" else "input_pipeline_stall"
            details.update(pathology=kind, planted=sum(kind in j.pathologies for j in mine))
        out[team.account] = {"trait": trait, "description": words, "details": details}
    return out


def _describe(cluster: Cluster, cfg: SimConfig) -> dict[str, Any]:
    """The simulator's own description of the cluster (teams, leads, label names)."""
    return {
        "name": cluster.name, "simulated": True, "now": cfg.now, "incidents": cfg.incidents,
        "telemetry": {"step": cfg.telemetry_step, "days": cfg.telemetry_days},
        "teams": [{"account": t.account, "description": t.description, "fairshare": t.share,
                   "lead": t.lead, "members": list(t.members)} for t in cluster.teams],
        "partitions": [{"name": p.name, "nodes": [cluster.nodes[i].name for i in p.node_indices],
                        "max_time_min": p.max_time_min, "default": p.default}
                       for p in cluster.partitions],
        "nodes": [{"name": n.name, "gpu_type": n.gpu_type, "model": n.model.model_name,
                   "cpus": n.cpus, "gpus": list(n.gpu_uuids), "exporter_group": n.group.name,
                   "exporter": n.group.exporter,
                   "hostname_label": n.group.hostname_label,
                   "profiling_fields": n.group.profiling, "job_mapping": n.group.job_mapping,
                   "partitions": list(n.partitions)} for n in cluster.nodes],
    }


def _dump(path: Path, doc: Any) -> None:
    path.write_text(json.dumps(doc, indent=1) + "\n")
