"""``manage.py split_telemetry --cluster NAME DIR --out OUT``: a simulator folder's telemetry
split into one folder per telemetry store of the cluster (``make demo-full`` fills each
store with its own part: ``apps/demo/stores.py``).

Prints one line per store: the folder, its nodes and how many samples it got.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters.models import Cluster
from apps.core.errors import AdapterError
from apps.demo.stores import split_telemetry


class Command(BaseCommand):
    help = "Split telemetry files (OpenMetrics) into one folder per telemetry store."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("folder", type=Path, help="a folder of *.om files")
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--out", type=Path, required=True,
                            help="writes OUT/<store>/ per store (its *.om files replaced)")

    def handle(self, *args: Any, **opts: Any) -> None:
        cluster = Cluster.objects.filter(name=opts["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {opts['cluster']!r}")
        try:
            parts = split_telemetry(cluster, opts["folder"], opts["out"])
        except AdapterError as exc:
            raise CommandError(str(exc)) from None
        for name, part in parts.items():
            nodes = ", ".join(sorted(part.nodes)) or "no node"
            self.stdout.write(f"{name}: {len(part.nodes)} node(s) ({nodes}), "
                              f"{part.samples} samples in {part.files} file(s) -> {part.folder}")
