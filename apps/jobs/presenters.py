"""What the job pages show (efficiency card, figures, panels, list rows), from stored data."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from django.db.models import (
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.analysis import compact
from apps.analysis.efficiency import measure_note
from apps.analysis.endings import OWNER_WORDS, EndingFacts, JobNames, explain, output_paths
from apps.analysis.hostlist import expand as expand_hostlist
from apps.analysis.idleness import Idleness
from apps.analysis.phases import GPU_IDLE_CHECKS
from apps.analysis.straggler_story import KEY as STORY_KEY
from apps.analysis.straggler_story import rank_gpu
from apps.analysis.vendors import VENDOR_NAMES, measure_words
from apps.core.templatetags.portal import duration, mb
from apps.jobs import charts
from apps.jobs.archive import PARTIAL_ATTEMPTS
from apps.jobs.idleness import figures_at, job_idleness
from apps.jobs.models import (
    Job,
    JobFinding,
    JobMetrics,
    JobMetricSummary,
    JobNodeMetrics,
    TraceRankPhases,
)
from apps.jobs.roofline import roofline_card

# --- The efficiency card ---------------------------------------------------------------

SPLIT_FIELDS = (("useful", "useful_hours"), ("waiting", "waiting_hours"),
                ("held_idle", "held_idle_hours"), ("no_process", "no_process_hours"))


def metrics_card(job: Job) -> dict[str, Any]:
    """Everything the efficiency card shows, from the stored archive only (no Prometheus).

    ``error`` is the last refresh failure when it is newer than the stored result: the
    page shows it as a banner above whatever is stored, with the time it is stale since.
    ``warnings`` are what Prometheus said about the stored answer (partial data): a banner
    too, saying whether the archive will be fetched again or was kept as it is.
    """
    metrics = JobMetrics.objects.filter(job=job).first()
    card: dict[str, Any] = {"metrics": metrics, "refreshing": bool(metrics and
                                                                     metrics.refreshing),
                            "findings": findings_for(job)}
    card["error"] = _fresh_error(metrics)
    card["warnings"] = [str(w)[:300] for w in (metrics.warnings if metrics else [])][:5]
    card["partial_attempts"] = PARTIAL_ATTEMPTS
    if metrics is None or not metrics.has_data:
        return card
    card["idleness"] = job_idleness(job, metrics)
    card["facts_at"] = figures_at(job, metrics)
    summaries = list(job.archived_gpus().order_by("host", "gpu_index"))
    hours = {key: getattr(metrics, field) for key, field in SPLIT_FIELDS}
    total = sum(hours.values()) or 1.0
    series = {f"{s.host}:{s.gpu_index}": compact.decode(bytes(s.series)) for s in summaries}
    nodes = list(job.archived_nodes())
    single = len(summaries) == 1  # no peer GPU: no NVLink, no collective to wait in
    gpu_panels = gpu_figures(metrics, series, single)
    card.update(
        summaries=summaries, measure_label=measure_words(metrics.measure, metrics.gpu_vendor),
        words=gpu_words(metrics.gpu_vendor),
        measure_note=measure_note(metrics.measure),
        split=[(key, charts.SPLIT_LABELS[key], hours[key], hours[key] / total)
               for key, _ in SPLIT_FIELDS],
        figures=_figures(metrics, summaries, hours, series),
        events_panel=gpu_panels.pop("fig-gpu-events", None),
        gpu_panels=list(gpu_panels.items()),
        node_panels=list(node_figures(metrics, nodes).items()),
        straggler=straggler_panel(metrics), nodes=nodes,
        communication=None if single else communication_share(summaries),
        single_gpu=single, sparse=sparse_note(metrics, job.cluster),
        hours_gap=hours_gap(job, metrics),
        mem_peak=max((n.mem_used_bytes for n in nodes if n.mem_used_bytes is not None),
                     default=None),
    )
    card["hours_at"] = metrics.window_end if card["hours_gap"] else card["facts_at"]
    card.update(roofline_card(job, metrics))
    return card


def gpu_words(vendor: str) -> dict[str, str]:
    """The page's words for what the GPUs' vendor names differently (an MI300X job says
    "GFX clock" and "XGMI" where an H100 job says "SM clock" and "NVLink")."""
    return {"clock": measure_words("sm_clock", vendor), "link": measure_words("nvlink", vendor),
            "vendor": " and ".join(VENDOR_NAMES.get(v, v) for v in vendor.split("+") if v)}


def sparse_note(metrics: JobMetrics, cluster: Any) -> str:
    """Why the charts show points: the job has few samples at the telemetry's interval (the
    cluster's scrape interval when set, else the stored step); "" when its series are long
    enough to read as lines."""
    if not 0 < metrics.points <= charts.MARKERS_UP_TO:
        return ""
    interval = float((cluster.metric_labels or {}).get("scrape_interval") or metrics.step_s)
    samples = "1 sample" if metrics.points == 1 else f"{metrics.points} samples"
    return (f"The telemetry holds one sample every {_every(interval)}: this job has {samples} "
            "per GPU, drawn as points" + (" (a single reading, not a trend)."
                                          if metrics.points == 1 else "."))


def _every(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


def hours_gap(job: Job, metrics: JobMetrics) -> float:
    """GPU-hours the job page's header counts past the end of the stored metrics.

    The header is Slurm's allocation until now; a running job's metrics end at their last
    snapshot, so the two differ by the time since (issue 19: 272.8 against 248.2). The
    page says so rather than show two numbers without a reason; 0 when they agree.
    """
    gap = job.gpu_hours - metrics.allocated_gpu_hours
    return gap if gap >= 0.05 else 0.0


def communication_share(summaries: list[JobMetricSummary]) -> float | None:
    """Share of the job's waiting time that had NVLink/PCIe traffic (communication), each
    GPU weighted by its waiting seconds; None when no GPU measured traffic."""
    pairs = [(s.waiting_with_traffic, s.waiting * s.measured_s) for s in summaries
             if s.waiting_with_traffic is not None]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total > 0 else None


def _fresh_error(metrics: JobMetrics | None) -> str:
    if metrics is None or not metrics.last_error or metrics.last_error_at is None:
        return ""
    if metrics.computed_at and metrics.computed_at >= metrics.last_error_at:
        return ""
    return metrics.last_error.splitlines()[0][:300]


def _figures(metrics: JobMetrics, summaries: list[JobMetricSummary],
             hours: dict[str, float], series: dict[str, dict[str, list[float | None]]]
             ) -> dict[str, Any]:
    rows = [(label, channels.get("activity", [])) for label, channels in series.items()]
    start = metrics.window_start.timestamp() if metrics.window_start else 0.0
    return {
        "activity": charts.activity_bars(metrics.means, metrics.measure, metrics.gpu_vendor),
        "split": charts.split_bar(hours),
        "heatmap": charts.gpu_heatmap(rows, start, metrics.step_s,
                                      f"{measure_words(metrics.measure, metrics.gpu_vendor)} "
                                      "per GPU"),
    }


# --- Per-GPU detail, nodes, the straggler verdict -----------------------------------------

# figure id -> (channel, title, unit, scale): the per-GPU lines below the efficiency card;
# {activity}, {tensor}, {clock}, {link} are the measures' names on the GPUs' vendor
GPU_LINES: dict[str, tuple[str, str, str, float]] = {
    "activity": ("activity", "{activity} per GPU", "%", 100.0),
    "tensor": ("tensor_active", "{tensor} per GPU", "%", 100.0),
    "power": ("power", "Power per GPU", "W", 1.0),
    "temperature": ("temperature", "Temperature per GPU", "°C", 1.0),
    "clock": ("sm_clock", "{clock} per GPU", "MHz", 1.0),
    "nvlink": ("nvlink", "{link} transmitted per GPU", "GB/s", 1e-9),
    "pcie": ("pcie_rx", "PCIe received (host to GPU) per GPU", "GB/s", 1e-9),
}
NODE_LINES: dict[str, tuple[str, str, str, float]] = {
    "cpu": ("cpu_busy", "CPU busy per node", "%", 100.0),
    "iowait": ("cpu_iowait", "CPU time in I/O wait per node", "%", 100.0),
    "mem": ("mem_used", "Memory in use per node", "GiB", 1 / 2**30),
    "ib": ("ib_tx", "InfiniBand transmitted per node", "GB/s", 1e-9),
    "ibwait": ("ib_wait", "InfiniBand transmit waits per node", "ticks/s", 1.0),
    "net": ("net_tx", "Ethernet transmitted per node", "MB/s", 1e-6),
    "fs": ("fs_read", "Network file-system reads per node", "MB/s", 1e-6),
}


def gpu_figures(metrics: JobMetrics, series: dict[str, dict[str, list[float | None]]],
                single: bool = False) -> dict[str, Any]:
    """Per-GPU time series (job-exclusive: these GPUs were this job's), and the events map.
    A one-GPU job has no NVLink chart: it has no peer to talk to."""
    start = metrics.window_start.timestamp() if metrics.window_start else 0.0
    named = [s["gpu"] for s in metrics.straggler_detail.get("stragglers", [])]
    vendor = metrics.gpu_vendor
    words = {"activity": measure_words(metrics.measure or "sm_active", vendor),
             "tensor": measure_words("tensor_active", vendor),
             "clock": measure_words("sm_clock", vendor), "link": measure_words("nvlink", vendor)}
    figures: dict[str, Any] = {}
    for key, (channel, title, unit, scale) in GPU_LINES.items():
        if single and key == "nvlink":
            continue
        rows = [(label, ch[channel]) for label, ch in series.items() if channel in ch]
        if rows:
            title = title.format(**words)
            figures[f"fig-gpu-{key}"] = charts.series_lines(
                rows, start, metrics.step_s, title[:1].upper() + title[1:], unit, "job",
                scale, named)
    events = [(label, ch.get("throttle", []), ch.get("xid", [])) for label, ch in series.items()
              if "throttle" in ch or "xid" in ch]
    if events:
        figures["fig-gpu-events"] = charts.events_heatmap(events, start, metrics.step_s)
    return figures


def node_figures(metrics: JobMetrics, nodes: list[JobNodeMetrics]) -> dict[str, Any]:
    """Per-node traffic (node-shared: other jobs on the node add to these numbers)."""
    start = metrics.window_start.timestamp() if metrics.window_start else 0.0
    decoded = {n.host: compact.decode(bytes(n.series)) for n in nodes}
    figures: dict[str, Any] = {}
    for key, (channel, title, unit, scale) in NODE_LINES.items():
        rows = [(host, ch[channel]) for host, ch in decoded.items() if channel in ch]
        if rows:
            figures[f"fig-node-{key}"] = charts.series_lines(
                rows, start, metrics.step_s, title, unit, "node", scale)
    return figures


def straggler_panel(metrics: JobMetrics) -> dict[str, Any]:
    """The stored verdict for the page: status, words, evidence and the per-GPU bars."""
    detail = metrics.straggler_detail or {}
    named = [s["gpu"] for s in detail.get("stragglers", [])]
    rows = [(f"{s.host}:{s.gpu_index}", s.useful, s.waiting)
            for s in metrics.job.archived_gpus()]
    return {
        "status": metrics.straggler_status, "label": metrics.get_straggler_status_display(),
        "confidence": metrics.straggler_confidence, "summary": metrics.straggler_summary,
        "stragglers": detail.get("stragglers", []), "reasons": detail.get("reasons", []),
        "limits": detail.get("limits", []), "evidence": detail.get("evidence", []),
        "waiting_gpus": detail.get("waiting_gpus", []),
        "figure": charts.waiting_bars(rows, named) if len(rows) > 1 else None,
    }


def findings_for(job: Job) -> list[JobFinding]:
    """The job's findings, worst first, with their contacts."""
    order = {"critical": 0, "warning": 1, "info": 2}
    rows = list(job.findings.select_related("contact", "contact__team"))
    return sorted(rows, key=lambda f: (order.get(f.severity, 3), f.area, f.pk))


# --- Traces on the page --------------------------------------------------------------------


def traces_panel(job: Job) -> dict[str, Any]:
    """The latest trace analysis (phase bars and the GPU timeline per rank, which GPU each
    rank ran on) and the earlier ones."""
    runs = list(job.trace_runs.prefetch_related("ranks")[:10])
    if not runs:
        return {"trace_runs": []}
    latest = runs[0]
    rows = list(latest.ranks.all())
    nodes = expand_hostlist(job.nodes) if job.nodes else []
    for row in rows:  # the GPU as telemetry names it (short host, or the job's one node)
        row.telemetry_gpu = rank_gpu(row.device_host, row.device_index, nodes)
    ranks = [(r.rank, {**{p: getattr(r, f"{p}_ms") for p in TraceRankPhases.PHASE_FIELDS},
                       **r.annotations_ms}) for r in rows]
    panel: dict[str, Any] = {
        "trace_runs": runs, "trace": latest, "trace_rows": [_rank_row(r) for r in rows],
        "trace_figure": charts.phase_bars(ranks, latest.straggler_rank,
                                          latest.straggler_phase, latest.waiting_ranks),
        "trace_checks": GPU_IDLE_CHECKS if latest.gpu_starved else (),
        "trace_unmapped": sorted({k for r in rows for k in r.annotations_ms}),
        "trace_straggler_gpu": next((r.telemetry_gpu for r in rows
                                     if r.rank == latest.straggler_rank), ""),
    }
    gpu_rows = [r for r in rows if r.gpu_idle_ms is not None]
    if gpu_rows:
        panel["trace_gpu_figure"] = charts.gpu_bars([
            (f"rank {r.rank}" + (f" ({r.telemetry_gpu})" if r.telemetry_gpu else ""),
             _gpu_parts(r))
            for r in gpu_rows])
    return panel


def link_stragglers(ctx: dict[str, Any]) -> None:
    """Rank and GPU on both straggler cards: telemetry's named GPUs get the trace rank that
    ran on them, and the story finding (one verdict, one owner) is found for both cards."""
    rank_of = {r["gpu_label"]: r["rank"] for r in ctx.get("trace_rows", []) if r["gpu_label"]}
    straggler = ctx.get("straggler")
    if straggler and rank_of:
        straggler["stragglers"] = [{**s, "rank": rank_of.get(s["gpu"])}
                                   for s in straggler["stragglers"]]
    ctx["straggler_story"] = next((f for f in ctx.get("findings", [])
                                   if f.key == STORY_KEY), None)


def _rank_row(row: TraceRankPhases) -> dict[str, Any]:
    """One rank in the trace table: its step, where it ran, its GPU's account of a step."""
    step = row.step_ms or 0.0
    gpu = row.gpu()
    return {"rank": row.rank, "step_ms": step, "gpu_label": row.telemetry_gpu or row.gpu_label,
            "device_name": row.device_name, "gpu": gpu,
            "idle_share": gpu["idle_ms"] / step if gpu and step > 0 else None,
            "exposed_share": (gpu["exposed_communication_ms"] / gpu["communication_ms"]
                              if gpu and gpu["communication_ms"] > 0 else None)}


def _gpu_parts(row: TraceRankPhases) -> dict[str, float]:
    """The GPU step cut into disjoint parts that add up to it (see ``charts.gpu_bars``)."""
    idle, compute = row.gpu_idle_ms or 0.0, row.gpu_compute_ms or 0.0
    comm, exposed = row.gpu_communication_ms or 0.0, row.gpu_exposed_communication_ms or 0.0
    return {"compute": compute, "exposed": exposed, "idle": idle,
            "memory": max(row.step_ms - idle - compute - exposed, 0.0),
            "hidden": max(comm - exposed, 0.0)}


def series_payload(job: Job) -> dict[str, Any]:
    """The archived series of the job's GPUs and nodes, decoded (the API's series view)."""
    metrics = JobMetrics.objects.filter(job=job).first()
    gpus = [{"name": f"{s.host}:{s.gpu_index}", "channels": compact.decode(bytes(s.series))}
            for s in job.archived_gpus()]
    nodes = [{"name": n.host, "channels": compact.decode(bytes(n.series))}
             for n in job.archived_nodes()]
    return {"start": metrics.window_start if metrics else None,
            "step_s": metrics.step_s if metrics else 0.0,
            "points": metrics.points if metrics else 0, "gpus": gpus, "nodes": nodes}


# --- The job list ----------------------------------------------------------------------------


# What partials/job_table.html shows, and nothing more: the other columns (JSON, batch
# script labels, TRES text) cost decoding on every row of every page. A column missing here
# would cost one query per row, which tests/jobs/test_job_list.py's query counts catch.
LIST_COLUMNS = (
    "cluster_id", "job_id", "display_id", "array_job_id", "array_task_id", "name",
    "user_name", "account", "team_id", "partition", "state", "gpu_equivalent",
    "submit_time", "eligible_time", "start_time", "end_time",
    "cluster__name", "cluster__is_simulated", "team__slug",
)


# The stored split the list's idleness tag reads (``apps.jobs.idleness.job_idleness``: the
# job page's and the alerts' reading), joined in with the metrics row already there.
IDLE_FIELDS = ("status", "measure", "useful_hours", "waiting_hours", "held_idle_hours",
               "no_process_hours", "window_end", "measured_s")


def _list_split(job: Job) -> SimpleNamespace:
    return SimpleNamespace(**{name: getattr(job, f"split_{name}", None) for name in IDLE_FIELDS})


def list_idleness(job: Job) -> Idleness | None:
    """The idleness reading of a list row (its ``split_*`` annotations)."""
    split = _list_split(job)
    if split.status not in JobMetrics.MEASURED or not split.measure:
        return None
    return job_idleness(job, split)


def list_figures_at(job: Job) -> Any:
    """The moment a list row's stored figures describe, as the job page says it."""
    return figures_at(job, _list_split(job))


def list_rows(jobs: QuerySet[Job], grouped: bool) -> QuerySet[Job]:
    """The list's rows: one per job, or one per array (its head task stands for it), with
    what the columns show joined in, so a page costs the same few queries at any size."""
    if grouped:
        jobs = jobs.filter(Q(array_job_id__isnull=True) | Q(job_id=F("array_job_id")))
    findings = (JobFinding.objects.filter(job=OuterRef("pk")).order_by()
                .values("job").annotate(n=Count("pk")).values("n"))
    return jobs.select_related("cluster", "team").only(*LIST_COLUMNS).annotate(
        useful=F("metrics__useful_fraction"),
        finding_count=Subquery(findings, output_field=IntegerField()),
        **{f"split_{name}": F(f"metrics__{name}") for name in IDLE_FIELDS})


def array_summaries(rows: list[Job]) -> dict[tuple[int, int], dict[str, Any]]:
    """For the arrays on a page: tasks by state and GPU-hours, in one query.

    GPU-hours are Slurm's allocation (GPUs x elapsed; running tasks up to now).
    """
    heads = {(j.cluster_id, j.array_job_id) for j in rows if j.array_job_id}
    if not heads:
        return {}
    now = timezone.now()
    elapsed = ExpressionWrapper(Coalesce(F("end_time"), Value(now)) - F("start_time"),
                                output_field=DurationField())
    grouped = (Job.objects.filter(cluster_id__in={c for c, _ in heads},
                                  array_job_id__in={a for _, a in heads})
               .values("cluster_id", "array_job_id", "state", "gpu_equivalent")
               .annotate(n=Count("pk"), seconds=Sum(elapsed)).order_by())
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for row in grouped:
        key = (row["cluster_id"], row["array_job_id"])
        if key not in heads:
            continue
        entry = out.setdefault(key, {"tasks": 0, "states": {}, "gpu_hours": 0.0})
        entry["tasks"] += row["n"]
        entry["states"][row["state"]] = entry["states"].get(row["state"], 0) + row["n"]
        seconds = row["seconds"].total_seconds() if row["seconds"] else 0.0
        entry["gpu_hours"] += row["gpu_equivalent"] * seconds / 3600
    for entry in out.values():
        entry["states"] = sorted(entry["states"].items(), key=lambda kv: (-kv[1], kv[0]))
    return out


# --- What the job asked for ------------------------------------------------------------------


def requested(job: Job) -> dict[str, Any] | None:
    """What the job asked Slurm for, as the page's "Requested" section says it (issue 26): a
    job that has not started holds nothing, so its allocation would read "GPUs 0, CPUs 0".
    None when Slurm said nothing of its resources (a backend that does not read them)."""
    if all(v is None for v in (job.req_gpus, job.req_cpus, job.req_memory_mb, job.req_nodes)):
        return None
    limit = job.time_limit_min
    nodes = job.req_nodes
    memory = job.req_memory_mb
    per_node = f"{mb(memory // nodes)} per node" if memory and nodes and nodes > 1 else ""
    return {
        "gpus": "not said" if job.req_gpus is None else str(job.req_gpus),
        "cpus": "not said" if job.req_cpus is None else str(job.req_cpus),
        "memory": "not said" if memory is None else mb(memory), "memory_per_node": per_node,
        "nodes": "not said" if nodes is None else str(nodes),
        "time_limit": "unlimited or not said" if limit is None else
        duration(timedelta(minutes=limit)),
        "tres": job.tres_req, "started": job.start_time is not None,
    }


# --- How the job ended, and where its output went ----------------------------------------


def ending_card(job: Job) -> dict[str, Any]:
    """The ending in words with what to check (None while the job runs), the memory peak
    against the request, and the stdout/stderr paths or why they are unknown."""
    ending = explain(ending_facts(job))
    labels = job.labels or {}
    names = JobNames(job.job_id, job.user_name, job.name, job.array_job_id,
                     job.array_task_id, _first_node(job.nodes), job.work_dir)
    paths = output_paths(names, "stdout" in labels, str(labels.get("stdout") or ""),
                         str(labels.get("stderr") or ""))
    return {"ending": ending, "output": paths,
            "ending_owner": OWNER_WORDS[ending.owner] if ending else ""}


def ending_facts(job: Job) -> EndingFacts:
    """What Slurm recorded about the job's end, as ``endings.explain`` reads it (the job
    page and the comparison read one ending the same way)."""
    run = job.run_time
    return EndingFacts(
        state=job.state, exit_code=job.exit_code, signal=job.exit_signal,
        started=job.start_time is not None,
        run_s=run.total_seconds() if run is not None else None,
        time_limit_s=job.time_limit_min * 60.0 if job.time_limit_min else None,
        mem_requested_mb=job.memory_mb / max(1, job.node_count) if job.memory_mb else None,
        mem_peak_mb=job.mem_peak_mb, nodes=job.node_count)


def _first_node(nodes: str) -> str:
    try:
        return (expand_hostlist(nodes) or [""])[0] if nodes else ""
    except ValueError:
        return ""
