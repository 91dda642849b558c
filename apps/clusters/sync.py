"""Keep Beacon's copy of a Slurm cluster fresh. Pages read the copy, never Slurm.

Four services, each at its own cadence (``CELERY_BEAT_SCHEDULE``), each a TaskRun:

- ``sync_cluster``: job records from accounting. Claims the cluster (two workers never sync
  one cluster at once), skips when the scheduler's job counters did not move, reads the
  window since the watermark minus an overlap, re-reads active jobs the window missed, fixes
  exit codes, then calls ``on_jobs_finished``.
- ``sync_queue``: the live queue (pending reason, estimated start), jobs only the queue knows
  (held, dependencies), and the GPU index intervals (``JobGpu``).
- ``sync_nodes``: nodes and partitions.
- ``sync_shares``: associations (limits) and fairshare/usage.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.clusters import gpu_counts, services
from apps.clusters.adapters.slurm import (
    ACTIVE_STATES,
    GpuBinding,
    QueueEntry,
    SlurmClient,
)
from apps.clusters.adapters.slurm.parse_gpus import parse_gpu_map_log
from apps.clusters.importer import ImportResult, JobImporter
from apps.clusters.live_fields import apply_live_fields
from apps.clusters.models import Cluster, Node, Partition, SlurmAssociation
from apps.core.broker import publish_on_commit
from apps.core.errors import AdapterError, TransientAdapterError
from apps.core.runs import tracked_run
from apps.jobs.models import Job, JobGpu

logger = logging.getLogger(__name__)
# Finished jobs whose archive is queued right after the sync; the rest go through the
# archive_pending beat task (bounded batches).
ARCHIVE_AT_ONCE_WITHIN = timedelta(days=1)
ARCHIVE_AT_ONCE_MAX = 500


# --- Claiming a cluster -----------------------------------------------------------------


def claim(cluster: Cluster, now: datetime) -> bool:
    """Take the cluster's sync claim with one conditional UPDATE; False if someone has it.

    A claim older than ``SLURM_SYNC_CLAIM_EXPIRY`` seconds is stale (its worker died) and
    can be taken over.
    """
    stale = now - timedelta(seconds=settings.SLURM_SYNC_CLAIM_EXPIRY)
    free = (Q(sync_state=Cluster.SyncState.IDLE) | Q(sync_claimed_at__lt=stale)
            | Q(sync_claimed_at__isnull=True))
    taken = Cluster.objects.filter(free, pk=cluster.pk).update(
        sync_state=Cluster.SyncState.RUNNING, sync_claimed_at=now)
    if taken:
        cluster.sync_state, cluster.sync_claimed_at = Cluster.SyncState.RUNNING, now
    return bool(taken)


def release(cluster: Cluster, claimed_at: datetime) -> None:
    """Give the claim back, unless a newer worker took it over meanwhile."""
    Cluster.objects.filter(pk=cluster.pk, sync_claimed_at=claimed_at).update(
        sync_state=Cluster.SyncState.IDLE, sync_claimed_at=None)


# --- Job records --------------------------------------------------------------------------


@dataclass
class SyncResult:
    """One ``sync_cluster`` run: what it wrote and whether it had anything to do."""

    jobs: ImportResult = field(default_factory=ImportResult)
    claimed: bool = True
    unchanged: bool = False
    reread: int = 0

    def stats(self) -> dict[str, Any]:
        return {**self.jobs.stats(), "claimed": self.claimed, "unchanged": self.unchanged,
                "reread": self.reread}


def sync_cluster(cluster: Cluster, client: SlurmClient | None = None) -> SyncResult:
    """Bring the cluster's job records up to date (idempotent, safe to run twice).

    1. claim the cluster (another worker has it: return at once);
    2. ask the scheduler's job counters; unchanged and settled: done (one cheap call);
    3. upsert the accounting window since ``sync_watermark`` minus the overlap;
    4. re-read by id every job we hold as active that the window did not return;
    5. advance the watermark (never past the run's start), record success or the error;
    6. after commit, hand the jobs that became finished to ``on_jobs_finished``.
    """
    now = timezone.now()
    with tracked_run("slurm.sync_jobs", cluster=cluster, target=cluster.name) as run:
        if not claim(cluster, now):
            result = SyncResult(claimed=False)
            run.stats = result.stats()
            return result
        try:
            result = _sync_jobs(cluster, client or services.client_for(cluster), now)
            _record_success(cluster, result, now)
        except Exception as exc:
            Cluster.objects.filter(pk=cluster.pk).update(last_sync_error=str(exc)[:2000])
            raise
        finally:
            release(cluster, now)
        run.stats = result.stats()
    if result.jobs.finished_pks:
        pks = list(result.jobs.finished_pks)
        transaction.on_commit(lambda: on_jobs_finished(cluster, pks))
    return result


def _sync_jobs(cluster: Cluster, client: SlurmClient, now: datetime) -> SyncResult:
    marker = client.change_marker()
    if _nothing_new(cluster, marker, now):
        return SyncResult(unchanged=True)
    if marker != cluster.sync_marker:
        cluster.sync_marker, cluster.sync_marker_at = marker, now
    importer = JobImporter(cluster, exit_fixer=client.exit_codes)
    result = SyncResult(jobs=importer.run(client.jobs_since(_window_start(cluster, now))))
    missed = _active_job_ids(cluster) - result.jobs.seen_job_ids
    if missed:
        result.reread = len(missed)
        result.jobs.absorb(importer.run(client.jobs_by_id(sorted(missed))))
    return result


def _nothing_new(cluster: Cluster, marker: str, now: datetime) -> bool:
    """True when the counters match and a full pass already ran after they settled.

    slurmdbd receives job records a little after slurmctld counts them, so one pass must
    start ``SLURM_SYNC_SETTLE`` seconds after the last counter change; and a full pass runs
    at least every ``SLURM_SYNC_FULL_EVERY`` seconds anyway (edits such as a new time limit
    move no counter).
    """
    last = cluster.last_full_sync_at
    if marker != cluster.sync_marker or last is None or cluster.sync_marker_at is None:
        return False
    settled = last >= cluster.sync_marker_at + timedelta(seconds=settings.SLURM_SYNC_SETTLE)
    recent = now - last < timedelta(seconds=settings.SLURM_SYNC_FULL_EVERY)
    return settled and recent


def _trusted_watermark(cluster: Cluster, now: datetime) -> datetime | None:
    """The stored watermark, unless it lies in the future: Beacon before the clamp (issue 4)
    could store one from a pending job's eligible time, and every window since then started
    after the jobs it should have read. Such a cluster is read again like a first sync
    (idempotent: unchanged records are skipped)."""
    watermark = cluster.sync_watermark
    return watermark if watermark is not None and watermark <= now else None


def _window_start(cluster: Cluster, now: datetime) -> datetime | None:
    watermark = _trusted_watermark(cluster, now)
    if watermark is None:
        if cluster.slurm_backend == Cluster.SlurmBackend.FILES:
            return None  # a folder of dumps is what the site chose to export: all of it
        return now - timedelta(days=settings.SLURM_SYNC_INITIAL_DAYS)
    return watermark - timedelta(seconds=settings.SLURM_SYNC_OVERLAP)


def _active_job_ids(cluster: Cluster) -> set[int]:
    return set(Job.objects.filter(cluster=cluster, state__in=ACTIVE_STATES)
               .values_list("job_id", flat=True))


def _record_success(cluster: Cluster, result: SyncResult, now: datetime) -> None:
    fields = {"last_sync_ok_at": now, "last_sync_error": ""}
    if not result.unchanged:
        fields.update(sync_watermark=_next_watermark(_trusted_watermark(cluster, now),
                                                     result.jobs.watermark, now),
                      last_full_sync_at=now,
                      sync_marker=cluster.sync_marker, sync_marker_at=cluster.sync_marker_at)
    Cluster.objects.filter(pk=cluster.pk).update(**fields)
    for name, value in fields.items():
        setattr(cluster, name, value)


def _next_watermark(stored: datetime | None, seen: datetime | None,
                    now: datetime) -> datetime | None:
    """The watermark only moves forward, and never past the sync's start: records changed
    during the run are read again by the next window (its overlap)."""
    candidates = [t for t in (stored, seen) if t is not None]
    return min(max(candidates), now) if candidates else None


def on_jobs_finished(cluster: Cluster, job_pks: list[int]) -> None:
    """Hook: called after each committed sync with the pks of jobs it stored as finished
    for the first time (ended since the last sync, or first seen already finished).

    Each GPU job that ended recently gets its archive task, two minutes later because the
    last scrapes reach Prometheus late. Older jobs (a first sync of a long history) are left
    to the ``archive_pending`` beat task, which works through them in bounded batches
    instead of queueing one task per job at once.
    """
    from apps.jobs.tasks import archive_job  # jobs depends on clusters, not the reverse

    if not cluster.has_telemetry:
        # Nothing to fetch from: a task would only fail (issue 19: a fresh demo opened on
        # 155 failed runs). Archives come from files here (``archive_jobs --openmetrics``).
        logger.info("cluster %s: %d jobs finished, no Prometheus: no archive queued",
                    cluster.name, len(job_pks))
        return
    recent = list(Job.objects.filter(
        pk__in=job_pks, gpu_equivalent__gt=0,
        end_time__gte=timezone.now() - ARCHIVE_AT_ONCE_WITHIN,
    ).values_list("pk", flat=True)[:ARCHIVE_AT_ONCE_MAX])
    for pk in recent:
        publish_on_commit(archive_job, pk, countdown=120)  # a broker outage: left to the beat
    logger.info("cluster %s: %d jobs finished, %d archive tasks queued", cluster.name,
                len(job_pks), len(recent))


# --- The live queue and GPU bindings -------------------------------------------------------


@dataclass
class QueueResult:
    """One ``sync_queue`` run."""

    queued: int = 0
    updated: int = 0
    gpus_from_slurmctld: int = 0  # jobs whose GPUs accounting does not count, filled in
    imported: ImportResult = field(default_factory=ImportResult)
    gpus_opened: int = 0
    gpus_closed: int = 0
    note: str = ""  # why GPU bindings are missing, when the backend cannot give them

    def stats(self) -> dict[str, Any]:
        return {"queued": self.queued, "updated": self.updated,
                "gpus_from_slurmctld": self.gpus_from_slurmctld,
                "imported": self.imported.created, "import_errors": self.imported.error_count,
                "gpus_opened": self.gpus_opened, "gpus_closed": self.gpus_closed,
                "note": self.note}


def sync_queue(cluster: Cluster, client: SlurmClient | None = None) -> QueueResult:
    """Refresh live fields from the scheduler: pending reasons, estimated starts, jobs only
    the queue knows (held, waiting on a dependency: sacct windows drop them), and which
    GPU indices each running job holds.

    A backend that cannot give GPU bindings still stores the queue; the run's
    stats say why the bindings are missing and the intervals are left as they were. A
    transient failure (slurmctld down) fails the run, to be retried.
    """
    client = client or services.client_for(cluster)
    now = timezone.now()
    with tracked_run("slurm.sync_queue", cluster=cluster, target=cluster.name) as run:
        entries = client.queue()
        result = QueueResult(queued=len(entries))
        known = _import_unknown(cluster, client, entries, result)
        result.updated = apply_live_fields(cluster, entries, known)
        result.gpus_from_slurmctld = gpu_counts.apply_slurmctld_gpus(cluster, entries)
        try:
            bindings = client.gpu_bindings()
        except TransientAdapterError:
            raise
        except AdapterError as exc:  # this backend has no GPU bindings: keep the queue
            result.note = str(exc)
        else:
            result.gpus_opened, result.gpus_closed = sync_gpu_bindings(cluster, bindings, now)
            result.note = _unbound_note(entries, bindings)
        Cluster.objects.filter(pk=cluster.pk).update(queue_synced_at=now)
        cluster.queue_synced_at = now
        run.stats = result.stats()
    return result


def _unbound_note(entries: list[QueueEntry], bindings: list[GpuBinding]) -> str:
    """Say so when running GPU jobs came without GPU indices: a Slurm whose output Beacon
    misreads must not look like a cluster whose jobs hold no GPUs (issue 25: a format
    change once left every binding empty while the sync reported success)."""
    bound = {b.job_id for b in bindings}
    unbound = sorted(e.job_id for e in entries
                     if e.state == "RUNNING" and e.gpus and e.job_id not in bound)
    if not unbound:
        return ""
    return (f"{len(unbound)} running GPU job(s) came without GPU indices (e.g. "
            f"{', '.join(map(str, unbound[:3]))}): their telemetry cannot be bound to GPUs "
            "(a job that ended between the two reads is one too)")


def _import_unknown(cluster: Cluster, client: SlurmClient, entries: list[QueueEntry],
                    result: QueueResult) -> set[int]:
    ids = {e.job_id for e in entries}
    known = set(Job.objects.filter(cluster=cluster, job_id__in=ids)
                .values_list("job_id", flat=True))
    unknown = sorted(ids - known)
    if unknown:
        importer = JobImporter(cluster, exit_fixer=client.exit_codes)
        result.imported = importer.run(client.jobs_by_id(unknown))
        known |= result.imported.seen_job_ids
    return known




def sync_gpu_bindings(cluster: Cluster, bindings: Iterable[GpuBinding],
                      now: datetime) -> tuple[int, int]:
    """Open a ``JobGpu`` interval for each (job, node, GPU index) now held, close those no
    longer held. Returns (opened, closed).

    An interval starts at the job's start time (or now, if accounting does not have it yet)
    and ends at the job's end time when known, else now; ``sync_cluster`` closes the
    intervals of finished jobs at their exact end time.
    """
    bindings = list(bindings)
    jobs = dict(Job.objects.filter(cluster=cluster, job_id__in={b.job_id for b in bindings})
                .values_list("job_id", "pk"))
    starts = dict(Job.objects.filter(pk__in=jobs.values()).values_list("pk", "start_time"))
    nodes = _nodes_by_name(cluster, {b.node for b in bindings})
    held = {(jobs[b.job_id], nodes[b.node].pk, i) for b in bindings if b.job_id in jobs
            for i in b.gpu_indices}
    open_rows = {(g.job_id, g.node_id, g.gpu_index): g.pk for g in
                 JobGpu.objects.filter(node__cluster=cluster, end__isnull=True)}
    new = [JobGpu(job_id=j, node_id=n, gpu_index=i, start=starts.get(j) or now)
           for (j, n, i) in held - open_rows.keys()]
    JobGpu.objects.bulk_create(new, ignore_conflicts=True)
    gone = [pk for key, pk in open_rows.items() if key not in held]
    closed = _close_intervals(gone, now)
    return len(new), closed


def _close_intervals(pks: list[int], now: datetime) -> int:
    if not pks:
        return 0
    rows = JobGpu.objects.filter(pk__in=pks).select_related("job")
    for row in rows:
        row.end = row.job.end_time or now
    JobGpu.objects.bulk_update(rows, ["end"])
    return len(pks)


def _nodes_by_name(cluster: Cluster, names: set[str]) -> dict[str, Node]:
    """Node rows by name; a node the node sync has not seen yet gets a minimal row."""
    nodes = {n.name: n for n in Node.objects.filter(cluster=cluster, name__in=names)}
    missing = [Node(cluster=cluster, name=name) for name in names - nodes.keys()]
    if missing:
        Node.objects.bulk_create(missing, ignore_conflicts=True)
        nodes = {n.name: n for n in Node.objects.filter(cluster=cluster, name__in=names)}
    return nodes


# --- Nodes, partitions, associations, fairshare ---------------------------------------------


def sync_nodes(cluster: Cluster, client: SlurmClient | None = None) -> dict[str, int]:
    """Upsert partitions and nodes (with their partitions). Nodes Slurm no longer reports
    are kept, with state ``gone``: their GPU history refers to them."""
    client = client or services.client_for(cluster)
    with tracked_run("slurm.sync_nodes", cluster=cluster, target=cluster.name) as run:
        slurm_nodes, slurm_parts = client.nodes(), client.partitions()
        with transaction.atomic():
            parts = _upsert_partitions(cluster, slurm_parts)
            for info in slurm_nodes:
                node, _ = Node.objects.update_or_create(
                    cluster=cluster, name=info.name, defaults={
                        "gpu_type": info.gpu_type[:64], "gpu_count": info.gpu_count,
                        "gpu_types": dict(info.gpu_types),
                        "gpus_used": info.gpus_used, "cpus": info.cpus,
                        "memory_mb": info.memory_mb, "state": info.state[:64],
                        "state_reason": info.reason[:500]})
                node.partitions.set([parts[p] for p in info.partitions if p in parts])
            gone = Node.objects.filter(cluster=cluster).exclude(
                name__in=[n.name for n in slurm_nodes]).update(state="gone", gpus_used=0)
            now = timezone.now()
            Cluster.objects.filter(pk=cluster.pk).update(nodes_synced_at=now)
        run.stats = {"nodes": len(slurm_nodes), "partitions": len(parts), "gone": gone}
    return run.stats


def _upsert_partitions(cluster: Cluster, infos: Iterable[Any]) -> dict[str, Partition]:
    parts = {}
    for info in infos:
        parts[info.name], _ = Partition.objects.update_or_create(
            cluster=cluster, name=info.name, defaults={
                "is_default": info.is_default, "max_time_min": info.max_time_min,
                "state": info.state[:32]})
    return parts


def sync_shares(cluster: Cluster, client: SlurmClient | None = None) -> dict[str, Any]:
    """Replace the cluster's associations: limits from accounting, usage from fairshare.

    A backend without fairshare (slurmrestd) still stores the limits; the run's stats say
    why usage is missing.
    """
    client = client or services.client_for(cluster)
    with tracked_run("slurm.sync_shares", cluster=cluster, target=cluster.name) as run:
        assocs = client.associations()
        try:
            shares = {(s.account, s.user): s for s in client.shares()}
            note = ""
        except TransientAdapterError:
            raise
        except AdapterError as exc:  # this backend has no fairshare: keep the limits
            shares, note = {}, str(exc)
        with transaction.atomic():
            kept = [_store_association(cluster, a, shares.get((a.account, a.user)))
                    for a in assocs if a.cluster in ("", cluster.name)]
            SlurmAssociation.objects.filter(cluster=cluster).exclude(pk__in=kept).delete()
            Cluster.objects.filter(pk=cluster.pk).update(shares_synced_at=timezone.now())
        run.stats = {"associations": len(kept), "with_usage": len(shares), "note": note}
    return run.stats


def _store_association(cluster: Cluster, assoc: Any, share: Any) -> int:
    usage: dict[str, Any] = {}
    if share is not None:
        usage = {"norm_shares": share.norm_shares, "raw_usage": share.raw_usage,
                 "effective_usage": share.effective_usage, "fairshare": share.fairshare,
                 "level_fs": share.level_fs, "usage_tres_mins": dict(share.grp_tres_raw),
                 "running_tres_mins": dict(share.tres_run_mins)}
    row, _ = SlurmAssociation.objects.update_or_create(
        cluster=cluster, account=assoc.account, user_name=assoc.user, defaults={
            "parent": assoc.parent, "shares": assoc.shares[:32], "qos": list(assoc.qos),
            "default_qos": assoc.default_qos, "grp_tres": dict(assoc.grp_tres),
            "grp_tres_mins": dict(assoc.grp_tres_mins),
            "grp_tres_run_mins": dict(assoc.grp_tres_run_mins),
            "max_tres": dict(assoc.max_tres), "grp_jobs": assoc.grp_jobs,
            "max_wall_min": assoc.max_wall_min, **usage})
    return row.pk


# --- GPU history from the prolog's log -------------------------------------------------


def import_gpu_map_file(cluster: Cluster, path: str) -> dict[str, Any]:
    """``import_gpu_map`` over a log file ("-": standard input), recorded as a TaskRun.

    A file that cannot be read is an ``OSError`` (the run records it as failed).
    """
    with tracked_run("slurm.import_gpu_map", cluster=cluster, target=path) as run:
        if path == "-":
            run.stats = import_gpu_map(cluster, sys.stdin)
        else:
            with Path(path).open(encoding="utf-8", errors="replace") as lines:
                run.stats = import_gpu_map(cluster, lines)
    return run.stats


def import_gpu_map(cluster: Cluster, lines: Iterable[str]) -> dict[str, Any]:
    """Store the GPU intervals of the prolog's history log as ``JobGpu`` rows.

    This binds telemetry to jobs on nodes whose dcgm-exporter runs without job mapping,
    for jobs that ran while no sync was watching (a backfill, the demo), with the GPU's UUID
    where the prolog found nvidia-smi. Idempotent: an interval already stored (same job,
    node, GPU and start) only gets its end (and UUID) filled in.
    Lines for jobs Beacon does not know yet are counted and skipped; run it after the
    accounting import.
    """
    held, problems = parse_gpu_map_log(lines)
    jobs = dict(Job.objects.filter(cluster=cluster, job_id__in={h.job_id for h in held})
                .values_list("job_id", "pk"))
    nodes = _nodes_by_name(cluster, {h.node for h in held if h.job_id in jobs})
    rows = [JobGpu(job_id=jobs[h.job_id], node_id=nodes[h.node].pk, gpu_index=h.gpu_index,
                   gpu_uuid=h.uuid, start=h.start, end=h.end) for h in held if h.job_id in jobs]
    with transaction.atomic():
        before = JobGpu.objects.filter(node__cluster=cluster).count()
        for first in range(0, len(rows), 2000):
            JobGpu.objects.bulk_create(rows[first:first + 2000], update_conflicts=True,
                                       unique_fields=["job", "node", "gpu_index", "start"],
                                       update_fields=["end", "gpu_uuid"])
        created = JobGpu.objects.filter(node__cluster=cluster).count() - before
    return {"intervals": len(rows), "created": created, "unknown_jobs": len(held) - len(rows),
            "problems": problems[:50], "problem_count": len(problems)}
