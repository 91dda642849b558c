"""``manage.py jobstats [CLUSTER] JOBID``: a job's statistics as text, like Princeton's jobstats.

    manage.py jobstats demo 1020
    manage.py jobstats 1020 --cluster demo
    manage.py jobstats 1007_3            # a job id unique across clusters needs no cluster
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.jobs import jobstats


class Command(BaseCommand):
    help = "Print a job's efficiency, straggler verdict, trace phases and diagnosis."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ids", nargs="+", metavar="[CLUSTER] JOBID")
        parser.add_argument("--cluster", help="cluster name (instead of the first argument)")

    def handle(self, *args: Any, **opts: Any) -> None:
        ids = opts["ids"]
        if len(ids) > 2 or (len(ids) == 2 and opts["cluster"]):
            raise CommandError("give CLUSTER JOBID, or JOBID with --cluster")
        cluster, job_id = (ids[0], ids[1]) if len(ids) == 2 else (opts["cluster"], ids[0])
        jobs = list(jobstats.jobs_named(job_id, cluster)[:10])
        if not jobs:
            where = f" on cluster {cluster!r}" if cluster else ""
            raise CommandError(f"no job {job_id}{where}")
        if len(jobs) > 1:
            names = ", ".join(sorted({j.cluster.name for j in jobs}))
            raise CommandError(f"job {job_id} exists on several clusters ({names}): "
                               f"give the cluster")
        self.stdout.write(jobstats.report(jobs[0]), ending="")
