"""The periodic tasks and their command twins call the same services (eager Celery here)."""

from __future__ import annotations

from apps.chargeback import tasks as chargeback_tasks
from apps.chargeback.models import Statement
from apps.core.models import TaskRun


def test_the_hourly_task_refreshes_this_months_drafts(world, rates, in_the_worlds_month):
    # the world's jobs ran this month (T0 is in November 2026, where the clock is put)
    drafts = chargeback_tasks.refresh_drafts()
    assert drafts == Statement.objects.filter(status="draft").count() >= 1
    assert TaskRun.objects.filter(kind="chargeback.refresh", status="succeeded").exists()
