"""A job's efficiency, straggler, phases and diagnosis as a text report (``manage.py jobstats``).

The terminal view for researchers, in the spirit of Princeton's ``jobstats``: the same stored
archive, verdicts and findings the job page shows, nothing fetched.
"""

from __future__ import annotations

import textwrap
from datetime import timedelta

from django.db.models import Q, QuerySet

from apps.analysis.vendors import measure_words
from apps.jobs.models import (
    Job,
    JobFinding,
    JobMetrics,
    JobMetricSummary,
    TraceRankPhases,
    TraceRun,
)
from apps.jobs.presenters import findings_for

WIDTH = 80
BAR = 40


def report(job: Job) -> str:
    """The whole report, section by section."""
    metrics = JobMetrics.objects.filter(job=job).first()
    trace = job.trace_runs.prefetch_related("ranks").first()
    parts = [_title("Job statistics"), *_header(job)]
    parts += _efficiency(job, metrics)
    parts += _straggler(metrics)
    parts += _phases(trace)
    parts += _diagnosis(job)
    return "\n".join(parts) + "\n"


def _title(text: str) -> str:
    return f"{'=' * WIDTH}\n{text.center(WIDTH).rstrip()}\n{'=' * WIDTH}"


def _section(text: str) -> list[str]:
    return ["", text.center(WIDTH).rstrip(), "=" * WIDTH]


def _header(job: Job) -> list[str]:
    gpus = ", ".join(f"{_num(n)}x {t}" for t, n in (job.gpu_types or {}).items()) or "-"
    rows = [
        ("Job ID", f"{job.display_id} (raw {job.job_id})"),
        ("Cluster", job.cluster.name + (" (simulated)" if job.cluster.is_simulated else "")),
        ("User/Account", f"{job.user_name}/{job.account or '-'}"),
        ("Job Name", job.name or "-"),
        ("State", job.state + (f" (exit {job.exit_text})" if job.exit_text else "")),
        ("Nodes", f"{job.node_count} ({job.nodes or '-'})"),
        ("GPUs", f"{_num(job.gpu_equivalent)} ({gpus})"),
        ("QOS/Partition", f"{job.qos or '-'}/{job.partition or '-'}"),
        ("Queue wait", _duration(_seconds(job.queue_wait))),
        ("Run Time", _duration(_seconds(job.run_time))
         + (f" (limit {job.time_limit_min} min)" if job.time_limit_min else "")),
        ("GPU-hours", f"{job.gpu_hours:.1f} (Slurm's allocation)"),
    ]
    return [f"{label:>15}: {value}" for label, value in rows]


def _efficiency(job: Job, metrics: JobMetrics | None) -> list[str]:
    lines = _section("GPU efficiency")
    if metrics is None or not metrics.has_data:
        return [*lines, "  No GPU metrics are stored for this job"
                        + (" (no telemetry found)." if metrics and metrics.status == "no_data"
                           else " yet.")]
    means, vendor = metrics.means or {}, metrics.gpu_vendor
    amd = vendor == "amd"
    lines += [f"  {_bar(label, means.get(key))}" for key, label in (
        ("gpu_util", "GFX activity (busy)" if amd else "GPU utilisation (busy)"),
        (metrics.measure, "VALU busy (computing)" if amd else "SM active (computing)"),
        ("tensor_active", "MFMA utilisation" if amd else "Tensor pipe active")) if key in means]
    lines += ["", f"  {metrics.verdict}",
              f"  GPU-hours: useful {metrics.useful_hours:.1f} · waiting "
              f"{metrics.waiting_hours:.1f} · idle, memory held {metrics.held_idle_hours:.1f} "
              f"· no process {metrics.no_process_hours:.1f} (measure: {metrics.measure})",
              "", f"  Per GPU (busy / computing / waiting, temperature, "
                  f"{measure_words('sm_clock', vendor)} busy):"]
    lines += [_gpu_line(s) for s in job.archived_gpus().order_by("host", "gpu_index")]
    return lines


def _gpu_line(s: JobMetricSummary) -> str:
    busy = (s.useful + s.waiting) * 100
    temp = f"{s.temp_mean:3.0f} °C" if s.temp_mean is not None else "  - °C"
    clock = f"{s.sm_clock_busy:5.0f} MHz" if s.sm_clock_busy is not None else "    - MHz"
    flags = []
    if s.straggler:
        flags.append("STRAGGLER")
    if s.xids:
        flags.append("XID " + ",".join(map(str, s.xids)))
    if s.thermal_share is not None and s.thermal_share >= 0.2:
        flags.append(f"thermal {s.thermal_share * 100:.0f}%")
    name = f"{s.host}:{s.gpu_index}"
    return (f"    {name:<12} {busy:3.0f}% / {s.useful * 100:3.0f}% / "
            f"{s.waiting * 100:3.0f}%  {temp}  {clock}  {' '.join(flags)}").rstrip()


def _straggler(metrics: JobMetrics | None) -> list[str]:
    if metrics is None or not metrics.straggler_status:
        return []
    lines = _section("Straggler (from telemetry)")
    confidence = f" ({metrics.straggler_confidence} confidence)" \
        if metrics.straggler_confidence else ""
    lines += _wrap(f"{metrics.get_straggler_status_display().capitalize()}{confidence}: "
                   f"{metrics.straggler_summary}")
    detail = metrics.straggler_detail or {}
    lines += [f"    - {e['text']}" for e in detail.get("evidence", [])]
    if detail.get("reasons"):
        lines += _wrap("Confidence: " + "; ".join(detail["reasons"]) + ".", indent=4)
    return lines


def _phases(trace: TraceRun | None) -> list[str]:
    if trace is None:
        return []
    lines = _section("Phases per rank (profiler trace, ms per step)")
    fields = TraceRankPhases.PHASE_FIELDS
    lines.append("  rank   step  " + " ".join(f"{p[:8]:>8}" for p in fields))
    for r in trace.ranks.all():
        mark = " <- straggler" if r.rank == trace.straggler_rank else \
            " (waited)" if r.rank in trace.waiting_ranks else ""
        lines.append(f"  {r.rank:>4} {r.step_ms:6.1f}  "
                     + " ".join(f"{getattr(r, f'{p}_ms'):8.1f}" for p in fields) + mark)
    if trace.straggler_rank is not None:
        lines += _wrap(f"Rank {trace.straggler_rank} is the straggler: "
                       f"{trace.straggler_excess_ms:.1f} ms more own work per step, in "
                       f"{trace.straggler_phase}.")
    else:
        lines.append(f"  No straggler rank; most time goes to {trace.dominant_phase or '-'}.")
    return lines


def _diagnosis(job: Job) -> list[str]:
    findings = findings_for(job)
    lines = _section("What to check and whom to talk to")
    if not findings:
        return [*lines, "  Nothing to report."]
    for f in findings:
        lines += _wrap(f"* [{f.area}, {f.severity}] {f.title}: {f.text}")
        if f.hint:
            lines += _wrap(f"Check: {f.hint}", indent=4)
        lines += _wrap(f"Talk to: {_contact(job, f)}", indent=4)
    return lines


def _contact(job: Job, finding: JobFinding) -> str:
    if finding.route == "researcher":
        return f"the researcher ({job.user_name}): this is in the code"
    contact = finding.contact
    if contact is None:
        return "no contact configured for this area"
    return " · ".join(x for x in (contact.name, contact.email, contact.url) if x)


def _bar(label: str, value: float | None) -> str:
    if value is None:
        return f"{label:<24} [{'-' * BAR}]"
    filled = round(max(0.0, min(1.0, value)) * BAR)
    return f"{label:<24} [{'|' * filled}{' ' * (BAR - filled)} {value * 100:3.0f}%]"


def _wrap(text: str, indent: int = 2) -> list[str]:
    return textwrap.wrap(text, WIDTH - indent, initial_indent=" " * indent,
                         subsequent_indent=" " * (indent + 2)) or [""]


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def _seconds(value: timedelta | None) -> float | None:
    return value.total_seconds() if value is not None else None


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"


def jobs_named(job_id: str, cluster: str | None) -> QuerySet[Job]:
    """Jobs matching a raw or displayed id, on one cluster or any."""
    match = Q(display_id=job_id)
    if job_id.isdigit():
        match |= Q(job_id=int(job_id))
    jobs = Job.objects.filter(match).select_related("cluster", "team")
    return jobs.filter(cluster__name=cluster) if cluster else jobs
