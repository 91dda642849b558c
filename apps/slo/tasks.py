"""Celery tasks of SLOs: thin, one service call (twin: ``manage.py evaluate_slos``)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from apps.core.retries import RETRY_DB
from apps.slo import services


@shared_task(**RETRY_DB)  # time limits: settings.TASK_KINDS
def evaluate_slos() -> dict[str, Any]:
    """Beat's entry point: scorecards, snapshots, then breach and fast-burn notifications
    (deduplicated: an episode is told once, however often this runs)."""
    return services.run_evaluation().stats()
