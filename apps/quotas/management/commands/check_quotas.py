"""``manage.py check_quotas CLUSTER|--all``: write due scheduled quotas, read Slurm's limits and
usage, record drift and send 80 %/100 % warnings (the periodic task's twin)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters.models import Cluster
from apps.core.errors import AdapterError
from apps.quotas import services


class Command(BaseCommand):
    help = "Check team GPU-hour quotas against Slurm: scheduled writes, drift, warnings."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster", nargs="?")
        parser.add_argument("--all", action="store_true", help="every cluster with Slurm")

    def handle(self, *args: Any, **opts: Any) -> None:
        if bool(opts["cluster"]) == opts["all"]:
            raise CommandError("give a cluster name or --all")
        clusters = (Cluster.objects.exclude(slurm_backend=Cluster.SlurmBackend.NONE)
                    if opts["all"] else Cluster.objects.filter(name=opts["cluster"]))
        if not clusters:
            raise CommandError(f"no cluster {opts['cluster']!r} with a Slurm backend")
        for cluster in clusters:
            try:
                stats = services.check_cluster(cluster)
            except AdapterError as exc:
                raise CommandError(f"{cluster.name}: {exc}") from None
            self.stdout.write(f"{cluster.name}: {stats['applied']} scheduled quotas written, "
                              f"{stats['drift']} drifted, {stats['alerts_sent']} warnings sent")
