"""``manage.py ingest_security --cluster NAME [--sshd-log ...] [--inventory ...] [--probes F]``:
load sshd logs, node inventories and probe results from files (what the API's ingest
endpoints take from collectors). Safe to repeat: duplicates are skipped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters.models import Cluster
from apps.security import ingest
from apps.security.management.commands.detect import parse_when


class Command(BaseCommand):
    help = "Ingest sshd logs, node inventories and service probe results from files."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--sshd-log", nargs="*", default=[])
        parser.add_argument("--inventory", nargs="*", default=[])
        parser.add_argument("--probes", type=Path)
        parser.add_argument("--reference", help="date for syslog lines without a year "
                                                "(ISO 8601; default now)")

    def handle(self, *args: Any, **opts: Any) -> None:
        cluster = Cluster.objects.filter(name=opts["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {opts['cluster']!r}")
        reference = parse_when(opts["reference"], "--reference") if opts["reference"] else None
        if opts["sshd_log"]:
            self._show("sshd logs", ingest.ingest_sshd_files(
                cluster, ingest.expand(opts["sshd_log"], ".log"), reference))
        if opts["inventory"]:
            self._show("inventories", ingest.ingest_inventory_files(
                cluster, ingest.expand(opts["inventory"], ".json")))
        if opts["probes"]:
            try:
                self._show("probes", ingest.ingest_probe_file(cluster, opts["probes"]))
            except ingest.IngestError as exc:
                raise CommandError(str(exc)) from exc

    def _show(self, name: str, result: ingest.IngestResult) -> None:
        self.stdout.write(f"{name}: read {result.read}, stored {result.stored}, duplicates "
                          f"{result.duplicates}, skipped {result.skipped}")
        for problem in result.problems:
            self.stdout.write(f"  {problem}")
