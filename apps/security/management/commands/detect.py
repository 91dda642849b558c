"""``manage.py detect --cluster NAME --since ISO --until ISO [--json]``: one detection run.

The command twin of the ``detect_cluster`` Celery task, over any window (a backfill, a
replay of the simulator's month). Inputs that are not in the database can be given as
files and are ingested first: ``--sshd-log``, ``--inventory``, ``--probes``; telemetry from
``--openmetrics DIR`` instead of Prometheus, job scripts from ``--scripts DIR`` instead of
Slurm. ``--json`` prints the findings the run created or updated as a JSON list.

Exits 2 (after printing what it found) when a source it was asked to read failed: a
telemetry query Prometheus refused, Prometheus unreachable, telemetry files unreadable,
Slurm's job scripts unreadable. The run is recorded ``partial`` with the reasons.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.analysis.security_types import severity_rank
from apps.clusters.models import Cluster
from apps.security import ingest, services
from apps.security.detection import RunReport, Sources
from apps.security.findings import as_dict
from apps.security.models import Finding


def parse_when(value: str, name: str) -> datetime:
    parsed = parse_datetime(value.strip()) if value else None
    if parsed is None:
        raise CommandError(f"{name}: {value!r} is not an ISO 8601 time")
    return parsed if parsed.tzinfo else timezone.make_aware(parsed, UTC)


class Command(BaseCommand):
    help = "Run the security rules over a window and store (and print) the findings."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--since", help="window start, ISO 8601 (default: until - "
                                            "SECURITY_DETECT_WINDOW_MINUTES)")
        parser.add_argument("--until", help="window end, ISO 8601 (default: now)")
        parser.add_argument("--json", action="store_true", help="print findings as JSON")
        parser.add_argument("--openmetrics", type=Path, help="telemetry files instead of "
                                                             "Prometheus")
        parser.add_argument("--scripts", type=Path, help="saved <job id>.sh/.env files "
                                                         "instead of Slurm")
        parser.add_argument("--sshd-log", nargs="*", default=[], help="sshd logs (files or "
                                                                      "folders) to ingest")
        parser.add_argument("--inventory", nargs="*", default=[],
                            help="node inventories (JSON files or folders) to ingest")
        parser.add_argument("--probes", type=Path, help="a collector's services.json to ingest")
        parser.add_argument("--rescan-scripts", action="store_true",
                            help="scan scripts again even if an earlier run did")
        parser.add_argument("--slice-hours", type=int, default=24,
                            help="detect a long window this many hours at a time (memory); "
                                 "0: in one pass")

    def handle(self, *args: Any, **opts: Any) -> None:
        cluster = Cluster.objects.filter(name=opts["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {opts['cluster']!r}")
        until = parse_when(opts["until"], "--until") if opts["until"] else timezone.now()
        since = parse_when(opts["since"], "--since") if opts["since"] else \
            until - timedelta(minutes=settings.SECURITY_DETECT_WINDOW_MINUTES)
        if until <= since:
            raise CommandError("--until must be after --since")
        notes = self._ingest(cluster, opts, until)
        # The command reads every job script of the window; beat runs take a batch each.
        sources = Sources(opts["openmetrics"], opts["scripts"],
                          rescan_scripts=opts["rescan_scripts"], script_limit=None)
        report = services.run_window(cluster, since, until, sources, opts["slice_hours"], notes)
        if opts["json"]:
            self.stdout.write(json.dumps(_found(report), indent=1, default=str))
        else:
            self._summary(report)
        if report.failures:
            for failure in report.failures[:20]:
                self.stderr.write(f"failed: {failure}")
            raise CommandError(f"{len(report.failures)} source(s) or queries failed; the rules "
                               "that need them did not run (see above)", returncode=2)

    def _ingest(self, cluster: Cluster, opts: dict[str, Any], until: datetime) -> list[str]:
        """Load the input files given; return what they skipped, for the run's record."""
        steps = []
        if opts["sshd_log"]:
            steps.append(("sshd logs", ingest.ingest_sshd_files(
                cluster, ingest.expand(opts["sshd_log"], ".log"), reference=until)))
        if opts["inventory"]:
            steps.append(("inventories", ingest.ingest_inventory_files(
                cluster, ingest.expand(opts["inventory"], ".json"))))
        if opts["probes"]:
            try:
                steps.append(("probes", ingest.ingest_probe_file(cluster, opts["probes"])))
            except ingest.IngestError as exc:
                raise CommandError(str(exc)) from exc
        notes = []
        for name, result in steps:
            self.stderr.write(f"ingested {name}: {result.as_dict()}")
            if result.skipped:
                notes.append(f"{name}: {result.skipped} skipped ({'; '.join(result.problems[:3])})")
        return notes

    def _summary(self, report: RunReport) -> None:
        self.stdout.write(f"window {report.since.isoformat()} .. {report.until.isoformat()}")
        for name, state in report.sources.items():
            self.stdout.write(f"  {name}: {state}")
        for key, count in sorted(report.hits.items()):
            self.stdout.write(f"  {key}: {count} hit(s)")
        r = report.recorded
        self.stdout.write(f"findings: {r.created} new, {r.updated} updated, {r.reopened} "
                          f"reopened, {r.unchanged} unchanged")
        for message in report.skipped[:20]:
            self.stdout.write(f"  skipped: {message}")


def _found(report: RunReport) -> list[dict[str, Any]]:
    rows = Finding.objects.filter(pk__in=set(report.recorded.ids)) \
        .select_related("cluster", "team", "assignee")
    ordered = sorted(rows, key=lambda f: (-severity_rank(f.severity), f.first_seen, f.pk))
    return [as_dict(f) for f in ordered]
