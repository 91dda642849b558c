"""A real Celery worker on a real Redis broker runs tasks, retries them with backoff, and
records every attempt as a TaskRun."""

from __future__ import annotations

import os
import time

import pytest
from celery.contrib.testing.worker import start_worker
from django.db import OperationalError

from apps.core import tasks
from apps.core.models import TaskRun
from apps.jobs import tasks as job_tasks
from apps.jobs.models import JobMetrics
from portal.celery import app
from tests.clusters.test_prometheus_adapter import _free_port
from tests.integration.services import port_open, require

REDIS_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")

pytestmark = [pytest.mark.integration("redis"), pytest.mark.django_db(transaction=True)]


@pytest.fixture
def redis_worker():
    require(port_open("127.0.0.1", 6379), "redis", "./deploy/dev/services.sh up")
    saved = {k: app.conf[k] for k in ("broker_url", "task_always_eager")}
    app.conf.update(broker_url=REDIS_URL, task_always_eager=False)
    _drop_cached_connections()  # else earlier eager tests' default-broker pool is reused
    try:
        # No ping check: it needs a result backend, and Beacon keeps run status in TaskRun.
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10,
                          queues=["analysis", "sync", "celery"]) as worker:
            yield worker
    finally:
        app.conf.update(saved)
        _drop_cached_connections()


def _drop_cached_connections() -> None:
    app._pool = None
    app.amqp._producer_pool = None


def test_a_task_sent_through_redis_runs_in_the_worker_and_is_recorded(redis_worker):
    tasks.prune_task_runs.apply_async(kwargs={"keep_days": 30}, queue="analysis")
    deadline, run = time.monotonic() + 30, None
    while time.monotonic() < deadline:
        try:
            run = TaskRun.objects.filter(kind="prune_task_runs").first()
        except OperationalError:  # SQLite's shared in-memory test DB locks across threads
            run = None
        if run and run.status != TaskRun.Status.RUNNING:
            break
        time.sleep(0.2)
    assert run is not None, "the worker never ran the task"
    assert run.status == TaskRun.Status.SUCCEEDED
    assert run.stats == {"deleted": 0}


def _runs(kind: str) -> list[TaskRun]:
    try:
        return list(TaskRun.objects.filter(kind=kind).order_by("started_at", "pk"))
    except OperationalError:  # SQLite's shared in-memory test DB locks across threads
        return []


def test_archive_job_retries_with_backoff_until_it_gives_up(world, redis_worker, monkeypatch):
    """Prometheus is a closed port: each attempt fails (a TaskRun each, its attempt noted),
    Celery retries it with backoff, and after max_retries the last run is final."""
    world.cluster.prometheus_url = f"http://127.0.0.1:{_free_port()}"
    world.cluster.save()
    job = world.jobs["bob"]
    monkeypatch.setattr(job_tasks.archive_job, "max_retries", 3)  # 1 + 2 + 4 s at most
    job_tasks.archive_job.apply_async((job.pk,))
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        runs = _runs("archive_job")
        if len(runs) == 4 and all(r.status == TaskRun.Status.FAILED for r in runs):
            break
        time.sleep(0.3)
    else:
        raise AssertionError(f"saw {[(r.status, r.stats) for r in _runs('archive_job')]}")
    assert [r.stats["attempt"] for r in runs] == [1, 2, 3, 4]
    assert [r.stats["retries_left"] for r in runs] == [3, 2, 1, 0]
    assert all("cannot reach Prometheus" in r.error for r in runs)
    started = [r.started_at for r in runs]
    assert started == sorted(started)
    metrics = JobMetrics.objects.get(job=job)
    assert metrics.status == JobMetrics.Status.PENDING and not metrics.is_final
    assert "cannot reach Prometheus" in metrics.last_error and metrics.last_error_at
    assert not job.metric_summaries.exists()
