"""``manage.py collect_traces [CLUSTER ...] [--root DIR] [--rescan]``: import traces from a folder.

The twin of the periodic ``collect_traces`` task (STYLE.md §2.9): the same service,
synchronously, for backfills and cron-only sites. Layout: ``DIR/<cluster>/<job id>/<files>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters.models import Cluster
from apps.jobs import traces


class Command(BaseCommand):
    help = ("Import PyTorch profiler traces from TRACE_ROOT/<cluster>/<job id>/ (or --root): "
            "new or changed folders only; running it again imports nothing twice.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("clusters", nargs="*", metavar="CLUSTER",
                            help="cluster names (default: every cluster with a folder)")
        parser.add_argument("--root", type=Path, help="the folder (default: TRACE_ROOT)")
        parser.add_argument("--rescan", action="store_true",
                            help="look at every folder again, not only those changed since "
                                 "the last collection (stored analyses are still skipped)")

    def handle(self, *args: Any, **options: Any) -> None:
        root = options["root"] or (Path(settings.TRACE_ROOT) if settings.TRACE_ROOT else None)
        if root is None:
            raise CommandError("no folder: set TRACE_ROOT or pass --root DIR")
        if not root.is_dir():
            raise CommandError(f"{root} is not a folder")
        clusters = self._clusters(options["clusters"], root)
        if not clusters:
            self.stdout.write(f"no cluster folder under {root} (expected {root}/<cluster>/)")
        for cluster in clusters:
            # inline: a run of many files is read here group by group, as the tasks would
            stats = traces.collect_cluster(cluster, root, rescan=options["rescan"], inline=True)
            self.stdout.write(
                f"{cluster.name}: {stats.folders} trace folders, {len(stats.imported)} "
                f"imported, {stats.unchanged + stats.unchanged_since} unchanged, "
                f"{len(stats.settling)} still being written, {len(stats.failed)} failed, "
                f"{len(stats.unknown_jobs)} unknown jobs")
            for label in stats.imported:
                self.stdout.write(f"  imported {label}")
            for label, error in stats.failed.items():
                self.stderr.write(f"  failed {label}: {error}")
            for name in stats.unknown_jobs:
                self.stderr.write(f"  no job {name} on cluster {cluster.name} (sync it first)")

    def _clusters(self, names: list[str], root: Path) -> list[Cluster]:
        if not names:
            return list(Cluster.objects.filter(pk__in=traces.clusters_with_traces(root)))
        found = {c.name: c for c in Cluster.objects.filter(name__in=names)}
        missing = sorted(set(names) - set(found))
        if missing:
            raise CommandError(f"no cluster named {', '.join(missing)}")
        return [found[n] for n in names]
