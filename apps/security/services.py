"""Detection runs as the scheduler and the command line start them.

``run_window`` runs ``detection.detect`` over a given window, recorded as a ``TaskRun``
(kind ``security.detect``). ``run_scheduled`` is the Celery beat path: it claims the
cluster (one run at a time, a conditional UPDATE), picks a sliding window that starts at
the telemetry watermark when an outage left a gap (at most ``SECURITY_MAX_CATCHUP_HOURS``
back), runs it, and advances the watermark only when telemetry was read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from apps.clusters.models import Cluster, Partition
from apps.core.models import TaskRun
from apps.core.runs import mark_partial, tracked_run
from apps.security import ingest, notify
from apps.security.adapters import telemetry
from apps.security.detection import RunReport, Sources, detect, read_ahead
from apps.security.models import (
    AllowListEntry,
    ComponentAlias,
    DetectionState,
    IbStorageBaseline,
    QuietSchedule,
    SshAllowedSource,
)


def run_window(cluster: Cluster, since: datetime, until: datetime,
               sources: Sources | None = None, slice_hours: int = 0,
               notes: list[str] | None = None) -> RunReport:
    """One detection run over ``(since, until]``, recorded as a TaskRun.

    With ``slice_hours`` a long window (a month's backfill) is detected a slice at a time,
    so memory stays that of one slice; findings that cross a slice boundary merge, as
    they do across scheduled runs (each slice reads a look-back before it). ``notes`` (what
    an ingest before the run skipped) are recorded with the run.
    """
    if until <= since:
        raise ValueError(f"the window must end after it starts ({since} .. {until})")
    with tracked_run("security.detect", cluster=cluster,
                     target=f"{since:%Y-%m-%d %H:%M} .. {until:%Y-%m-%d %H:%M}") as run:
        report: RunReport | None = None
        slices = _slices(since, until, slice_hours)
        sources = sources or Sources()
        for (start, end), raw in zip(slices, read_ahead(cluster, slices, sources), strict=True):
            part = detect(cluster, start, end, replace(sources, raw=raw))
            report = part if report is None else report
            if part is not report:
                report.absorb(part)
        assert report is not None
        for note in notes or []:
            report.skip(note)
        run.stats = report.stats()
        mark_partial(run, report.failures)
    return report


def _slices(since: datetime, until: datetime, hours: int) -> list[tuple[datetime, datetime]]:
    if hours <= 0:
        return [(since, until)]
    step = timedelta(hours=hours)
    edges = [since]
    while edges[-1] + step < until:
        edges.append(edges[-1] + step)
    return list(zip(edges, [*edges[1:], until], strict=True))


def claim(cluster: Cluster, now: datetime) -> DetectionState | None:
    """Take the cluster's detection claim, or None when a live run holds it."""
    state, _ = DetectionState.objects.get_or_create(cluster=cluster)
    stale = now - timedelta(seconds=settings.SECURITY_CLAIM_EXPIRY)
    taken = DetectionState.objects.filter(
        Q(running_since__isnull=True) | Q(running_since__lt=stale), pk=state.pk,
    ).update(running_since=now)
    if not taken:
        return None
    state.refresh_from_db()
    return state


def scheduled_window(state: DetectionState, now: datetime) -> tuple[datetime, datetime]:
    """The sliding window, reaching back to the watermark after an outage."""
    since = now - timedelta(minutes=settings.SECURITY_DETECT_WINDOW_MINUTES)
    floor = now - timedelta(hours=settings.SECURITY_MAX_CATCHUP_HOURS)
    if state.telemetry_until is not None and state.telemetry_until < since:
        since = max(state.telemetry_until, floor)
    return since, now


def run_scheduled(cluster: Cluster, now: datetime | None = None) -> RunReport | None:
    """Claim, run the sliding window, advance the watermark, release (None: claimed
    elsewhere)."""
    now = now or timezone.now()
    state = claim(cluster, now)
    if state is None:
        return None
    try:
        since, until = scheduled_window(state, now)
        report = run_window(cluster, since, until)
        if report.telemetry_ok:
            state.telemetry_until = until
        state.last_finished_at = timezone.now()
        return report
    finally:
        state.running_since = None
        state.save(update_fields=["running_since", "telemetry_until", "last_finished_at"])


# --- When detection did not read everything --------------------------------------------------

DETECT = "security.detect"
_QUERY_TAIL = re.compile(r" \(query: .*\)$", re.S)


@dataclass(frozen=True)
class DetectionProblem:
    """The cluster's last detection run read only part of what it was asked to.

    ``telemetry``: a telemetry query (or all of telemetry) failed, so telemetry rules did
    not run; ``since`` is the end of the last run that read telemetry completely (None:
    never). ``reason`` is the first failure without its query (admins find the query and
    Prometheus's whole error on the run, ``run_id``).
    """

    cluster: str
    telemetry: bool
    since: datetime | None
    reason: str
    more: int
    run_id: int
    status: str

    @property
    def headline(self) -> str:
        """"telemetry rules have not run since 2026-12-03 14:05 UTC: <reason>"."""
        when = f"{self.since:%Y-%m-%d %H:%M} UTC" if self.since else None
        if self.telemetry:
            head = f"telemetry rules have not run since {when or 'they were set up'}"
        else:
            head = f"security detection has been incomplete since {when or 'its first run'}"
        more = f" (and {self.more} more)" if self.more else ""
        return f"{head}: {self.reason}{more}"


def detection_problem(cluster: Cluster) -> DetectionProblem | None:
    """What the banner on the Security page and the job page says, or None (all read)."""
    finished = TaskRun.objects.filter(kind=DETECT, cluster=cluster,
                                      finished_at__isnull=False).order_by("-finished_at", "-pk")
    last = finished.first()
    if last is None or last.status == TaskRun.Status.SUCCEEDED:
        return None
    failures = [str(f) for f in (last.stats or {}).get("failures") or []]
    if not failures:  # a run that raised: its error is the reason
        failures = [f"detection failed: {(last.error or 'unknown error').splitlines()[0]}"]
    telemetry = any(f.startswith("telemetry") for f in failures) or \
        last.status == TaskRun.Status.FAILED
    complete = Q(status=TaskRun.Status.SUCCEEDED)
    if telemetry:  # a partial run whose failures were elsewhere did run telemetry rules
        complete |= Q(stats__telemetry_complete=True)
    good = finished.filter(complete)
    since = good.values_list("finished_at", flat=True).first()
    first = next((f for f in failures if f.startswith("telemetry")), failures[0]) \
        if telemetry else failures[0]
    return DetectionProblem(cluster.name, telemetry, since, _QUERY_TAIL.sub("", first)[:300],
                            len(failures) - 1, last.pk, last.status)


def detection_problems(clusters: Iterable[Cluster]) -> list[DetectionProblem]:
    return [p for c in clusters if (p := detection_problem(c)) is not None]


# --- The demo -----------------------------------------------------------------------------

# The simulated site's Slurm administrator logs in to every node (apps/simulator): as a
# site's admin would, the demo allow-lists that account.
SIMULATED_ADMINS = ("slurmadm",)


def detect_simulated(cluster: Cluster, folder: Path, now: datetime) -> dict[str, Any]:
    """The demo's security step, through the paths a site uses: ingest the simulator's
    sshd logs, inventories and probe results, then detect over its whole period from its
    telemetry files (job scripts come from the cluster's files backend). Idempotent."""
    for name in SIMULATED_ADMINS:
        AllowListEntry.objects.get_or_create(
            kind=AllowListEntry.Kind.ADMIN_USER, value=name, cluster=cluster,
            defaults={"reason": "the simulated site's Slurm administrator"})
    site_examples(cluster)
    notes = []
    for label, result in _demo_inputs(cluster, folder, now):
        if result.skipped:
            notes.append(f"{label}: {result.skipped} skipped")
    files = telemetry.telemetry_files(folder / "telemetry", 0, now.timestamp()) \
        if (folder / "telemetry").is_dir() else []
    first = telemetry.file_start(files[0]) if files else None
    since = datetime.fromtimestamp(first, UTC) if first else now - timedelta(days=30)
    report = run_window(cluster, since, now, Sources(openmetrics=folder / "telemetry",
                                                      script_limit=None), 24, notes)
    r = report.recorded
    return {"findings": len(set(r.ids)), "created": r.created, "skipped": len(report.skipped)}


def site_examples(cluster: Cluster) -> None:
    """One example of each kind of site configuration, as the simulated site would set it
    (idempotent). The simulator's logins all come from 10.20.0.0/22, so listing that as the
    login nodes turns ``ssh_unexpected_source`` on without a false alarm; the baseline is
    above the simulated storage traffic and below the planted 9.5 GB/s; the quiet window is
    off (an example to enable), so the planted findings stay as they are."""
    mine = {"cluster": cluster}
    SshAllowedSource.objects.get_or_create(**mine, network="10.20.0.0/22", defaults={
        "name": "login nodes", "who": SshAllowedSource.Who.EVERYONE,
        "reason": "the simulated site's login and transfer nodes"})
    SshAllowedSource.objects.get_or_create(**mine, network="10.20.9.5/32", defaults={
        "name": "admin bastion", "who": SshAllowedSource.Who.ADMINS,
        "reason": "example: only admin users may come from the bastion"})
    QuietSchedule.objects.get_or_create(**mine, nodes="*", gpus="0", defaults={
        "repeat": QuietSchedule.Repeat.DAILY, "start_time": time(4, 0), "minutes": 5,
        "reason": "example: a daily DCGM diagnostic on GPU 0 (enable it if the site runs one)",
        "enabled": False})
    partition = Partition.objects.filter(cluster=cluster).order_by("name").first()
    where = {"partition": partition.name} if partition else {"nodes": "*"}
    IbStorageBaseline.objects.get_or_create(**mine, name="Lustre clients", defaults={
        **where, "gbytes_per_s": 4.0,
        "reason": "example: the storage traffic these nodes carry without multi-node jobs"})
    ComponentAlias.objects.get_or_create(alias="site_torch", defaults={
        "component": "pytorch", "note": "example: a name a site's own inventory might use"})


def _demo_inputs(cluster: Cluster, folder: Path,
                 now: datetime) -> list[tuple[str, ingest.IngestResult]]:
    out = [("sshd logs", ingest.ingest_sshd_files(
               cluster, ingest.expand([str(folder / "logs")], ".log"), now)),
           ("inventories", ingest.ingest_inventory_files(
               cluster, ingest.expand([str(folder / "inventory")], ".json")))]
    probes = folder / "collector" / "services.json"
    if probes.is_file():
        out.append(("probes", ingest.ingest_probe_file(cluster, probes)))
    return out


# --- Notifications, recorded (the tasks and ``manage.py security_digest`` call these) -----


def notify_findings(finding_ids: list[int]) -> int:
    """Critical findings, at once (e-mail and webhook); returns how many were told."""
    with tracked_run("security.notify", target=f"{len(finding_ids)} critical") as run:
        run.stats = {"notified": notify.notify_now(finding_ids)}
    return int(run.stats["notified"])


def send_digest() -> int:
    """Every other new finding since the last digest, in one message; returns how many.

    Recorded as a ``security.digest`` run: the next digest reports problems after this one.
    """
    with tracked_run("security.digest") as run:
        run.stats = {"notified": notify.send_digest()}
    return int(run.stats["notified"])
