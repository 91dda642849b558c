"""Two or more jobs side by side (issue 30 item 4): each job's stored figures, loaded in a
fixed number of queries whatever the number of jobs, compared by ``apps.analysis.compare``.

Jobs are named ``<cluster>/<job id>`` (Slurm's raw id, as in the job page's address): a bare
number could be read as another job's. Every job comes through ``Job.objects.visible_to``;
one the user may not see is refused as if it did not exist (404), naming it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from operator import or_
from statistics import fmean
from typing import Any

from django.db.models import Q

from apps.analysis import compact
from apps.analysis.compare import (
    NO_TELEMETRY,
    Comparison,
    RunFigures,
    Telemetry,
    TraceFigures,
    compare,
)
from apps.analysis.endings import explain
from apps.analysis.hostlist import expand as expand_hostlist
from apps.analysis.straggler_story import rank_gpu
from apps.jobs.idleness import figures_at, shares
from apps.jobs.models import (
    Job,
    JobFinding,
    JobMetrics,
    JobMetricSummary,
    TraceRankPhases,
    TraceRun,
)
from apps.jobs.presenters import ending_facts

MAX_JOBS = 6  # side by side on one screen: past six columns the table no longer reads
MIN_JOBS = 2
# <cluster>/<job id>: a cluster is a slug (its URL part), the id digits without a leading zero,
# so two different strings never name one job (the API's schema says the same: REF_PATTERN)
REF_PATTERN = r"^[-a-zA-Z0-9_]+/(0|[1-9][0-9]{0,17})$"
_REF = re.compile(r"([-a-zA-Z0-9_]+)/(0|[1-9][0-9]{0,17})")
# Why a job has no telemetry to compare, by the stored archive's status
MISSING = {None: NO_TELEMETRY, "pending": "metrics not archived yet",
           "no_data": "no telemetry: its GPUs had no series"}


class CompareError(ValueError):
    """Bad input: the message says what to change. ``status`` is the HTTP answer."""

    status = 400


class NotVisible(CompareError):
    """A named job does not exist, or is not one the user may see (one answer for both)."""

    status = 404


@dataclass(frozen=True)
class Ref:
    cluster: str
    job_id: int

    def __str__(self) -> str:
        return f"{self.cluster}/{self.job_id}"


@dataclass
class Compared:
    """The jobs, oldest first, their figures, the comparison, and the moment each job's
    stored figures describe (``figures_at``: how pages mark them as facts)."""

    jobs: list[Job]
    runs: list[RunFigures]
    comparison: Comparison
    at: list[datetime | None]


def parse_refs(values: Iterable[str]) -> list[Ref]:
    """``hpc/4711`` strings into references, repeats dropped; a malformed one or more than
    ``MAX_JOBS`` is a ``CompareError``."""
    refs, bad = [], []
    for value in values:
        match = _REF.fullmatch(value.strip())
        if match is None:
            bad.append(value)
        else:
            refs.append(Ref(match[1], int(match[2])))
    if bad:
        named = ", ".join(repr(b[:40]) for b in bad[:3])
        raise CompareError(f"{named}: name each job as <cluster>/<job id>, e.g. hpc/4711 "
                           "(its page's address ends the same way)")
    refs = list(dict.fromkeys(refs))
    if len(refs) > MAX_JOBS:
        raise CompareError(f"{len(refs)} jobs picked: compare at most {MAX_JOBS} at a time")
    return refs


def compare_jobs(user: Any, refs: list[Ref]) -> Compared:
    """Load and compare the named jobs, oldest first. Five queries for any number of jobs:
    the jobs with their metrics, the GPUs' summaries, the trace analyses, the latest
    analyses' ranks, the findings."""
    if len(refs) < MIN_JOBS:
        raise CompareError(f"pick {MIN_JOBS} jobs or more to compare")
    jobs = _visible(user, refs)
    ids = [job.pk for job in jobs]
    summaries: dict[int, list[JobMetricSummary]] = {}
    for row in JobMetricSummary.objects.filter(job_id__in=ids).only(
            "job_id", "host", "gpu_index", "series").order_by("job_id", "host", "gpu_index"):
        summaries.setdefault(row.job_id, []).append(row)
    traces = _latest_traces(ids)
    findings: dict[int, list[tuple[str, str]]] = {}
    for f in JobFinding.objects.filter(job_id__in=ids).order_by("job_id", "severity", "key"):
        findings.setdefault(f.job_id, []).append((f.key, f.title))
    runs = [_run(job, summaries.get(job.pk, []), traces.get(job.pk),
                 findings.get(job.pk, [])) for job in jobs]
    return Compared(jobs, runs, compare(runs),
                    [figures_at(job, _metrics(job)) for job in jobs])


def previous_run(user: Any, job: Job) -> Job | None:
    """The user's visible run of the same job name (same cluster and Slurm user) submitted
    just before this one; another task of the same array is not a previous run."""
    if not job.name:
        return None
    earlier = (Job.objects.visible_to(user)
               .filter(cluster_id=job.cluster_id, user_name=job.user_name, name=job.name,
                       submit_time__lt=job.submit_time)
               .exclude(pk=job.pk))
    if job.array_job_id:
        earlier = earlier.exclude(array_job_id=job.array_job_id)
    return earlier.select_related("cluster").order_by("-submit_time", "-id").first()


# --- Loading ----------------------------------------------------------------------------------


def _visible(user: Any, refs: list[Ref]) -> list[Job]:
    """The named jobs the user may see, oldest first; any other is a ``NotVisible``."""
    wanted = reduce(or_, (Q(cluster__name=r.cluster, job_id=r.job_id) for r in refs))
    jobs = list(Job.objects.visible_to(user).filter(wanted)
                .select_related("cluster", "metrics"))
    found = {Ref(j.cluster.name, j.job_id) for j in jobs}
    missing = [str(r) for r in refs if r not in found]
    if missing:
        raise NotVisible(f"Beacon has no job {', '.join(missing)} that you may see: a job "
                         "is compared by its owner, their team's leads and platform admins; "
                         "or the cluster or job id is mistyped")
    return sorted(jobs, key=lambda j: (j.submit_time, j.pk))


def _latest_traces(ids: list[int]) -> dict[int, tuple[TraceRun, list[TraceRankPhases]]]:
    """Each job's latest trace analysis with its ranks (two queries)."""
    latest: dict[int, TraceRun] = {}
    for run in TraceRun.objects.filter(job_id__in=ids).order_by("job_id", "-created_at", "-id"):
        latest.setdefault(run.job_id, run)
    ranks: dict[int, list[TraceRankPhases]] = {}
    for row in TraceRankPhases.objects.filter(
            trace_run__in=[r.pk for r in latest.values()]).order_by("trace_run_id", "rank"):
        ranks.setdefault(row.trace_run_id, []).append(row)
    return {job_id: (run, ranks.get(run.pk, [])) for job_id, run in latest.items()}


def _metrics(job: Job) -> JobMetrics | None:
    try:
        return job.metrics
    except JobMetrics.DoesNotExist:
        return None


# --- One job's figures --------------------------------------------------------------------------


def _run(job: Job, summaries: list[JobMetricSummary],
         trace: tuple[TraceRun, list[TraceRankPhases]] | None,
         findings: list[tuple[str, str]]) -> RunFigures:
    ending = explain(ending_facts(job))
    run = job.run_time
    metrics = _metrics(job)
    return RunFigures(
        ref=f"{job.cluster.name}/{job.job_id}", state=job.state,
        ending=ending.kind if ending else "", ending_title=ending.title if ending else "",
        gpus=job.gpu_equivalent, gpu_model="+".join(sorted(job.gpu_types or {})),
        nodes=job.node_count, run_s=run.total_seconds() if run is not None else None,
        gpu_hours=job.gpu_hours,
        telemetry=_telemetry(job, metrics, summaries),
        telemetry_missing=MISSING.get(metrics.status if metrics else None, NO_TELEMETRY),
        trace=_trace(job, *trace) if trace and trace[1] else None,
        findings=tuple(findings))


def _telemetry(job: Job, metrics: JobMetrics | None,
               summaries: list[JobMetricSummary]) -> Telemetry | None:
    """The stored split and verdict, read as the job page reads them (``idleness.shares``)."""
    if metrics is None or not metrics.has_data:
        return None
    split = shares(metrics)
    if split is None:
        return None
    busy, held = split
    detail = metrics.straggler_detail or {}
    channel, timeline = _timeline(summaries)
    offset = (metrics.window_start - job.start_time).total_seconds() \
        if metrics.window_start and job.start_time else 0.0
    return Telemetry(
        useful_share=metrics.useful_fraction, busy_share=busy, held_share=held,
        straggler_status=metrics.straggler_status,
        straggler_words=metrics.get_straggler_status_display() if
        metrics.straggler_status else "",
        straggler_gpus=tuple(s["gpu"] for s in detail.get("stragglers", []) if s.get("gpu")),
        timeline=timeline, timeline_offset_s=offset, step_s=metrics.step_s,
        timeline_measure=channel)


def _timeline(summaries: list[JobMetricSummary]) -> tuple[str, tuple[float | None, ...]]:
    """The mean over the job's GPUs, point by point, of their busy share (the duty cycle);
    of their activity measure where the duty cycle was not stored."""
    decoded = [compact.decode(bytes(s.series)) for s in summaries if s.series]
    for channel in ("gpu_util", "activity"):
        series = [ch[channel] for ch in decoded if channel in ch]
        if series:
            return channel, tuple(_mean_known(column)
                                  for column in zip(*series, strict=False))
    return "gpu_util", ()


def _mean_known(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return fmean(known) if known else None


def _trace(job: Job, run: TraceRun, ranks: list[TraceRankPhases]) -> TraceFigures:
    """The mean step over the ranks, phase by phase; the straggler's GPU as telemetry
    names it (the job page's ``rank_gpu``)."""
    phases = {p: fmean(getattr(r, f"{p}_ms") for r in ranks)
              for p in TraceRankPhases.PHASE_FIELDS}
    gpu = ""
    if run.straggler_rank is not None:
        row = next((r for r in ranks if r.rank == run.straggler_rank), None)
        if row is not None:
            gpu = rank_gpu(row.device_host, row.device_index, _nodes(job.nodes))
    return TraceFigures(step_ms=fmean(r.step_ms for r in ranks), phases_ms=phases,
                        ranks=run.world_size, steps=run.steps,
                        straggler_rank=run.straggler_rank,
                        straggler_phase=run.straggler_phase, straggler_gpu=gpu)


def _nodes(nodes: str) -> list[str]:
    try:
        return expand_hostlist(nodes) if nodes else []
    except ValueError:  # a node list this parser cannot read: the GPU stays unnamed
        return []
