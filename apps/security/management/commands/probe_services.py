"""``manage.py probe_services --cluster NAME``: GET the allow-listed service ports of the
nodes running jobs hold (opt-in: ``SECURITY_PROBE_ENABLED=1``); the next detection run
judges the answers (rule ``exposed_service``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters.models import Cluster
from apps.security.probing import ProbeDisabled, probe_cluster


class Command(BaseCommand):
    help = "Probe running jobs' nodes for services that answer without authentication."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True)

    def handle(self, *args: Any, **opts: Any) -> None:
        cluster = Cluster.objects.filter(name=opts["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {opts['cluster']!r}")
        try:
            stats = probe_cluster(cluster)
        except ProbeDisabled as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"{cluster.name}: {stats}")
