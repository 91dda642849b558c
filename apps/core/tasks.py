"""Periodic housekeeping. Thin tasks: one service call each (the service records the run)."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task

from apps.core import services
from apps.core.retries import RETRY_DB


@shared_task(**RETRY_DB)
def prune_task_runs(keep_days: int = 90) -> int:
    """Keep the run history bounded; safe to run twice (a second run deletes nothing)."""
    return services.prune_task_runs(keep_days)


@shared_task(**RETRY_DB)
def sweep_stale_runs(older_than_minutes: int = 120) -> int:
    """Close runs whose process died mid-run (twin: ``manage.py sweep_task_runs``)."""
    return services.sweep_stale_runs(timedelta(minutes=older_than_minutes))
