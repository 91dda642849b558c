"""``manage.py check_plausibility [--cluster NAME]``: check the stored job records again.

The importer checks every record it writes (docs/slurm.md §5.1); this checks the ones stored
before it did (after upgrading), or again once a cluster's nodes are synced. Implausible
records are flagged (kept out of chargeback and SLOs until an admin accepts them), flags that
no longer hold are cleared. Safe to run twice.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters.models import Cluster
from apps.jobs.plausibility import check_stored


class Command(BaseCommand):
    help = ("Check stored job records for plausibility again (more GPUs than the cluster has, "
            "an end before its start, times centuries away): flag or clear them.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", help="one cluster (default: every cluster)")

    def handle(self, *args: Any, **opts: Any) -> None:
        clusters = Cluster.objects.all()
        if opts["cluster"]:
            clusters = clusters.filter(name=opts["cluster"])
            if not clusters.exists():
                raise CommandError(f"no cluster named {opts['cluster']!r}")
        for cluster in clusters:
            stats = check_stored(cluster)
            self.stdout.write(f"{cluster.name}: {stats['checked']} checked, {stats['flagged']} "
                              f"flagged, {stats['cleared']} cleared")
