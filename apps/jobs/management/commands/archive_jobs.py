"""``manage.py archive_jobs``: the command twin of the ``archive_job`` / ``archive_pending`` tasks.

    manage.py archive_jobs --cluster NAME JOBID [JOBID ...]   # these jobs, now
    manage.py archive_jobs --pending                          # every finished, unarchived job
    manage.py archive_jobs --cluster NAME --all --openmetrics DIR  # backfill every started job
    manage.py archive_jobs --cluster NAME --openmetrics PATH JOBID ...  # from telemetry files

``--openmetrics`` takes a file or a folder of per-window files (the simulator's
``telemetry/``); repeat it for several.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters.models import Cluster
from apps.core.errors import AdapterError
from apps.jobs import archive, services
from apps.jobs.models import Job


class Command(BaseCommand):
    help = "Fetch, summarise and store GPU metrics of jobs (the job archive)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job_ids", nargs="*", type=int, help="Slurm JobIDRaw values")
        parser.add_argument("--cluster", help="cluster name (with job ids)")
        parser.add_argument("--pending", action="store_true",
                            help="every finished job without a final archive")
        parser.add_argument("--openmetrics", type=Path, action="append",
                            help="read telemetry from this file or folder (repeatable)")
        parser.add_argument("--force", action="store_true", help="re-archive final jobs too")
        parser.add_argument("--all", action="store_true",
                            help="every job of --cluster that started (a backfill)")

    def handle(self, *args: Any, **opts: Any) -> None:
        jobs = self._jobs(opts)
        if opts["openmetrics"]:
            self._from_files(jobs, opts)
            return
        failed = 0
        for job in jobs:
            source = None
            try:
                metrics = services.archive_job(job, source, force=opts["force"])
            except AdapterError as exc:
                failed += 1
                self.stderr.write(f"{job.cluster.name} {job.display_id}: {exc}")
                continue
            self.stdout.write(f"{job.cluster.name} {job.display_id}: {metrics.status} "
                              f"({metrics.measure or 'no data'}) {metrics.verdict}")
        if failed:
            raise CommandError(f"{failed} of {len(jobs)} job(s) failed")

    def _from_files(self, jobs: list[Job], opts: dict[str, Any]) -> None:
        """Telemetry files: one pass over them for all jobs (``archive_many``)."""
        by_cluster: dict[int, list[Job]] = {}
        for job in jobs:
            by_cluster.setdefault(job.cluster_id, []).append(job)
        for group in by_cluster.values():
            cluster = group[0].cluster
            source = archive.OpenMetricsSource(opts["openmetrics"], archive.catalogue_for(cluster))
            try:
                done = services.archive_from_files(cluster, group, source, force=opts["force"])
            except AdapterError as exc:
                raise CommandError(str(exc)) from exc
            for metrics in done:
                self.stdout.write(f"{cluster.name} {metrics.job.display_id}: {metrics.status} "
                                  f"({metrics.measure or 'no data'}) {metrics.verdict}")

    def _jobs(self, opts: dict[str, Any]) -> list[Job]:
        if opts["pending"]:
            return list(Job.objects.filter(pk__in=archive.pending_job_pks())
                        .select_related("cluster"))
        if not opts["cluster"] or not (opts["job_ids"] or opts["all"]):
            raise CommandError("give --cluster NAME and job ids (or --all), or --pending")
        cluster = Cluster.objects.filter(name=opts["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {opts['cluster']!r}")
        if opts["all"]:
            return list(Job.objects.filter(cluster=cluster, start_time__isnull=False)
                        .select_related("cluster"))
        jobs = list(Job.objects.filter(cluster=cluster, job_id__in=opts["job_ids"])
                    .select_related("cluster"))
        missing = sorted(set(opts["job_ids"]) - {j.job_id for j in jobs})
        if missing:
            raise CommandError(f"no such job(s) on {cluster.name}: "
                               f"{', '.join(map(str, missing))}")
        return jobs
