"""The one import path for Slurm job records (STYLE §2.5).

``sacct --json`` from a file (``import_sacct``), from the CLI backend or from slurmrestd all
arrive here as a stream of ``SlurmJob | RecordError`` and are upserted on (cluster, job_id).

Bad input, decided and documented (docs/slurm.md): **bad records are reported and the good
ones kept**. Each batch of up to ``SLURM_SYNC_BATCH`` records (1000) is written in one
transaction; a record the parser rejects becomes an error naming its index and job id and
never reaches the database; if the database refuses a batch, the batch is retried record
by record so only the offending records are reported. A database that goes away
(``OperationalError``/``InterfaceError``) is not a bad record: the run stops with that
error, the batches committed before it stay, and a re-run resumes. A re-run writes
nothing for records that did not change (``Job.sync_hash``), so imports and syncs are
idempotent and resumable.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import IO, Any, NamedTuple

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, transaction
from django.db.models import Field, Max, Min, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.accounts.services import portal_users_by_slurm_name
from apps.analysis import plausibility
from apps.analysis.chargeback import gpu_allocation
from apps.clusters.adapters.slurm import (
    ACTIVE_STATES,
    ExitStatus,
    GpuSource,
    RecordError,
    SlurmJob,
    change_time,
    dumps,
)
from apps.clusters.adapters.slurm import parse as slurm_parse
from apps.clusters.adapters.slurm.gpu_requests import rank as gpu_rank
from apps.clusters.live_fields import INT_MAX, REQUESTED, requested_values
from apps.clusters.models import Cluster, SlurmAccount
from apps.clusters.upsert import existing_rows, refresh_statistics, upsert_jobs
from apps.core.batch import fewer_collections, forked
from apps.core.runs import tracked_run
from apps.jobs.models import Job, JobGpu

logger = logging.getLogger(__name__)

ANALYZE_AFTER = 5000  # rows created by one import before the table statistics are refreshed
MAX_REPORTED = 200  # error and warning lines kept in a result (the counts stay exact)
ExitFixer = Callable[[list[int]], Mapping[int, ExitStatus]]
# Counts an implausible record may claim beyond what their columns hold (10^12 GPUs): stored
# clamped, the claim itself kept in the reasons and in ``tres_alloc``
CLAMPED = ("gpus", "gpu_shards", "cpus", "node_count")
FLAGGED = "stored flagged, kept out of chargeback and SLOs until an admin accepts it"

SYNCED_FIELDS = [
    "display_id", "array_job_id", "array_task_id", "array_tasks_pending", "het_job_id",
    "het_job_offset", "name", "user_name", "user", "account", "team", "partition", "qos",
    "work_dir", "comment", "state", "wait_reason", "exit_code", "exit_signal", "submit_time",
    "eligible_time", "start_time", "end_time", "time_limit_min", "nodes", "node_count",
    "cpus", "memory_mb", "mem_peak_mb", "gpus", "gpu_shards", "gpu_equivalent", "gpu_types",
    "tres_alloc", "gpu_source", *REQUESTED,
]
_CLAIMED = [f.name for f in fields(plausibility.Claim)]  # what the plausibility check reads
_DIGESTED = [f.attname for f in Job._meta.concrete_fields if f.name in SYNCED_FIELDS]
_TEXT_LIMITS = {f.name: f.max_length for f in Job._meta.get_fields()
                if isinstance(f, Field) and f.max_length and f.name in SYNCED_FIELDS}


@dataclass
class ImportResult:
    """What one import or sync did. Every error line names its record."""

    created: int = 0
    updated: int = 0
    skipped: int = 0
    error_count: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seen_job_ids: set[int] = field(default_factory=set)
    finished_pks: list[int] = field(default_factory=list)
    watermark: datetime | None = None
    implausible: int = 0  # records stored flagged (plausibility at the door, issue 25)
    flagged: list[str] = field(default_factory=list)
    data_parser: str = ""  # the dump's Slurm JSON version (import_sacct)

    def error(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_REPORTED:
            self.errors.append(message)

    def warn(self, message: str) -> None:
        if len(self.warnings) < MAX_REPORTED:
            self.warnings.append(message)

    def flag(self, message: str) -> None:
        self.implausible += 1
        if len(self.flagged) < MAX_REPORTED:
            self.flagged.append(message)

    def absorb(self, other: ImportResult) -> None:
        """Add another result's counts (a sync reads the window, then ids)."""
        self.created += other.created
        self.updated += other.updated
        self.skipped += other.skipped
        for message in other.errors:
            self.error(message)
        self.error_count += other.error_count - len(other.errors)
        self.warnings.extend(other.warnings[: MAX_REPORTED - len(self.warnings)])
        self.implausible += other.implausible
        self.flagged.extend(other.flagged[: MAX_REPORTED - len(self.flagged)])
        self.seen_job_ids |= other.seen_job_ids
        self.finished_pks.extend(other.finished_pks)
        if other.watermark and (not self.watermark or other.watermark > self.watermark):
            self.watermark = other.watermark

    def stats(self) -> dict[str, Any]:
        stats = {"created": self.created, "updated": self.updated, "skipped": self.skipped,
                 "errors": self.error_count, "error_lines": self.errors[:20],
                 "warnings": self.warnings[:20], "finished": len(self.finished_pks),
                 "implausible": self.implausible, "implausible_lines": self.flagged[:20]}
        if self.data_parser:
            stats["data_parser"] = self.data_parser
        return stats


class _Existing(NamedTuple):
    pk: int
    sync_hash: str
    state: str
    exit_code: int | None
    exit_signal: int | None
    submit_time: datetime
    start_time: datetime | None
    end_time: datetime | None
    gpus: int
    gpu_equivalent: float
    gpu_types: Any
    gpu_source: str
    implausible: Any  # a list, or its JSON text (PostgreSQL through the raw cursor)
    implausible_accepted_at: datetime | None
    implausible_accepted_by: int | None

    def is_newer_than(self, job: SlurmJob) -> bool:
        """True when the stored row is a later state of the job than ``job`` (an old dump,
        or the earlier instance of a requeued job): such a record must not overwrite it.

        Records compare by their change time (``slurm.change_time``: eligible times are
        plans, left out), then by submit time (a requeued job's next instance is submitted
        when the previous one ends), then a final state beats an active one.
        """
        stored = (change_time(self.submit_time, self.start_time, self.end_time),
                  self.submit_time)
        incoming = (job.last_change, job.submit_time)
        if stored != incoming:
            return stored > incoming
        return self.state not in ACTIVE_STATES and job.state in ACTIVE_STATES


class JobImporter:
    """Upserts ``SlurmJob`` records into ``Job`` rows of one cluster, batch by batch.

    ``exit_fixer`` maps job ids to trustworthy exit statuses for records whose JSON exit
    code cannot be believed (Slurm 22.05); without it those keep what the database had.
    """

    def __init__(self, cluster: Cluster, exit_fixer: ExitFixer | None = None,
                 batch_size: int | None = None) -> None:
        self.cluster = cluster
        self.exit_fixer = exit_fixer
        self.batch_size = batch_size or settings.SLURM_SYNC_BATCH
        self.teams = dict(SlurmAccount.objects.filter(cluster=cluster)
                          .values_list("name", "team_id"))
        self.shards_per_gpu = cluster.shards_per_gpu()
        self.gpu_kinds = cluster.gpu_kinds()
        self.capacity = cluster.capacity()  # what a record may claim, read once per run
        self.now = timezone.now()
        # a cluster's jobs come in a few GPU shapes ({"h100": 8}, one MIG slice...): each
        # shape's GPU-equivalents are worked out once per import, not once per record
        self._allocations: dict[tuple[int, tuple[tuple[str, int], ...]],
                                tuple[float, dict[str, float | int]]] = {}
        self.other_clusters: dict[str, int] = {}
        self.analyzed_at = 0  # rows created when statistics were last refreshed
        self._users: dict[str, int | None] = {}  # Slurm name -> portal user, for this run
        self._stored: tuple[int, int] | None = None  # lowest, highest job id stored
        self._stored_known = False

    def run(self, items: Iterable[SlurmJob | RecordError]) -> ImportResult:
        """1. parse errors are reported; 2. records of other clusters skipped; 3. the rest
        deduplicated per batch (a requeued job appears twice: the later submit wins) and
        upserted."""
        result = ImportResult()
        batch: dict[int, SlurmJob] = {}
        for item in items:
            if isinstance(item, RecordError):
                result.error(str(item))
                continue
            if item.cluster and item.cluster != self.cluster.name:
                self.other_clusters[item.cluster] = self.other_clusters.get(item.cluster, 0) + 1
                result.skipped += 1
                continue
            result.seen_job_ids.add(item.job_id)
            previous = batch.get(item.job_id)
            if previous is None or item.submit_time >= previous.submit_time:
                batch[item.job_id] = item
            if len(batch) >= self.batch_size:
                self._flush(batch, result)
                batch = {}
        if batch:
            self._flush(batch, result)
        for name, count in self.other_clusters.items():
            result.warn(f"{count} records of cluster {name!r} skipped (importing into "
                        f"{self.cluster.name!r})")
        return result

    # --- one batch ---------------------------------------------------------------------

    def _flush(self, batch: dict[int, SlurmJob], result: ImportResult) -> None:
        fixed = self._fix_exits(batch)
        existing = self._existing(list(batch))
        users = self._portal_users({j.user_name for j in batch.values() if j.user_name})
        rows: list[dict[str, Any]] = []
        for job in batch.values():
            old = existing.get(job.job_id)
            if old and old.is_newer_than(job):
                result.skipped += 1
                continue
            row = self._row(job, fixed.get(job.job_id), old, users, result)
            if old and old.sync_hash == row["sync_hash"]:
                result.skipped += 1
                continue
            self._check(job, row, old)  # every record written is checked, none skipped
            rows.append(row)
        self._write(rows, existing, result)
        self._note_watermark(batch.values(), result)
        if result.created >= max(ANALYZE_AFTER, 2 * self.analyzed_at):
            refresh_statistics()  # at 5k, 10k, 20k... new rows: a handful per bulk import
            self.analyzed_at = result.created

    def _existing(self, job_ids: list[int]) -> dict[int, _Existing]:
        """The stored rows of these jobs. A batch whose ids all lie outside the range this
        cluster has stored (a bulk import into an empty table, or of newer jobs) needs no
        query: the range is read once per run and widened by what the run writes."""
        if not self._stored_known:
            bounds = Job.objects.filter(cluster=self.cluster).aggregate(
                low=Min("job_id"), high=Max("job_id"))
            self._stored = None if bounds["low"] is None else (bounds["low"], bounds["high"])
            self._stored_known = True
        if self._stored is None or max(job_ids) < self._stored[0] \
                or min(job_ids) > self._stored[1]:
            return {}
        return {row[0]: _Existing(*row[1:]) for row in existing_rows(
            self.cluster.pk, job_ids, _Existing._fields)}

    def _note_stored(self, job_ids: list[int]) -> None:
        if not job_ids:
            return
        low, high = min(job_ids), max(job_ids)
        if self._stored is not None:
            low, high = min(low, self._stored[0]), max(high, self._stored[1])
        self._stored = (low, high)

    def _portal_users(self, names: set[str]) -> dict[str, int | None]:
        """Portal users by Slurm name, looked up once per name and run (the same few
        hundred users own every batch)."""
        new = names - self._users.keys()
        if new:
            found = portal_users_by_slurm_name(new)
            self._users.update({name: found.get(name) for name in new})
        return self._users

    def _fix_exits(self, batch: dict[int, SlurmJob]) -> Mapping[int, ExitStatus]:
        unresolved = [j.job_id for j in batch.values() if j.exit_unresolved]
        if not unresolved or self.exit_fixer is None:
            return {}
        return self.exit_fixer(unresolved)

    def _row(self, job: SlurmJob, fixed: ExitStatus | None, old: _Existing | None,
             users: Mapping[str, int | None], result: ImportResult) -> dict[str, Any]:
        exit_code, exit_signal = _exit_values(job, fixed, old)
        gpu_equivalent, gpu_types = self._allocation(job)
        values: dict[str, Any] = {
            "display_id": job.display_id, "array_job_id": job.array_job_id,
            "array_task_id": job.array_task_id, "array_tasks_pending": job.array_tasks_pending,
            "het_job_id": job.het_job_id, "het_job_offset": job.het_job_offset,
            "name": job.name, "user_name": job.user_name, "user_id": users.get(job.user_name),
            "account": job.account, "team_id": self.teams.get(job.account),
            "partition": job.partition, "qos": job.qos, "work_dir": job.work_dir,
            "comment": job.comment, "state": job.state, "wait_reason": job.wait_reason,
            "exit_code": exit_code,
            "exit_signal": exit_signal, "submit_time": job.submit_time,
            "eligible_time": job.eligible_time, "start_time": job.start_time,
            "end_time": job.end_time, "time_limit_min": job.time_limit_min,
            "nodes": job.nodes, "node_count": job.node_count, "cpus": job.cpus,
            "memory_mb": job.memory_mb, "mem_peak_mb": job.mem_peak_mb, "gpus": job.gpus,
            "gpu_shards": job.gpu_shards,
            "gpu_equivalent": gpu_equivalent + job.gpu_shards / self.shards_per_gpu,
            "gpu_types": gpu_types, "tres_alloc": job.tres_alloc,
            "gpu_source": job.gpu_source, **requested_values(job.requested),
        }
        if old is not None and old.gpus and old.gpu_source != GpuSource.ACCOUNTING \
                and gpu_rank(old.gpu_source) > gpu_rank(job.gpu_source):
            # accounting that does not count GPUs: keep what the queue sync saw slurmctld say
            # (never an earlier accounting count: a requeued job's next run holds none yet)
            types = old.gpu_types
            values.update(gpus=old.gpus, gpu_equivalent=old.gpu_equivalent,
                          gpu_types=json.loads(types) if isinstance(types, str) else types,
                          gpu_source=old.gpu_source)
        self._clip(job, values, result)
        values["sync_hash"] = _digest(values)
        values["cluster_id"], values["job_id"] = self.cluster.pk, job.job_id
        return values

    def _allocation(self, job: SlurmJob) -> tuple[float, dict[str, float | int]]:
        shape = (job.gpus, tuple(job.gpu_types.items()))
        found = self._allocations.get(shape)
        if found is None:
            found = gpu_allocation(job.gpus, job.gpu_types, self.gpu_kinds)
            self._allocations[shape] = found
        equivalent, per_model = found
        return equivalent, dict(per_model)  # each row owns its dict

    def _check(self, job: SlurmJob, values: dict[str, Any], old: _Existing | None) -> None:
        """Plausibility at the door (issue 25): store the reasons of the row about to be
        written with it. An admin's acceptance stays while the reasons stay the same (the
        record is checked again whenever it changes); counts no column holds are clamped,
        the claim kept in the reasons."""
        record: plausibility.Record = job
        if values["gpus"] != job.gpus:  # the queue sync's GPUs kept: check what is stored
            record = plausibility.Claim(**{name: values[name] for name in _CLAIMED})
        reasons = plausibility.reasons(record, self.capacity, self.now)
        values["implausible"] = reasons
        kept = old if old is not None and old.implausible_accepted_at is not None and reasons \
            and _as_list(old.implausible) == reasons else None
        values["implausible_accepted_at"] = kept.implausible_accepted_at if kept else None
        values["implausible_accepted_by_id"] = kept.implausible_accepted_by if kept else None
        if reasons:
            for name in CLAMPED:
                values[name] = max(-INT_MAX - 1, min(values[name], INT_MAX))

    @staticmethod
    def _clip(job: SlurmJob, values: dict[str, Any], result: ImportResult) -> None:
        # Slurm allows longer strings than our columns; keep the record, say what was cut.
        for name, limit in _TEXT_LIMITS.items():
            value = values.get(name)
            if isinstance(value, str) and len(value) > limit:
                values[name] = value[:limit]
                result.warn(f"job {job.job_id}: field {name} cut from {len(value)} "
                            f"to {limit} characters")

    def _write(self, rows: list[dict[str, Any]], existing: Mapping[int, _Existing],
               result: ImportResult) -> None:
        if not rows:
            return
        try:
            with transaction.atomic():
                pks = upsert_jobs(rows, all_new=not existing)
            written = rows
        except (OperationalError, InterfaceError):
            raise  # the database went away: not a bad record; the batch rolled back whole
        except (DatabaseError, OverflowError):  # OverflowError: SQLite's int64 limit
            written, pks = self._write_one_by_one(rows, result)
        for row in written:
            if row["job_id"] in existing:
                result.updated += 1
            else:
                result.created += 1
        self._note_stored([row["job_id"] for row in written])
        self._after_write(written, existing, pks, result)
        _report_flagged(written, result)

    @staticmethod
    def _write_one_by_one(rows: list[dict[str, Any]],
                          result: ImportResult) -> tuple[list[dict[str, Any]], dict[int, int]]:
        written, pks = [], {}
        for row in rows:
            try:
                with transaction.atomic():
                    pks.update(upsert_jobs([row]))
                written.append(row)
            except (OperationalError, InterfaceError):
                raise
            except (DatabaseError, OverflowError) as exc:
                result.error(f"job {row['job_id']} ({row['display_id']}): the database "
                             f"refused it: {str(exc).strip()[:300]}")
        return written, pks

    @staticmethod
    def _after_write(written: list[dict[str, Any]], existing: Mapping[int, _Existing],
                     pks: Mapping[int, int], result: ImportResult) -> None:
        """Clear live fields of jobs no longer pending, close the GPU intervals of jobs
        that ended, and remember which jobs became finished (``on_jobs_finished``).

        Only rows that existed before can have live fields or GPU intervals to fix.
        """
        was_active = {i for i, old in existing.items() if old.state in ACTIVE_STATES}
        started = [pks[r["job_id"]] for r in written
                   if r["job_id"] in was_active and r["state"] != "PENDING"]
        if started:
            Job.objects.filter(pk__in=started).exclude(
                reason="", estimated_start=None).update(reason="", estimated_start=None)
        ended = [r["job_id"] for r in written if r["state"] not in ACTIVE_STATES
                 and (r["job_id"] not in existing or r["job_id"] in was_active)]
        close_gpu_intervals([pks[i] for i in ended if i in was_active])
        result.finished_pks.extend(pks[i] for i in ended)

    @staticmethod
    def _note_watermark(jobs: Iterable[SlurmJob], result: ImportResult) -> None:
        """Advance the result's watermark to the batch's latest change, never past now: a
        time ahead of our clock (a skewed Slurm host) would start the next window after
        jobs that have not happened yet, and lose them."""
        latest = max((j.last_change for j in jobs), default=None)
        if latest is None:
            return
        latest = min(latest, timezone.now())
        if result.watermark is None or latest > result.watermark:
            result.watermark = latest


def _exit_values(job: SlurmJob, fixed: ExitStatus | None,
                 old: _Existing | None) -> tuple[int | None, int | None]:
    """The best exit status: the fix source, else the JSON when trusted, else what we had."""
    status = fixed or job.exit
    if status is not None:
        return status.code, status.signal
    if job.exit_unresolved and old is not None:
        return old.exit_code, old.exit_signal
    return None, None


def _report_flagged(written: Iterable[Mapping[str, Any]], result: ImportResult) -> None:
    """One line per record written flagged and not accepted (an accepted record whose
    reasons did not change keeps its acceptance and is not reported again)."""
    for row in written:
        if row["implausible"] and row["implausible_accepted_at"] is None:
            result.flag(f"job {row['job_id']}: {'; '.join(row['implausible'])} — {FLAGGED}")


def _as_list(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _digest(values: Mapping[str, Any]) -> str:
    text = repr([values[name] for name in _DIGESTED])
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def close_gpu_intervals(job_pks: list[int]) -> int:
    """End the open GPU intervals of these (finished) jobs at the job's end time."""
    if not job_pks:
        return 0
    end = Subquery(Job.objects.filter(pk=OuterRef("job_id")).values("end_time")[:1])
    return JobGpu.objects.filter(job_id__in=job_pks, end__isnull=True).update(
        end=Coalesce(end, timezone.now()))


PARSE_CHUNK = 500  # parsed records per hand-over from the parsing child


def import_sacct(cluster: Cluster, stream: IO[bytes],
                 exit_codes: Mapping[int, ExitStatus] | None = None,
                 data_parser: str | None = None) -> ImportResult:
    """Import a saved ``sacct --json`` dump (air-gapped sites, backfills, the demo).

    The dump is checked first (``dumps.inspect``): Slurm's own ``errors``, a missing
    ``jobs`` list or a data parser Beacon does not read refuse it whole, before anything is
    written (``AdapterError``, recorded as the run's failure). ``data_parser`` names the
    version of a dump whose ``meta`` does not. ``exit_codes`` (from a saved ``sacct -P -o
    JobIDRaw,ExitCode``) fixes the exit codes Slurm 22.05's JSON gets wrong; without it
    those stay unknown. Recorded as a TaskRun.
    """
    fixer = None
    if exit_codes is not None:
        codes = exit_codes

        def fixer(ids: list[int]) -> Mapping[int, ExitStatus]:
            return {i: codes[i] for i in ids if i in codes}

    with tracked_run("slurm.import_sacct", cluster=cluster, target=cluster.name) as run:
        stream = dumps.seekable(stream)
        dump = dumps.inspect(stream, data_parser)
        importer = JobImporter(cluster, exit_fixer=fixer, batch_size=settings.SLURM_IMPORT_BATCH)
        # a forked child decodes and parses the dump (pure work: the stream is its alone
        # from here on) while this process writes the batches before it
        records = forked(lambda: slurm_parse.iter_sacct_json(stream, parser=dump.parser),
                         chunk=PARSE_CHUNK)
        with fewer_collections():  # records by the hundred thousand, freed by refcount
            result = importer.run(records)
        result.data_parser = dump.parser.name
        run.stats = result.stats()
    logger.info("import_sacct %s: %s", cluster.name, result.stats())
    return result
