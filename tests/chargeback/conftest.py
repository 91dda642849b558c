"""Chargeback fixtures: archived splits for the world's jobs, and a rate card."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

import pytest

from apps.chargeback.models import Rate
from apps.jobs.models import Job, JobMetrics

NOV = date(2026, 11, 1)


def archive(job: Job, useful: float, waiting: float = 0.0, held_idle: float = 0.0,
            no_process: float = 0.0, status: str = "complete") -> JobMetrics:
    """Store a job's split as the archive would: fractions of Slurm's allocated hours."""
    hours = job.gpu_hours
    return JobMetrics.objects.create(
        job=job, status=status, measure="sm_active", allocated_gpu_hours=hours,
        useful_hours=hours * useful, waiting_hours=hours * waiting,
        held_idle_hours=hours * held_idle, no_process_hours=hours * no_process)


@pytest.fixture
def rates(db: Any) -> list[Rate]:
    return [Rate.objects.create(price=Decimal("2.0000"), valid_from=date(2026, 1, 1)),
            Rate.objects.create(price=Decimal("3.0000"), gpu_model="h100",
                                valid_from=date(2026, 1, 1))]
