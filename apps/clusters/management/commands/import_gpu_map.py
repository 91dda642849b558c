"""``manage.py import_gpu_map PATH|- --cluster NAME``: the prolog's GPU history into JobGpu rows."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters import sync
from apps.clusters.models import Cluster


class Command(BaseCommand):
    help = ("Import the GPU history that Beacon's Slurm prolog/epilog keep with JOBMAP_LOG "
            "(which job held which GPU when), after the jobs themselves are imported.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="the log file, or - for standard input")
        parser.add_argument("--cluster", required=True)

    def handle(self, *args: Any, **opts: Any) -> None:
        cluster = Cluster.objects.filter(name=opts["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {opts['cluster']!r}")
        try:
            stats = sync.import_gpu_map_file(cluster, opts["path"])
        except OSError as exc:
            raise CommandError(f"cannot read {opts['path']}: {exc}") from exc
        self.stdout.write(f"{stats['intervals']} GPU intervals ({stats['created']} new), "
                          f"{stats['unknown_jobs']} for unknown jobs, "
                          f"{stats['problem_count']} unreadable lines")
        for problem in stats["problems"]:
            self.stderr.write(problem)
