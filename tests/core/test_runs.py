"""TaskRun records: tracked_run marks success and failure; pruning is idempotent."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.core import tasks
from apps.core.models import TaskRun
from apps.core.runs import tracked_run

pytestmark = pytest.mark.django_db


def test_a_successful_run_is_recorded_with_its_stats():
    with tracked_run("sync", target="demo") as run:
        run.stats["jobs"] = 3
    run.refresh_from_db()
    assert run.status == TaskRun.Status.SUCCEEDED
    assert run.stats == {"jobs": 3}
    assert run.finished_at >= run.started_at


def test_a_failed_run_keeps_the_error_and_reraises():
    with pytest.raises(RuntimeError, match="slurmctld down"), tracked_run("sync") as run:
        run.stats["jobs"] = 1
        raise RuntimeError("slurmctld down")
    run.refresh_from_db()
    assert run.status == TaskRun.Status.FAILED
    assert run.error.startswith("RuntimeError: slurmctld down")
    assert run.stats == {"jobs": 1}


def test_pruning_deletes_only_old_finished_runs_and_twice_is_harmless():
    old = timezone.now() - timedelta(days=200)
    for status in (TaskRun.Status.SUCCEEDED, TaskRun.Status.FAILED, TaskRun.Status.RUNNING):
        TaskRun.objects.filter(pk=TaskRun.objects.create(kind="x", status=status).pk
                               ).update(created_at=old)
    TaskRun.objects.create(kind="recent", status=TaskRun.Status.SUCCEEDED)
    assert tasks.prune_task_runs.delay(keep_days=90).get() == 2
    assert tasks.prune_task_runs.delay(keep_days=90).get() == 0
    left = set(TaskRun.objects.values_list("kind", "status"))
    assert ("x", "running") in left and ("recent", "succeeded") in left


def test_responses_say_how_long_django_took(client):
    timing = client.get("/health/")["Server-Timing"]
    assert timing.startswith("app;dur=") and float(timing.split("=")[1]) >= 0


# --- Runs whose process died ----------------------------------------------------------------


def _running(started_minutes_ago: int) -> TaskRun:
    return TaskRun.objects.create(kind="slurm.import_sacct", status=TaskRun.Status.RUNNING,
                                  started_at=timezone.now()
                                  - timedelta(minutes=started_minutes_ago))


def test_the_sweep_closes_runs_left_running_and_only_those():
    dead, alive = _running(300), _running(5)
    done = TaskRun.objects.create(kind="sync", status=TaskRun.Status.SUCCEEDED,
                                  started_at=timezone.now() - timedelta(days=1))
    assert tasks.sweep_stale_runs.delay(older_than_minutes=120).get() == 1
    dead.refresh_from_db(), alive.refresh_from_db(), done.refresh_from_db()
    assert dead.status == TaskRun.Status.FAILED and dead.finished_at is not None
    assert "abandoned" in dead.error
    assert alive.status == TaskRun.Status.RUNNING
    assert done.status == TaskRun.Status.SUCCEEDED
    assert tasks.sweep_stale_runs.delay(older_than_minutes=120).get() == 0  # idempotent


def test_the_sweep_command_with_zero_minutes_does_not_close_itself():
    from io import StringIO

    from django.core.management import call_command

    dead = _running(1)
    out = StringIO()
    call_command("sweep_task_runs", "--older-than-minutes", "0", stdout=out)
    assert "closed 1 abandoned run(s)" in out.getvalue()
    dead.refresh_from_db()
    assert dead.status == TaskRun.Status.FAILED
    sweep = TaskRun.objects.get(kind="sweep_stale_runs")
    assert sweep.status == TaskRun.Status.SUCCEEDED and sweep.stats == {"closed": 1}


def test_the_sweep_is_on_the_beat_schedule():
    from django.conf import settings

    entry = settings.CELERY_BEAT_SCHEDULE["sweep-stale-runs"]
    assert entry["task"] == tasks.sweep_stale_runs.name
    assert entry["kwargs"] == {"older_than_minutes": settings.TASK_RUN_STALE_MINUTES}


# --- Retries ---------------------------------------------------------------------------------


def test_every_beacon_task_retries_when_the_database_drops():
    from django.db import InterfaceError, OperationalError

    from portal.celery import app

    app.loader.import_default_modules()
    beacon = {name: task for name, task in app.tasks.items() if name.startswith("apps.")}
    assert len(beacon) >= 15, sorted(beacon)
    for name, task in beacon.items():
        retried = getattr(task, "autoretry_for", ())
        assert OperationalError in retried and InterfaceError in retried, name
        assert task.retry_backoff and task.max_retries >= 5, name
