"""Trace services: read profiler traces, analyse them, store the analysis for a job.

The one path for traces (STYLE.md §2.5): ``manage.py analyze_trace`` prints
``analyze_paths``; ``manage.py import_trace``, uploads and the demo store through
``import_trace``. Readers live in ``adapters/kineto.py``, the method in
``apps/analysis/phases.py``.
"""

from __future__ import annotations

import hashlib
import logging
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.analysis.phases import (
    PHASES,
    PhaseConfig,
    RankResult,
    TraceAnalysis,
    TraceAnalysisError,
    analyze,
    recorded_span,
    with_skipped,
)
from apps.analysis.rank_digest import RankDigest, digest
from apps.clusters.models import Cluster
from apps.core.errors import AdapterError
from apps.jobs.adapters.kineto import (
    MIB,
    TRACE_SUFFIXES,
    TraceLimits,
    TraceReading,
    find_trace_files,
    read_trace_paths,
)
from apps.jobs.diagnosis import diagnose_job
from apps.jobs.models import Job, TraceRankPhases, TraceRun

logger = logging.getLogger(__name__)

# Clocks of the job record (slurmctld) and of the traced hosts may differ a little.
JOB_TIME_SLACK = timedelta(minutes=5)


def trace_limits() -> TraceLimits:
    """The size limits from settings (``TRACE_MAX_FILE_MB``, ``TRACE_MAX_DECOMPRESSED_MB``)."""
    return TraceLimits(max_file_bytes=settings.TRACE_MAX_FILE_MB * MIB,
                       max_decompressed_bytes=settings.TRACE_MAX_DECOMPRESSED_MB * MIB)


def trace_config(**overrides: float) -> PhaseConfig:
    """The straggler thresholds from settings, with per-call overrides."""
    values: dict[str, float] = {
        "min_excess_ms": float(settings.TRACE_STRAGGLER_MIN_EXCESS_MS),
        "min_excess_fraction": settings.TRACE_STRAGGLER_MIN_EXCESS_PCT / 100,
    }
    values.update(overrides)
    return PhaseConfig(**values)  # type: ignore[arg-type]


def read_traces(paths: Sequence[Path], config: PhaseConfig, limits: TraceLimits | None = None,
                workers: int = 1) -> TraceReading[RankDigest]:
    """Read every trace file under ``paths`` within the configured limits (see
    ``kineto.read_trace_paths``), each cut into its steps as soon as it is read: only one
    file's events are ever in memory (per reader), whatever the number of ranks."""
    return read_trace_paths(paths, limits or trace_limits(), workers,
                            partial(digest, config=config))


def analyze_paths(paths: Sequence[Path], config: PhaseConfig | None = None,
                  limits: TraceLimits | None = None, workers: int = 1) -> TraceAnalysis:
    """Read and analyse the traces of one run; skipped files make the result partial."""
    config = config or trace_config()
    reading = read_traces(paths, config, limits, workers)
    return with_skipped(analyze(reading.traces, config), reading.problems)


def import_trace(job: Job, paths: Sequence[Path], config: PhaseConfig | None = None,
                 limits: TraceLimits | None = None,
                 names: Mapping[str, str] | None = None) -> TraceRun:
    """Analyse a job's traces and store the analysis; safe to run twice on the same files.

    1. Read the files (bad ones are skipped, and the result says so).
    2. Analyse them; warn when they were recorded outside the job's run time.
    3. Upsert the ``TraceRun`` on (job, fingerprint of the contents) and its rank rows.
    4. Run the diagnosis again: the trace's phases are facts of it.

    What is stored, and the message of an error, name each file by ``names`` (server path
    -> what people see; by default its file name), never by where the server keeps it: the
    job page shows them to anyone who sees the job (issue 27).
    """
    names = dict(names) if names is not None else file_names(paths)
    config = config or trace_config()
    with _in_names(names):
        reading = named_reading(read_traces(paths, config, limits), names)
    return import_reading(job, reading, config, names)


def import_reading(job: Job, reading: TraceReading[RankDigest], config: PhaseConfig,
                   names: Mapping[str, str]) -> TraceRun:
    """Steps 2 to 4 of ``import_trace`` on digests already read (and named): the one
    task that reads every file, and the last task of a fan-out (``trace_groups``) that
    reads none, store the same analysis."""
    with _in_names(names):
        analysis = with_skipped(analyze(reading.traces, config), reading.problems)
    span = _recorded_span(reading.traces)
    mismatch = job_mismatch(job, span)
    if mismatch:
        analysis = replace(analysis, warnings=(mismatch, *analysis.warnings))
        logger.warning("import_trace %s: %s", job, mismatch)
    run = _store(job, reading.traces, analysis, span)
    diagnose_job(job)  # trace phases are facts of the diagnosis
    return run


@contextmanager
def _in_names(names: Mapping[str, str]) -> Iterator[None]:
    """Errors raised inside name each file by ``names``, not by the server's path."""
    try:
        yield
    except AdapterError as exc:
        raise type(exc)(without_paths(str(exc), names), service=exc.service,
                        detail=without_paths(exc.detail, names)) from None
    except TraceAnalysisError as exc:
        raise TraceAnalysisError(without_paths(str(exc), names)) from None


def file_names(paths: Sequence[Path]) -> dict[str, str]:
    """Each trace file under ``paths`` (and each path given) -> its name alone."""
    names = {str(path): path.name for path in paths}
    for path in paths:
        if path.is_dir():
            names.update((str(f), f.name) for f in path.iterdir())
    return names


def named_reading(reading: TraceReading[RankDigest],
           names: Mapping[str, str]) -> TraceReading[RankDigest]:
    """The reading with each file's ``source``, its steps' warnings and every problem in
    ``names``' words."""
    return TraceReading([_renamed(t, names.get(t.source, Path(t.source).name), names)
                         for t in reading.traces],
                        [without_paths(p, names) for p in reading.problems])


def _renamed(trace: RankDigest, name: str, names: Mapping[str, str]) -> RankDigest:
    """The digest under ``name``: its warnings were written with the server's path."""
    warnings = tuple(without_paths(w.replace(trace.source, name), names)
                     for w in trace.cut.warnings)
    return replace(trace, source=name, cut=replace(trace.cut, source=name, warnings=warnings))


def without_paths(message: str, names: Mapping[str, str]) -> str:
    """``message`` with every path of ``names`` replaced by its name, longest first (a
    file's path before its folder's)."""
    for path, name in sorted(names.items(), key=lambda item: -len(item[0])):
        message = message.replace(path, name)
    return message


def _recorded_span(traces: Sequence[RankDigest]) -> tuple[datetime, datetime] | None:
    span = recorded_span(traces)
    if span is None:
        return None
    return tuple(datetime.fromtimestamp(ns / 1e9, tz=UTC) for ns in span)  # type: ignore[return-value]


def job_mismatch(job: Job, span: tuple[datetime, datetime] | None) -> str:
    """A warning when the traces were recorded while the job was not running ('' if fine)."""
    if span is None:
        return "the traces carry no absolute time (baseTimeNanoseconds): job not checked"
    if job.start_time is None:
        return f"job {job.display_id} has not started, yet traces exist: a different job?"
    end = job.end_time or timezone.now()
    if span[0] < job.start_time - JOB_TIME_SLACK or span[1] > end + JOB_TIME_SLACK:
        return (f"the traces were recorded {span[0]:%Y-%m-%d %H:%M:%S} to "
                f"{span[1]:%H:%M:%S} UTC, outside job {job.display_id}'s run "
                f"({job.start_time:%Y-%m-%d %H:%M:%S} to {end:%Y-%m-%d %H:%M:%S} UTC): "
                f"traces from a different job?")
    return ""


def fingerprint(file_digests: Sequence[str]) -> str:
    """``TraceRun.fingerprint``: sha256 over the files' own sha256 (raw bytes), in any order."""
    return hashlib.sha256("".join(sorted(file_digests)).encode()).hexdigest()


@transaction.atomic
def _store(job: Job, traces: Sequence[RankDigest], analysis: TraceAnalysis,
           span: tuple[datetime, datetime] | None) -> TraceRun:
    fingerprint_ = fingerprint([t.sha256 for t in traces])
    straggler = analysis.straggler
    run, _ = TraceRun.objects.update_or_create(job=job, fingerprint=fingerprint_, defaults={
        "files": [{"name": Path(t.source).name, "rank": t.rank, "sha256": t.sha256}
                  for t in traces],
        "world_size": analysis.world_size, "steps": analysis.steps,
        "timeline": analysis.timeline, "dominant_phase": (analysis.dominant_phase or "")[:200],
        "straggler_rank": straggler.rank if straggler else None,
        "straggler_phase": straggler.phase[:200] if straggler else "",
        "straggler_excess_ms": round(straggler.excess_ms, 3) if straggler else None,
        "straggler_steps": list(straggler.steps) if straggler else [],
        "straggler_intermittent": straggler.intermittent if straggler else False,
        "waiting_ranks": list(analysis.waiting_ranks),
        "communication_bound": analysis.communication_bound,
        "gpu_idle_share": analysis.gpu_idle_share, "mixed_runs": analysis.mixed_runs,
        "verdict": analysis.summary, "partial": analysis.partial,
        "warnings": list(analysis.warnings),
        "recorded_start": span[0] if span else None, "recorded_end": span[1] if span else None,
    })
    run.ranks.all().delete()
    TraceRankPhases.objects.bulk_create([_rank_row(run, r) for r in analysis.ranks])
    return run


def _rank_row(run: TraceRun, rank: RankResult) -> TraceRankPhases:
    phases = rank.phases_ms
    gpu = rank.gpu
    origin = rank.origin
    return TraceRankPhases(
        trace_run=run, rank=rank.rank, step_ms=round(rank.step_ms, 3),
        **{f"{p}_ms": round(phases[p], 3) for p in PHASES},
        annotations_ms={k[:200]: round(v, 3) for k, v in phases.items() if k not in PHASES},
        **({f"gpu_{k}": round(v, 3) for k, v in gpu.as_dict().items()} if gpu else {}),
        device_host=origin.host[:255], device_index=origin.device,
        device_name=origin.device_name[:128])


# --- Uploads (the job page and the API) --------------------------------------------------


class UploadRefused(Exception):
    """An upload refused before any analysis; ``status`` is the HTTP answer (400 or 413)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def check_upload_size(content_length: str | None) -> None:
    """Refuse a request body over ``TRACE_UPLOAD_MAX_MB`` before Django reads it (called by
    ``apps.jobs.middleware.TraceUploadLimitMiddleware``, ahead of the CSRF check)."""
    limit = settings.TRACE_UPLOAD_MAX_MB * MIB
    try:
        size = int(content_length or 0)
    except ValueError:
        raise UploadRefused("the request has an invalid Content-Length") from None
    if size > limit:
        raise UploadRefused(f"the upload is {size / MIB:.0f} MiB, over the limit of "
                            f"{settings.TRACE_UPLOAD_MAX_MB} MiB: use manage.py import_trace "
                            f"for larger traces", status=413)


def import_uploads(job: Job, files: Sequence[UploadedFile]) -> TraceRun:
    """Store uploaded trace files (one per rank) in a private temporary folder, analyse
    them with ``import_trace`` and its limits, and delete them; the analysis is kept.

    Raises ``UploadRefused`` for no file or too many; ``AdapterError`` (corrupt, too big, a
    decompression bomb) and ``TraceAnalysisError`` (no usable step) name the bad file.
    """
    if not files:
        raise UploadRefused("choose one or more trace files (*.json or *.json.gz, one per rank)")
    if len(files) > settings.TRACE_UPLOAD_MAX_FILES:
        raise UploadRefused(f"{len(files)} files: at most {settings.TRACE_UPLOAD_MAX_FILES} "
                            f"per upload")
    limit = settings.TRACE_MAX_FILE_MB * MIB
    with tempfile.TemporaryDirectory(prefix="beacon-trace-") as folder:
        # the uploader's file names in place of the server's temporary paths; the folder
        # itself (in "no trace files in ...") is "the upload"
        names: dict[str, str] = {folder: "the upload"}
        for number, upload in enumerate(files):
            if upload.size is not None and upload.size > limit:
                raise AdapterError(f"trace file {upload.name} is {upload.size / MIB:.1f} MiB, "
                                   f"over the limit of {settings.TRACE_MAX_FILE_MB} MiB per "
                                   f"trace file", service="kineto")
            name = _safe_name(upload.name)
            path = Path(folder) / f"{number:05d}-{name}"
            _save(upload, path)
            # two files of one name stay two in the warnings
            names[str(path)] = name if name not in names.values() else f"{name} (#{number + 1})"
        return import_trace(job, [Path(folder)], names=names)


def _save(upload: UploadedFile, path: Path) -> None:
    with path.open("wb") as out:
        for chunk in upload.chunks():
            out.write(chunk)


def _safe_name(name: str | None) -> str:
    """The client's file name reduced to a harmless base name that still says what it is."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name or "trace").name)[-120:].lstrip(".")
    if not base.lower().endswith(TRACE_SUFFIXES):
        base += ".json"  # the reader detects gzip by its magic bytes, not the suffix
    return base or "trace.json"


# --- Collection from a configured folder (TRACE_ROOT) --------------------------------------


@dataclass
class CollectStats:
    """What one collection saw: the TaskRun's stats and the command's report."""

    folders: int = 0
    imported: list[str] = field(default_factory=list)
    unchanged: int = 0
    unchanged_since: int = 0
    settling: list[str] = field(default_factory=list)
    unknown_jobs: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    # runs of more than TRACE_GROUP_FILES files, queued to be read in groups (trace_groups)
    grouped: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"folders": self.folders, "imported": self.imported[:100],
                "unchanged": self.unchanged, "unchanged_since": self.unchanged_since,
                "settling": self.settling[:100], "unknown_jobs": self.unknown_jobs[:100],
                "failed": dict(list(self.failed.items())[:100]),
                "grouped": self.grouped[:100]}


def collect_traces(cluster: Cluster, root: Path, since: datetime | None = None,
                   settle_s: int | None = None, now: datetime | None = None,
                   inline: bool = False) -> CollectStats:
    """Import the traces under ``root/<cluster>/<job id>/`` that are new or changed.

    The layout: one folder per job, named by its raw id (``1234``) or as displayed (``4_2``,
    ``7+1``), holding one trace file per rank (``tensorboard_trace_handler``'s layout); each
    subfolder of it holding trace files is another run of the same job.

    1. A run whose newest file is older than ``since`` was seen by an earlier collection
       (the watermark): skipped without reading, whether it was imported or failed.
    2. A run with a file changed in the last ``settle_s`` seconds may still be being
       written by the profiler: left for the next collection.
    3. The fingerprint of the files (their sha256, as ``TraceRun.fingerprint``): a stored
       analysis with it means nothing changed; nothing is analysed again.
    4. Otherwise ``import_trace`` (an upsert on the same fingerprint: two collections at
       once store one row); a run of more than ``TRACE_GROUP_FILES`` files is read in
       groups by several tasks instead (``trace_groups``; ``inline``: here, one group after
       the other), a run met again resuming where it stopped. A failure names the folder
       and the others go on.
    """
    now = now or timezone.now()
    settle = timedelta(seconds=settings.TRACE_COLLECT_SETTLE_S if settle_s is None else settle_s)
    stats = CollectStats()
    folders = _job_folders(root / cluster.name)
    jobs = _jobs_by_folder(cluster, [f.name for f in folders])
    for folder in folders:
        job = jobs.get(folder.name)
        if job is None:
            stats.unknown_jobs.append(folder.name)
            continue
        for run_dir, files in _runs(folder):
            _collect_one(job, run_dir, files, since, now - settle, stats, root, inline)
    return stats


def _collect_one(job: Job, run_dir: Path, files: list[Path], since: datetime | None,
                 settled_before: datetime, stats: CollectStats, root: Path,
                 inline: bool = False) -> None:
    label = str(run_dir.relative_to(root))
    stats.folders += 1
    # ctime too: a copy that keeps the files' old mtimes (rsync -a, cp -p) is still new here
    newest = datetime.fromtimestamp(max(max(st.st_mtime, st.st_ctime) for st in
                                        (f.stat() for f in files)), tz=UTC)
    if since is not None and newest < since:
        stats.unchanged_since += 1
        return
    if newest > settled_before:
        stats.settling.append(label)
        return
    fingerprint_ = fingerprint([_file_sha256(f) for f in files])
    if TraceRun.objects.filter(job=job, fingerprint=fingerprint_).exists():
        stats.unchanged += 1
        return
    try:
        if len(files) > settings.TRACE_GROUP_FILES:
            _fan_out(job, run_dir, files, fingerprint_, label, stats, inline)
            return
        import_trace(job, [run_dir])
    except (AdapterError, TraceAnalysisError) as exc:
        logger.warning("collect_traces %s: %s", label, exc)
        stats.failed[label] = str(exc)[:500]
    else:
        stats.imported.append(label)


def _fan_out(job: Job, run_dir: Path, files: list[Path], fingerprint_: str, label: str,
             stats: CollectStats, inline: bool) -> None:
    """Plan (or find) the run's fan-out and start the groups not read yet."""
    from apps.jobs import trace_groups  # it imports this module

    fan_out = trace_groups.plan(job, run_dir, files, fingerprint_, label)
    if fan_out.trace_run_id is not None:  # analysed before (with a file left out)
        stats.unchanged += 1
        return
    trace_groups.start(fan_out, inline)
    fan_out.refresh_from_db()
    if fan_out.trace_run_id is None:
        stats.grouped.append(label)  # the workers read it
    else:  # analysed here: inline, or eager (no broker)
        stats.imported.append(label)


def _job_folders(cluster_root: Path) -> list[Path]:
    if not cluster_root.is_dir():
        return []
    return sorted(p for p in cluster_root.iterdir() if p.is_dir() and not p.name.startswith("."))


def _runs(folder: Path) -> list[tuple[Path, list[Path]]]:
    """The job folder's own trace files, then each subfolder's: one analysis each."""
    runs = []
    for run_dir in [folder, *sorted(p for p in folder.iterdir()
                                    if p.is_dir() and not p.name.startswith("."))]:
        files = find_trace_files([run_dir])
        if files:
            runs.append((run_dir, files))
    return runs


def _jobs_by_folder(cluster: Cluster, names: list[str]) -> dict[str, Job]:
    """Folder name -> job, by raw id or display id, in one query."""
    numbers = [int(n) for n in names if n.isdigit() and int(n) < 2**63]
    jobs = Job.objects.filter(cluster=cluster).filter(
        Q(job_id__in=numbers) | Q(display_id__in=names)).select_related("cluster")
    by_name: dict[str, Job] = {}
    for job in jobs:
        by_name.setdefault(str(job.job_id), job)
        by_name.setdefault(job.display_id, job)
    return {n: by_name[n] for n in names if n in by_name}


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def collect_since(cluster: Cluster) -> datetime | None:
    """The watermark: the start of the last successful collection, less the settle time
    (a run deferred then, or written while it ran, is looked at again)."""
    from apps.core.models import TaskRun

    last = (TaskRun.objects.filter(kind="collect_traces", cluster=cluster,
                                   status=TaskRun.Status.SUCCEEDED)
            .order_by("-started_at").values_list("started_at", flat=True).first())
    if last is None:
        return None
    return last - timedelta(seconds=2 * settings.TRACE_COLLECT_SETTLE_S + 60)


def clusters_with_traces(root: Path | None = None) -> list[int]:
    """Ids of the clusters that have a folder under ``root`` (``TRACE_ROOT``; none if unset)."""
    root = root or (Path(settings.TRACE_ROOT) if settings.TRACE_ROOT else None)
    if root is None or not root.is_dir():
        return []
    names = [p.name for p in root.iterdir() if p.is_dir()]
    return list(Cluster.objects.filter(name__in=names).order_by("name")
                .values_list("pk", flat=True))


def collect_cluster(cluster: Cluster, root: Path | None = None,
                    rescan: bool = False, inline: bool = False) -> CollectStats:
    """One tracked collection (``TaskRun`` kind ``collect_traces``) behind the watermark
    (``rescan``: every run again, still skipping stored fingerprints; ``inline``: a large
    run's groups read here, not queued)."""
    from apps.core.runs import tracked_run

    if root is None:
        if not settings.TRACE_ROOT:
            raise AdapterError("TRACE_ROOT is not set: no folder to collect traces from",
                               service="kineto")
        root = Path(settings.TRACE_ROOT)
    since = None if rescan else collect_since(cluster)
    with tracked_run("collect_traces", cluster, target=str(root / cluster.name)) as run:
        stats = collect_traces(cluster, root, since, inline=inline)
        run.stats = stats.as_dict()
    return stats
