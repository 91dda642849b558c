"""A detection run: read every input of a window, run the rules, store the findings.

``detect(cluster, since, until)`` is what the Celery task and ``manage.py detect`` call.

1. Load the rules and allow-lists (data admins edit).
2. Read the inputs, each on its own: telemetry (Prometheus, or OpenMetrics files for the
   demo), allocations and GPU bindings, sshd events, service probes, node inventories,
   and job scripts not scanned yet. A source that has nothing, or that the site has not
   set up, is recorded as skipped; one that was asked for and failed (or a telemetry
   query of it) is recorded in ``failures`` with the query and the service's error: the
   run goes on, the rules that need it find nothing, and the run ends ``partial``.
3. Run each enabled rule (a rule that raises is recorded as skipped, never fatal).
4. Upsert the hits as findings, mark the scanned scripts, and end expired suppressions,
   in one transaction; notify critical findings after it commits.

Idempotent: a window run twice stores the same findings (``findings.record_hits``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.analysis import security_rules
from apps.analysis.components import alias_table
from apps.analysis.hostlist import expand as expand_hostlist
from apps.analysis.secret_shapes import MAX_TEXT
from apps.analysis.security_types import (
    Allocation,
    Allow,
    Frame,
    Hit,
    Inputs,
    JobText,
    NodeSoftware,
    ProbeResult,
    QuietWindow,
    RuleConfig,
)
from apps.analysis.sshd_log import SshRecord, events
from apps.analysis.timeseries import Series
from apps.clusters import services as cluster_services
from apps.clusters import stores as cluster_stores
from apps.clusters.adapters.prometheus import PrometheusClient
from apps.clusters.adapters.slurm import SlurmClient
from apps.clusters.models import Cluster, Node
from apps.core.batch import fewer_collections, forked
from apps.core.errors import AdapterError
from apps.jobs.archive_sources import catalogue_for
from apps.jobs.models import Job, JobGpu
from apps.security import findings, saved_scripts, telemetry_stores
from apps.security.adapters import telemetry
from apps.security.frames import GpuFold, Grid, build_frame
from apps.security.models import (
    Advisory,
    AllowListEntry,
    ComponentAlias,
    IbStorageBaseline,
    NodeInventory,
    QuietSchedule,
    ScriptScan,
    SecurityRule,
    ServiceProbe,
    SshAllowedSource,
    SshLogEvent,
)

log = logging.getLogger(__name__)
MAX_SKIPPED = 200
_DRAINED = ("drain", "maint", "down", "fail", "reboot")
# No collection while the frame is read and built (``batch.fewer_collections``): it makes
# millions of small objects and no cycles (10,000 GPUs: 2 M points, 350,000 buckets), and
# each collection only walked them again: 40 % of that CPU time (bench detect_scale).
_FRAME_GC_THRESHOLD = 10**9


@dataclass
class Sources:
    """Where a run reads what is not in the database: telemetry files (else Prometheus)
    and saved job scripts (else the cluster's Slurm backend)."""

    openmetrics: Path | None = None
    scripts: Path | None = None
    prometheus: PrometheusClient | None = None
    slurm: SlurmClient | None = None
    rescan_scripts: bool = False
    script_limit: int | None = -1  # -1: SECURITY_SCRIPT_BATCH; None: every job in the window
    # the slice's telemetry, already read from ``openmetrics`` (or the error reading it):
    # a sliced backfill reads the next slice while this one is detected (``read_ahead``)
    raw: telemetry.RawTelemetry | AdapterError | None = None


@dataclass
class RunReport:
    """What a run read, skipped, found and stored (``TaskRun.stats`` and the JSON twin)."""

    since: datetime
    until: datetime
    sources: dict[str, str] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    recorded: findings.Recorded = field(default_factory=findings.Recorded)
    telemetry_ok: bool = False  # telemetry read, at least in part
    expired: int = 0
    # sources (or telemetry queries, rules) that were asked for and failed: "source: why"
    failures: list[str] = field(default_factory=list)

    @property
    def telemetry_complete(self) -> bool:
        """Telemetry read with no failed query: every telemetry rule ran."""
        return self.telemetry_ok and not any(f.startswith("telemetry") for f in self.failures)

    def fail(self, message: str) -> None:
        """A source asked for failed: recorded (and skipped) with its reason."""
        if len(self.failures) < MAX_SKIPPED:
            self.failures.append(message[:2000])
        self.skip(message)

    def skip(self, message: str) -> None:
        if len(self.skipped) < MAX_SKIPPED:
            self.skipped.append(message[:300])

    def absorb(self, other: RunReport) -> None:
        """Add a later slice of the same run (a long window is detected a slice at a time)."""
        self.until = other.until
        self.sources.update(other.sources)
        for key, count in other.hits.items():
            self.hits[key] = self.hits.get(key, 0) + count
        for message in other.skipped:
            self.skip(message)
        r, o = self.recorded, other.recorded
        r.created, r.updated = r.created + o.created, r.updated + o.updated
        r.reopened, r.unchanged = r.reopened + o.reopened, r.unchanged + o.unchanged
        r.ids += o.ids
        r.notify_now += o.notify_now
        self.telemetry_ok = self.telemetry_ok and other.telemetry_ok
        self.expired += other.expired
        for message in other.failures:
            if len(self.failures) < MAX_SKIPPED:
                self.failures.append(message)

    def stats(self) -> dict[str, Any]:
        return {"since": self.since.isoformat(), "until": self.until.isoformat(),
                "sources": self.sources, "hits": self.hits, "skipped": self.skipped[:50],
                "skipped_total": len(self.skipped), "created": self.recorded.created,
                "updated": self.recorded.updated, "reopened": self.recorded.reopened,
                "unchanged": self.recorded.unchanged, "suppressions_expired": self.expired,
                "failures": self.failures[:50], "telemetry_complete": self.telemetry_complete}


def detect(cluster: Cluster, since: datetime, until: datetime, sources: Sources | None = None,
           now: datetime | None = None) -> RunReport:
    """Run every enabled rule over ``(since, until]`` and store what they find."""
    sources = sources or Sources()
    now = now or timezone.now()
    report = RunReport(since, until)
    configs = _configs()
    allow = _allow(cluster, since, until, now)
    inputs, scanned = _inputs(cluster, since, until, sources, report)
    hits = _with_queries(cluster, _run_rules(inputs, configs, allow, report))
    with transaction.atomic():
        report.recorded = findings.record_hits(cluster, hits)
        ScriptScan.objects.bulk_create(scanned, ignore_conflicts=True)
        report.expired = findings.expire_suppressions(cluster, now)
    if report.recorded.notify_now:
        _notify(report)
    return report


def _notify(report: RunReport) -> None:
    """Send critical findings at once. Without a worker the task runs here: a mail server
    that is down must not fail the detection, and the digest tries those findings again."""
    from apps.security.models import Finding
    from apps.security.tasks import notify_findings

    ids = report.recorded.notify_now
    try:
        notify_findings.delay_on_commit(ids)
    except Exception as exc:
        log.exception("security: notifying findings %s failed", ids)
        report.skip(f"notification failed, left for the digest: {type(exc).__name__}: {exc}")
        Finding.objects.filter(pk__in=ids).update(notify_pending=True)


# --- Configuration ----------------------------------------------------------------------------


def _configs() -> dict[str, RuleConfig]:
    rows = {r.key: r for r in SecurityRule.objects.all()}
    return {key: rows[key].as_config() if key in rows else security_rules.config(key)
            for key in security_rules.RULES}


def _allow(cluster: Cluster, since: datetime, until: datetime, now: datetime) -> Allow:
    entries = AllowListEntry.objects.filter(Q(cluster=cluster) | Q(cluster__isnull=True)) \
        .filter(Q(starts_at__isnull=True) | Q(starts_at__lte=until)) \
        .filter(Q(ends_at__isnull=True) | Q(ends_at__gte=since))
    admins, exempt, quiet, versions = set(), set(), [], set()
    for e in entries:
        value = e.value.strip()
        if e.kind == AllowListEntry.Kind.ADMIN_USER:
            admins.add(value)
        elif e.kind == AllowListEntry.Kind.EXEMPT_USER:
            exempt.add(value)
        elif e.kind == AllowListEntry.Kind.QUIET_NODES:
            quiet.append(QuietWindow(value, _ts(e.starts_at), _ts(e.ends_at), e.reason))
        elif e.kind == AllowListEntry.Kind.VERSION and "=" in value:
            software, version = value.split("=", 1)
            versions.add((software.strip(), version.strip()))
    quiet.extend(_quiet_schedules(cluster, since, until))
    quiet.extend(_drained_now(cluster, since, until, now))
    mine = Q(cluster=cluster) | Q(cluster__isnull=True)
    sources = tuple(s.as_source() for s in SshAllowedSource.objects.filter(mine))
    baselines = tuple(b.as_baseline() for b in IbStorageBaseline.objects.filter(mine))
    return Allow(frozenset(admins), frozenset(exempt), tuple(quiet), frozenset(versions),
                 sources, baselines, _partitions(cluster) if baselines else {},
                 alias_table(dict(ComponentAlias.objects.values_list("alias", "component"))))


def _quiet_schedules(cluster: Cluster, since: datetime, until: datetime) -> list[QuietWindow]:
    """The enabled quiet windows of this cluster (and of all) that may touch the window
    and its look-back; recurring ones in the cluster's time zone."""
    start = _frame_start(since)
    rows = QuietSchedule.objects.filter(Q(cluster=cluster) | Q(cluster__isnull=True),
                                        enabled=True) \
        .filter(Q(ends_at__isnull=True) | Q(ends_at__gte=start - timedelta(days=1))) \
        .filter(Q(starts_at__isnull=True) | Q(starts_at__lte=until + timedelta(days=1)))
    return [row.as_window(cluster.timezone or "UTC") for row in rows]


def _partitions(cluster: Cluster) -> dict[str, frozenset[str]]:
    """Node name -> its Slurm partitions (for baselines given per partition)."""
    found: dict[str, set[str]] = defaultdict(set)
    for node, partition in Node.partitions.through.objects.filter(node__cluster=cluster) \
            .values_list("node__name", "partition__name"):
        found[node].add(partition)
    return {node: frozenset(names) for node, names in found.items()}


def _drained_now(cluster: Cluster, since: datetime, until: datetime,
                 now: datetime) -> list[QuietWindow]:
    """Nodes Slurm reports drained or down now are quiet for a live window (their state in
    the past is not known, so a backfill of older windows does not use it)."""
    if until < now - timedelta(hours=1):
        return []
    nodes = Node.objects.filter(cluster=cluster).exclude(state="")
    return [QuietWindow(n.name, since.timestamp(), None, f"Slurm state {n.state}")
            for n in nodes if any(word in n.state.lower() for word in _DRAINED)]


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value else None


# --- Inputs -----------------------------------------------------------------------------------


def _inputs(cluster: Cluster, since: datetime, until: datetime, sources: Sources,
            report: RunReport) -> tuple[Inputs, list[ScriptScan]]:
    frame_start = _frame_start(since)
    jobs = list(Job.objects.filter(cluster=cluster, start_time__isnull=False,
                                   start_time__lt=until)
                .filter(Q(end_time__isnull=True) | Q(end_time__gt=frame_start))
                .select_related("team"))
    allocations = tuple(_allocation(j) for j in jobs)
    frame = _frame(cluster, frame_start, until, allocations, sources, report)
    texts, scanned = _job_texts(cluster, since, until, sources, report)
    ssh = _ssh(cluster, since, until, report)
    probes = _probes(cluster, since, until, report)
    software, advisories = _software(cluster, report)
    users = {e.user for e in ssh} | {p.user for p in probes}
    return Inputs(since.timestamp(), until.timestamp(), frame, allocations, tuple(texts),
                  tuple(ssh), tuple(probes), tuple(software), tuple(advisories),
                  fingerprint_key(), cluster.timezone, _user_teams(cluster, users)), scanned


def _frame_start(since: datetime) -> datetime:
    """Where a run's telemetry frame starts: a look-back before its window."""
    return since - timedelta(minutes=settings.SECURITY_LOOKBACK_MINUTES)


def fingerprint_key() -> bytes:
    """The site's key for secret fingerprints, derived from SECRET_KEY (never stored)."""
    return hmac.new(settings.SECRET_KEY.encode(), b"beacon security fingerprints",
                    hashlib.sha256).digest()


def _allocation(job: Job) -> Allocation:
    end = job.end_time.timestamp() if job.end_time and not job.is_active else math.inf
    start = job.start_time.timestamp() if job.start_time else math.inf
    return Allocation(job.job_id, job.user_name, job.team.slug if job.team else job.account,
                      frozenset(expand_hostlist(job.nodes)) if job.nodes else frozenset(),
                      start, end, job.gpus or math.ceil(job.gpu_equivalent), job.display_id)


def _frame(cluster: Cluster, start: datetime, until: datetime,
           allocations: tuple[Allocation, ...], sources: Sources,
           report: RunReport) -> Frame | None:
    with fewer_collections(_FRAME_GC_THRESHOLD):
        return _read_frame(cluster, start, until, allocations, sources, report)


def _read_frame(cluster: Cluster, start: datetime, until: datetime,
                allocations: tuple[Allocation, ...], sources: Sources,
                report: RunReport) -> Frame | None:
    try:
        catalogue = catalogue_for(cluster)
        raw, fold = _raw_telemetry(cluster, catalogue, start.timestamp(), until.timestamp(),
                                   sources, report)
    except AdapterError as exc:
        report.sources["telemetry"] = f"failed: {exc}"
        report.fail(f"telemetry: {exc}")
        return None
    if raw is None:
        return None
    grid = fold.grid if fold is not None else Grid.over(start.timestamp(), until.timestamp(),
                                                        raw.step)
    held, bound_jobs = _bindings(cluster, start, until)
    frame, stats = build_frame(raw, catalogue, grid, allocations, held, bound_jobs, fold)
    report.telemetry_ok = True
    report.sources["telemetry"] += (f": {stats.gpus} GPUs, {len(frame.nodes)} nodes, "
                                    f"step {grid.step:g}s")
    if raw.failures:
        report.sources["telemetry"] += f", {len(raw.failures)} queries failed"
    for failure in raw.failures:
        report.fail(f"telemetry query failed, {failure}")
    for warning in raw.warnings[:5]:
        report.skip(f"telemetry warning: {warning}")
    if stats.unknown_buckets:
        report.skip(f"telemetry: GPU owner unknown for {stats.unknown_buckets} of "
                    f"{stats.gpu_buckets} GPU buckets (no job label or GPU binding on "
                    f"{', '.join(stats.unmapped_hosts[:10])})")
    return frame


def _raw_telemetry(cluster: Cluster, catalogue: Any, start: float, end: float,
                   sources: Sources, report: RunReport
                   ) -> tuple[telemetry.RawTelemetry | None, GpuFold | None]:
    """The window's telemetry. Read live, its GPU series come folded on the frame's grid
    (``GpuFold``) as they stream in, not as series (issue 29); read from files (small by
    the slice), they are in the raw telemetry and folded by ``build_frame``."""
    if sources.openmetrics is not None:
        paths = telemetry.telemetry_files(sources.openmetrics, start, end)
        report.sources["telemetry"] = f"openmetrics {sources.openmetrics} ({len(paths)} files)"
        if isinstance(sources.raw, AdapterError):
            raise sources.raw
        return sources.raw or telemetry.from_openmetrics(paths, catalogue, start, end), None
    step = max(catalogue.scrape_interval, float(settings.SECURITY_TELEMETRY_MIN_STEP),
               (end - start) / 2000)
    grid = Grid.over(start, end, step)
    if sources.prometheus is None and cluster_stores.has_several(cluster):
        read = telemetry_stores.from_stores(cluster, catalogue, start, end, step, grid)
        report.sources["telemetry"] = f"stores {read.asked}"
        for note in read.coverage.notes():  # its nodes not checked: never clean
            report.fail(note)
        return read.raw, read.fold
    client = sources.prometheus or cluster_services.prometheus_for(cluster)
    if client is None:
        report.sources["telemetry"] = "skipped: no Prometheus URL and no telemetry files"
        report.skip("telemetry: no Prometheus URL and no telemetry files")
        return None, None
    report.sources["telemetry"] = f"prometheus {client.base_url}"
    fold = GpuFold(catalogue, grid)
    return telemetry.from_prometheus(client, catalogue, start, end, step, fold.add), fold


def read_ahead(cluster: Cluster, slices: list[tuple[datetime, datetime]],
               sources: Sources) -> Iterator[telemetry.RawTelemetry | AdapterError | None]:
    """Each slice's telemetry files, read in a forked child (apps/core/batch.py) while the
    caller detects the slice before: for ``Sources.raw``. Parsing the files is most of a
    backfill's time and needs no database; the child reads the window ``_inputs`` asks for
    (the slice and its look-back). Nothing to read ahead: None per slice."""
    if sources.openmetrics is None or len(slices) < 2:
        yield from (None for _ in slices)
        return
    folder, catalogue = sources.openmetrics, catalogue_for(cluster)  # the database, here

    def produce() -> Iterator[telemetry.RawTelemetry | AdapterError]:
        parsed: dict[Path, list[Series]] = {}  # the files a slice shares with the next one
        for since, until in slices:
            start, end = _frame_start(since).timestamp(), until.timestamp()
            try:
                paths = telemetry.telemetry_files(folder, start, end)
                for old in set(parsed) - set(paths):
                    del parsed[old]
                yield telemetry.from_openmetrics(paths, catalogue, start, end, parsed)
            except AdapterError as exc:  # that slice's detection reports it, as unread
                yield exc

    yield from forked(produce, chunk=1)  # one slice ahead: the pipe blocks the child


def _bindings(cluster: Cluster, start: datetime, until: datetime) -> tuple[
        dict[Any, list[tuple[float, float, str]]], set[int]]:
    from apps.analysis.timeseries import GpuKey

    held: dict[Any, list[tuple[float, float, str]]] = defaultdict(list)
    jobs: set[int] = set()
    rows = JobGpu.objects.filter(node__cluster=cluster, start__lt=until) \
        .filter(Q(end__isnull=True) | Q(end__gt=start)).select_related("node", "job")
    for g in rows.iterator(chunk_size=5000):
        end = g.end.timestamp() if g.end else math.inf
        held[GpuKey(g.node.name, g.gpu_index)].append((g.start.timestamp(), end,
                                                       str(g.job.job_id)))
        jobs.add(g.job.job_id)
    return held, jobs


def _job_texts(cluster: Cluster, since: datetime, until: datetime, sources: Sources,
               report: RunReport) -> tuple[list[JobText], list[ScriptScan]]:
    # A job synced late is still scanned: look back a week for jobs not scanned yet.
    oldest = min(since, until - timedelta(days=settings.SECURITY_SCRIPT_LOOKBACK_DAYS))
    jobs = Job.objects.filter(cluster=cluster, submit_time__gt=oldest, submit_time__lte=until)
    if not sources.rescan_scripts:
        jobs = jobs.filter(script_scan__isnull=True)
    limit = settings.SECURITY_SCRIPT_BATCH if sources.script_limit == -1 else sources.script_limit
    ordered = jobs.select_related("team").order_by("submit_time")
    batch = list(ordered[:limit] if limit is not None else ordered)
    if not batch:
        report.sources["job scripts"] = "no new jobs"
        return [], []
    if sources.scripts is None and sources.slurm is None and \
            cluster.slurm_backend == Cluster.SlurmBackend.NONE:
        report.sources["job scripts"] = "skipped: no Slurm backend and no scripts folder"
        report.skip("job scripts: no Slurm backend and no scripts folder")
        return [], []
    try:
        scripts = _fetch_scripts(cluster, batch, sources, report)
    except AdapterError as exc:
        report.sources["job scripts"] = f"failed: {exc}"
        report.fail(f"job scripts: {exc}")
        return [], []
    texts, scans = [], []
    for job in batch:
        found = scripts.get(job.job_id, [])
        texts += [JobText(job.job_id, job.user_name, job.team.slug if job.team else job.account,
                          source, text, job.submit_time.timestamp()) for source, text in found]
        scans.append(ScriptScan(job=job, had_script=bool(found)))
    return texts, scans


def _fetch_scripts(cluster: Cluster, jobs: list[Job], sources: Sources,
                   report: RunReport) -> dict[int, list[tuple[str, str]]]:
    if sources.scripts is not None:
        saved = saved_scripts.read_folder(sources.scripts)
        found: dict[int, list[tuple[str, str]]] = {
            job.job_id: saved.texts(job.job_id, job.display_id) for job in jobs}
        report.sources["job scripts"] = (f"folder {sources.scripts} ("
                                         f"{sum(1 for f in found.values() if f)} of {len(jobs)} "
                                         f"jobs had a script or environment)")
        for problem in saved.problems:
            report.skip(f"job scripts: {problem}")
        return found
    client = sources.slurm
    if client is None:
        client = cluster_services.client_for(cluster)
    ids = [j.job_id for j in jobs]
    stored = client.job_scripts(ids)
    try:
        envs = client.job_environments(ids)
        had = f"{len(envs)} an environment"
    except AdapterError as exc:  # the scripts still count: say what was not read
        envs, had = {}, f"environments not read: {exc}"
        report.fail(f"job environments: {exc}")
    report.sources["job scripts"] = (f"slurm ({len(stored)} of {len(jobs)} jobs had a "
                                     f"script, {had})")
    found = {}
    for job in jobs:
        for source, texts in (("batch script", stored), ("environment", envs)):
            if job.display_id in texts:
                found.setdefault(job.job_id, []).append((source,
                                                         texts[job.display_id][:MAX_TEXT]))
    return found


def _ssh(cluster: Cluster, since: datetime, until: datetime,
         report: RunReport) -> list[Any]:
    # Denial bursts may start before the window: read an hour more.
    rows = SshLogEvent.objects.filter(cluster=cluster, at__gt=since - timedelta(hours=1),
                                      at__lte=until)
    records = [SshRecord(r.at.timestamp(), r.host, r.kind, r.pid, r.user_name, r.source or "",
                         r.method) for r in rows.iterator(chunk_size=5000)]
    report.sources["sshd logs"] = f"{len(records)} events" if records else "none in window"
    return events(records)


def _probes(cluster: Cluster, since: datetime, until: datetime,
            report: RunReport) -> list[ProbeResult]:
    rows = list(ServiceProbe.objects.filter(cluster=cluster, observed_at__gt=since,
                                            observed_at__lte=until))
    teams: dict[int | None, str | None] = dict(  # probes without a job look up None
        Job.objects.filter(cluster=cluster, job_id__in={r.job_id_raw for r in rows})
        .values_list("job_id", "team__slug"))
    report.sources["service probes"] = f"{len(rows)} probes" if rows else "none in window"
    return [ProbeResult(r.observed_at.timestamp(), r.node, r.port, r.status, r.auth_required,
                        r.service, r.url, r.job_id_raw, r.user_name,
                        teams.get(r.job_id_raw) or "") for r in rows]


def _software(cluster: Cluster, report: RunReport) -> tuple[list[NodeSoftware], list[Any]]:
    rows = NodeInventory.objects.filter(cluster=cluster)
    software = [NodeSoftware(r.node, r.collected_at.timestamp(),
                             {str(k): str(v) for k, v in (r.software or {}).items()})
                for r in rows]
    report.sources["node inventory"] = f"{len(software)} nodes" if software else "none"
    return software, [a.as_record() for a in Advisory.objects.filter(enabled=True)]


def _user_teams(cluster: Cluster, users: Iterable[str]) -> dict[str, str]:
    """Slurm user -> team: the team of their latest job here, else their one team."""
    from apps.accounts.models import Membership
    from apps.accounts.services import portal_users_by_slurm_name

    wanted = {u for u in users if u}
    teams: dict[str, str] = {}
    for name, slug, account in (Job.objects.filter(cluster=cluster, user_name__in=wanted)
                                .order_by("user_name", "-submit_time")
                                .values_list("user_name", "team__slug", "account")):
        teams.setdefault(name, slug or account)
    portal = portal_users_by_slurm_name(wanted - teams.keys())
    for name, user_id in portal.items():
        slugs = list(Membership.objects.filter(user_id=user_id).values_list("team__slug",
                                                                           flat=True)[:2])
        if len(slugs) == 1:
            teams[name] = slugs[0]
    return teams


def _with_queries(cluster: Cluster, hits: list[Hit]) -> list[Hit]:
    """Telemetry findings carry the PromQL that shows what the rule saw (admins only)."""
    try:
        catalogue = catalogue_for(cluster)
    except AdapterError:
        return hits
    out = []
    for hit in hits:
        queries = telemetry.evidence_queries(catalogue, hit.rule, hit.node, hit.gpu)
        out.append(replace(hit, evidence={**hit.evidence, "queries": queries}) if queries
                   else hit)
    return out


# --- Rules -----------------------------------------------------------------------------------


def _run_rules(inputs: Inputs, configs: dict[str, RuleConfig], allow: Allow,
               report: RunReport) -> list[Hit]:
    hits: list[Hit] = []
    for key, cfg in configs.items():
        if not cfg.enabled:
            continue
        try:
            outcome = security_rules.run(key, inputs, cfg, allow)
        except Exception as exc:  # a broken rule must not stop the others
            log.exception("security rule %s failed", key)
            report.fail(f"rule {key} failed: {type(exc).__name__}: {exc}")
            continue
        report.hits[key] = len(outcome.hits)
        hits.extend(outcome.hits)
        for message in outcome.skipped:
            report.skip(f"{key}: {message}")
    return hits
