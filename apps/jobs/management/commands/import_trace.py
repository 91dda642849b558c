"""``manage.py import_trace CLUSTER JOB_ID PATH [PATH ...]``: store a job's trace analysis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q

from apps.analysis.phases import TraceAnalysisError
from apps.core.errors import AdapterError
from apps.jobs.models import Job
from apps.jobs.services import import_trace


class Command(BaseCommand):
    help = ("Analyse a job's PyTorch profiler traces (folders of per-rank files, or files) "
            "and store the result on the job; importing the same files again updates it.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster", help="cluster name")
        parser.add_argument("job_id", help="Slurm job id (raw id or as displayed, e.g. 4_2)")
        parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")

    def handle(self, *args: Any, **options: Any) -> None:
        job = _job(options["cluster"], options["job_id"])
        try:
            trace_run = import_trace(job, options["paths"])
        except (AdapterError, TraceAnalysisError) as exc:
            raise CommandError(str(exc)) from exc
        for warning in trace_run.warnings:
            self.stderr.write(f"warning: {warning}")
        straggler = (f"rank {trace_run.straggler_rank} ({trace_run.straggler_phase})"
                     if trace_run.straggler_rank is not None else "none")
        self.stdout.write(f"trace analysis #{trace_run.pk} stored for job {job}: "
                          f"{trace_run.world_size} ranks, {trace_run.steps} steps, "
                          f"straggler {straggler}")


def _job(cluster: str, job_id: str) -> Job:
    match = Q(display_id=job_id)
    if job_id.isdigit():
        match |= Q(job_id=int(job_id))
    job = Job.objects.filter(match, cluster__name=cluster).select_related("cluster").first()
    if job is None:
        raise CommandError(f"no job {job_id} on cluster {cluster!r} (sync or import it first)")
    return job
