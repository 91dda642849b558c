"""Celery tasks of guardrails: thin, one service call (twins: ``manage.py check_guardrails``,
``manage.py send_digests``)."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.utils import timezone

from apps.core.retries import RETRY_DB
from apps.guardrails import services, sizing


@shared_task(**RETRY_DB)  # time limits: settings.TASK_KINDS
def check_running_jobs() -> dict[str, Any]:
    """Beat: every running GPU job's live view, its alerts, the idle-job policy, the sends."""
    return services.run_checks()


@shared_task(**RETRY_DB)  # time limits: settings.TASK_KINDS
def send_digests() -> dict[str, Any]:
    """Beat: last week's right-sizing digests, once per user, lead and week."""
    return sizing.send_digests(timezone.now())
