"""``manage.py sync_cluster NAME|--all [--only jobs,queue,nodes,shares,limits,labels]``: the
periodic Slurm syncs, run now and in this process (backfills, debugging, cron-only sites)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from apps.clusters import labels, sync, sync_limits
from apps.clusters.models import Cluster
from apps.core.errors import AdapterError

PARTS = ("jobs", "queue", "nodes", "shares", "limits", "labels")


class Command(BaseCommand):
    help = ("Sync job records, queue, nodes, fairshare, reservations and QOS from Slurm "
            "(same code as the tasks).")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("name", nargs="?", help="cluster name")
        parser.add_argument("--all", action="store_true", help="every cluster with a backend")
        parser.add_argument("--only", default=",".join(PARTS),
                            help=f"comma-separated parts to run (default: {','.join(PARTS)})")

    def handle(self, *args: Any, **options: Any) -> None:
        parts = [p.strip() for p in options["only"].split(",") if p.strip()]
        if bad := [p for p in parts if p not in PARTS]:
            raise CommandError(f"unknown part(s) {', '.join(bad)}; choose from {', '.join(PARTS)}")
        failed = 0
        for cluster in self._clusters(options["name"], options["all"]):
            for part in parts:
                failed += self._run(cluster, part)
        if failed:
            raise CommandError(f"{failed} part(s) failed", returncode=1)

    def _clusters(self, name: str | None, every: bool) -> list[Cluster]:
        if every == bool(name):
            raise CommandError("give a cluster name or --all (not both)")
        if every:
            return list(Cluster.objects.exclude(slurm_backend=Cluster.SlurmBackend.NONE))
        try:
            return [Cluster.objects.get(name=name)]
        except Cluster.DoesNotExist:
            raise CommandError(f"no cluster named {name!r}") from None

    def _run(self, cluster: Cluster, part: str) -> int:
        try:
            stats = self._call(cluster, part)
        except AdapterError as exc:
            self.stderr.write(f"{cluster.name} {part}: FAILED: {exc}")
            return 1
        line = ", ".join(f"{k} {v}" for k, v in stats.items()
                         if k not in ("error_lines", "warnings"))
        self.stdout.write(f"{cluster.name} {part}: {line}")
        for message in [*stats.get("error_lines", []), *stats.get("warnings", [])]:
            self.stdout.write(f"  {message}")
        return 1 if stats.get("errors") or stats.get("import_errors") else 0

    @staticmethod
    def _call(cluster: Cluster, part: str) -> dict[str, Any]:
        if part == "jobs":
            return sync.sync_cluster(cluster).stats()
        if part == "queue":
            return sync.sync_queue(cluster).stats()
        if part == "nodes":
            return sync.sync_nodes(cluster)
        if part == "shares":
            return sync.sync_shares(cluster)
        if part == "limits":
            return sync_limits.sync_limits(cluster)
        return labels.label_jobs(cluster)
