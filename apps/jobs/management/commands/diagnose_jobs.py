"""``manage.py diagnose_jobs``: run the diagnosis rules again (after editing them).

    manage.py diagnose_jobs --cluster NAME JOBID [JOBID ...]
    manage.py diagnose_jobs --since 7          # every job that ended in the last 7 days
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from apps.jobs import services
from apps.jobs.models import Job


class Command(BaseCommand):
    help = "Evaluate the diagnosis rules on stored job metrics and traces again."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job_ids", nargs="*", type=int, help="Slurm JobIDRaw values")
        parser.add_argument("--cluster", help="cluster name (with job ids)")
        parser.add_argument("--since", type=int, help="jobs that ended in the last N days")

    def handle(self, *args: Any, **opts: Any) -> None:
        jobs = _jobs(opts)
        stats = services.diagnose_again(jobs)
        self.stdout.write(f"{stats['jobs']} job(s) diagnosed: {stats['findings']} finding(s)")


def _jobs(opts: dict[str, Any]) -> Any:
    if opts["since"] is not None:
        since = timezone.now() - timedelta(days=opts["since"])
        return Job.objects.filter(metrics__isnull=False, end_time__gte=since) \
            .select_related("cluster")
    if not opts["cluster"] or not opts["job_ids"]:
        raise CommandError("give --cluster NAME and job ids, or --since DAYS")
    jobs = Job.objects.filter(cluster__name=opts["cluster"], job_id__in=opts["job_ids"])
    if jobs.count() != len(set(opts["job_ids"])):
        found = set(jobs.values_list("job_id", flat=True))
        missing = ", ".join(str(j) for j in sorted(set(opts["job_ids"]) - found))
        raise CommandError(f"no such job(s) on {opts['cluster']}: {missing}")
    return jobs.select_related("cluster")
