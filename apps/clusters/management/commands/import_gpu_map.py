"""``manage.py import_gpu_map PATH|- --cluster NAME``: the prolog's GPU history into JobGpu rows."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters import sync
from apps.clusters.models import Cluster
from apps.core.runs import tracked_run


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
        with tracked_run("slurm.import_gpu_map", cluster=cluster, target=opts["path"]) as run:
            if opts["path"] == "-":
                run.stats = sync.import_gpu_map(cluster, sys.stdin)
            else:
                try:
                    with Path(opts["path"]).open(encoding="utf-8", errors="replace") as lines:
                        run.stats = sync.import_gpu_map(cluster, lines)
                except OSError as exc:
                    raise CommandError(f"cannot read {opts['path']}: {exc}") from exc
        stats = run.stats
        self.stdout.write(f"{stats['intervals']} GPU intervals ({stats['created']} new), "
                          f"{stats['unknown_jobs']} for unknown jobs, "
                          f"{stats['problem_count']} unreadable lines")
        for problem in stats["problems"]:
            self.stderr.write(problem)
