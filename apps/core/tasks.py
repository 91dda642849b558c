"""Periodic housekeeping. Thin tasks: one service call each, recorded as a TaskRun."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from apps.core import services
from apps.core.retries import RETRY_DB
from apps.core.runs import tracked_run


@shared_task(**RETRY_DB)
def prune_task_runs(keep_days: int = 90) -> int:
    """Keep the run history bounded; safe to run twice (a second run deletes nothing)."""
    with tracked_run("prune_task_runs", target=f"older than {keep_days} days") as run:
        run.stats["deleted"] = services.prune_task_runs(keep_days)
    return int(run.stats["deleted"])


@shared_task(**RETRY_DB)
def sweep_stale_runs(older_than_minutes: int = 120) -> int:
    """Close runs whose process died mid-run (twin: ``manage.py sweep_task_runs``)."""
    now = timezone.now()  # before this run's own row, which must not sweep itself
    with tracked_run("sweep_stale_runs", target=f"older than {older_than_minutes} min") as run:
        run.stats["closed"] = services.sweep_stale_runs(timedelta(minutes=older_than_minutes),
                                                        now=now)
    return int(run.stats["closed"])
