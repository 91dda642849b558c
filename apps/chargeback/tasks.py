"""Celery tasks of chargeback: thin, one service call each (twin: ``manage.py chargeback``)."""

from __future__ import annotations

from celery import shared_task

from apps.chargeback import services
from apps.core.retries import RETRY_DB


@shared_task(**RETRY_DB)
def refresh_drafts() -> int:
    """Beat's entry point: rewrite the draft statements of the open months."""
    return sum(r.drafts for r in services.refresh_open_months())


@shared_task(**RETRY_DB)
def refresh_month(month: str) -> int:
    """One month's drafts (``YYYY-MM``), asked for by a page (``services.request_refresh``)."""
    return services.refresh_statements(services.parse_month(month)).drafts
