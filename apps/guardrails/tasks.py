"""Celery tasks of guardrails: thin, one service call (twins: ``manage.py check_guardrails``,
``manage.py send_digests``)."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.utils import timezone

from apps.clusters.models import Cluster
from apps.core.retries import RETRY_DB
from apps.guardrails import services, sizing


@shared_task(**RETRY_DB)  # time limits: settings.TASK_KINDS
def check_running_jobs() -> dict[str, Any]:
    """Beat: every running GPU job's live view, its alerts, the idle-job policy, the sends;
    then one task per simulated cluster with live stores (as ``detect_all`` queues them)."""
    stats = services.run_checks()
    for cluster in services.simulated_clusters():
        check_simulated_cluster.delay_on_commit(cluster.pk)
    return stats


@shared_task(**RETRY_DB)  # time limits: settings.TASK_KINDS
def check_simulated_cluster(cluster_id: int) -> dict[str, Any] | None:
    """A simulated cluster's running jobs at its simulated "now" (make demo-full)."""
    return services.check_simulated(Cluster.objects.get(pk=cluster_id))


@shared_task(**RETRY_DB)  # time limits: settings.TASK_KINDS
def send_digests() -> dict[str, Any]:
    """Beat: last week's right-sizing digests, once per user, lead and week."""
    return sizing.send_digests(timezone.now())
