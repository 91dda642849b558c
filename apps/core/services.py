"""Housekeeping services for the core app; each run is recorded as a TaskRun (its own kind)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from apps.core.models import TaskRun
from apps.core.runs import tracked_run


def prune_task_runs(keep_days: int) -> int:
    """Delete finished run records older than ``keep_days``. Returns how many went."""
    with tracked_run("prune_task_runs", target=f"older than {keep_days} days") as run:
        cutoff = timezone.now() - timedelta(days=keep_days)
        finished = [TaskRun.Status.SUCCEEDED, TaskRun.Status.PARTIAL, TaskRun.Status.FAILED]
        deleted, _ = TaskRun.objects.filter(created_at__lt=cutoff, status__in=finished).delete()
        run.stats["deleted"] = deleted
    return deleted


def sweep_stale_runs(older_than: timedelta, now: datetime | None = None) -> int:
    """Mark failed every run still "running" after ``older_than``; returns how many.

    A run whose process died with its database (PostgreSQL stopped mid-import, a worker
    killed) could not record its end, so its row says running forever. ``older_than``
    must exceed the longest legitimate run (``TASK_RUN_STALE_MINUTES``, well above
    Celery's time limits). One conditional UPDATE: safe to run twice or concurrently.
    """
    now = now or timezone.now()  # before this run's own row, which must not sweep itself
    cutoff = now - older_than
    minutes = int(older_than.total_seconds() // 60)
    with tracked_run("sweep_stale_runs", target=f"older than {minutes} min") as run:
        closed = TaskRun.objects.filter(
            status=TaskRun.Status.RUNNING, started_at__lt=cutoff).update(
            status=TaskRun.Status.FAILED, finished_at=now,
            error=f"abandoned: still running after {minutes} minutes, so its process died "
                  "before it could record an outcome (database or worker stopped); "
                  "closed by sweep_stale_runs")
        run.stats["closed"] = closed
    return closed
