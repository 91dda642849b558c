"""Celery tasks for security: thin, ids in, one service call each.

Twins: ``manage.py detect`` (``detect_cluster``), ``manage.py security_digest``
(``send_digest``).
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from apps.clusters.models import Cluster
from apps.core.retries import RETRY, RETRY_DB, as_asked
from apps.security import services


@shared_task(**RETRY)
def detect_cluster(cluster_id: int) -> None:
    """One sliding-window detection run of a cluster (the run records itself)."""
    services.run_scheduled(Cluster.objects.get(pk=cluster_id))


@shared_task(**RETRY_DB)
def detect_all() -> int:
    """Beat's entry point: one detection task per cluster."""
    ids = list(Cluster.objects.values_list("pk", flat=True))
    for cluster_id in ids:
        detect_cluster.delay_on_commit(cluster_id)
    return len(ids)


@shared_task(bind=True, **RETRY)
def notify_findings(self: Any, finding_ids: list[int]) -> None:
    """Critical findings, at once (e-mail and webhook); a webhook's Retry-After is honoured."""
    with as_asked(self):
        services.notify_findings(finding_ids)


@shared_task(bind=True, **RETRY)
def send_digest(self: Any) -> None:
    """Every other new finding since the last digest, in one message."""
    with as_asked(self):
        services.send_digest()
