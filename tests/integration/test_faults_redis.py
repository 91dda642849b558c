"""Redis, the Celery broker, killed for real in the middle of work, then restarted.

A private redis-server (tests/integration/redis_server.py: free port, append-only file
fsynced on every write) and a real Celery worker thread consuming from it:

1. While Redis is dead the pages keep serving 200, the job page included: its refresh
   cannot be queued, so it says so, releases its claim and shows what is stored. Once
   Redis is back the next view queues the refresh, and the worker runs it against the
   cluster's telemetry store, Prometheus or VictoriaMetrics (the ``store`` fixture; issue
   29), storing the job's known figures.
2. A task the worker is processing when Redis dies cannot be acknowledged: with acks_late
   it is held in Redis' ``unacked`` set until it ends, its ack fails against the dead
   broker, and after the restart (the append-only file brings the set back) the
   visibility timeout hands it out again. The worker runs it a second time and, the task
   being idempotent, the outcome is the same and every TaskRun succeeded. (With the
   production visibility timeout of 3600 s the second delivery would come an hour later;
   the test shortens it, and fails if no second delivery comes.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker
from celery.signals import task_prerun
from django.db import OperationalError
from django.test import Client
from django.utils import timezone

from apps.core import tasks as core_tasks
from apps.core.models import TaskRun
from apps.jobs.models import JobMetrics
from portal.celery import app
from tests.conftest import make_job
from tests.integration import prom
from tests.integration import telemetry_data as data
from tests.integration.redis_server import PrivateRedis
from tests.integration.services import require

pytestmark = [pytest.mark.integration("redis"), pytest.mark.django_db(transaction=True)]

QUEUES = ["analysis", "sync", "celery"]
# Short enough for a test to see an unacknowledged task handed out again; production
# keeps STYLE.md's 3600 s (longer than any task).
VISIBILITY_TIMEOUT = 4


@pytest.fixture
def broker(tmp_path) -> Iterator[PrivateRedis]:
    require(PrivateRedis.available(), "redis", "apt-get install redis-server "
            "(or ./deploy/dev/services.sh up)")
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    saved = {k: app.conf[k] for k in ("broker_url", "task_always_eager",
                                      "broker_transport_options")}
    app.conf.update(broker_url=server.url, task_always_eager=False, broker_transport_options={
        "visibility_timeout": VISIBILITY_TIMEOUT, "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1})
    _drop_cached_connections()
    try:
        yield server
    finally:
        server.kill()
        app.conf.update(saved)
        _drop_cached_connections()


def _drop_cached_connections() -> None:
    app._pool = None
    app.amqp._producer_pool = None


@pytest.fixture
def worker(broker) -> Callable[[], Any]:
    """``with worker():`` runs a real worker (in this process) on the private broker."""

    def _start() -> Any:
        # Solo pool: the task runs on the worker's event loop, so its ack is sent right
        # after it ends (while Redis is still dead in test 2) rather than whenever the
        # reconnect loop lets go. No ping check: it needs a result backend, and Beacon
        # keeps run status in TaskRun.
        return start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=20,
                            queues=QUEUES)

    return _start


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll ``check`` until it is truthy; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except OperationalError:  # SQLite locks across threads; PostgreSQL never gets here
            value = None
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")


def _queued(server: PrivateRedis) -> int:
    client = server.client()
    return sum(int(client.llen(q)) for q in QUEUES)


# --- 1. Pages while the broker is dead ------------------------------------------------------


def test_pages_keep_serving_while_redis_is_dead_and_the_refresh_queues_once_it_is_back(
        world, broker, worker, store: prom.Store):
    # A cluster with a store: without one no refresh is queued at all (issue 19).
    store.ensure_loaded(data.NAME, data.T0, "".join(data.openmetrics()))
    world.cluster.prometheus_url = store.url
    world.cluster.metric_labels = {"store": store.kind}
    world.cluster.save(update_fields=["prometheus_url", "metric_labels"])
    spec = data.JOBS[5002]  # gpu01's GPUs 4-7, efficient: a finished job with no archive yet
    job = make_job(world.cluster, spec.job_id, world.users["bob"], world.team_a,
                   submit_time=_dt(spec.start - 60), start_time=_dt(spec.start),
                   end_time=_dt(spec.end), gpus=len(spec.gpus),
                   gpu_equivalent=float(len(spec.gpus)))
    bob, staff = Client(), Client()
    bob.force_login(world.users["bob"])
    staff.force_login(world.users["staff"])
    page = f"/jobs/{job.cluster.name}/{job.job_id}/"

    broker.kill()
    response = bob.get(page)
    assert response.status_code == 200
    assert b'id="refresh-unavailable"' in response.content
    assert JobMetrics.objects.get(job=job).refresh_requested_at is None, "claim not released"
    for path in ("/", "/jobs/", f"{page}metrics/", "/team/"):
        assert bob.get(path).status_code == 200, path
    for path in ("/platform/", "/platform/runs/", "/security/"):
        assert staff.get(path).status_code == 200, path
    assert Client().get("/health/").status_code == 200  # the database is what health checks

    broker.start()
    _drop_cached_connections()  # the dead pool's sockets; Celery would reconnect on its own
    response = bob.get(page)
    assert response.status_code == 200
    assert b'id="refresh-unavailable"' not in response.content
    assert JobMetrics.objects.get(job=job).refresh_requested_at is not None
    assert _queued(broker) == 1, "the refresh should be waiting in Redis"

    with worker():
        run = wait_for("the worker to run the queued refresh", lambda: TaskRun.objects.filter(
            kind="archive_job").exclude(status=TaskRun.Status.RUNNING).first())
    # The worker ran the refresh queued while Redis was dead against the real store: the
    # job's archive holds what the data set says of it, read through the worker.
    assert run.status == TaskRun.Status.SUCCEEDED, run.error
    assert _queued(broker) == 0
    metrics = JobMetrics.objects.get(job=job)
    want = data.expected(spec)
    assert (metrics.status, metrics.binding) == (JobMetrics.Status.COMPLETE, "label")
    assert metrics.useful_hours == pytest.approx(want["gpu_hours"] * want["useful"],
                                                 abs=0.01 * want["gpu_hours"])
    assert sorted(s.gpu_index for s in metrics.job.metric_summaries.all()) == [4, 5, 6, 7]


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


# --- 2. A task in flight when the broker dies ------------------------------------------------


class _Gate:
    """Holds the first delivery of a task in ``task_prerun`` (the message is delivered and
    unacknowledged) until the test has killed Redis; later deliveries pass."""

    def __init__(self, task_name: str) -> None:
        self.task_name, self.deliveries = task_name, 0
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self, sender: Any = None, **kwargs: Any) -> None:
        if getattr(sender, "name", None) != self.task_name:
            return
        self.deliveries += 1
        if self.deliveries == 1:
            self.started.set()
            self.release.wait(timeout=120)


class _FailedAck(logging.Handler):
    """Set once the worker logs that it could not acknowledge a message (Redis is gone)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Couldn't ack"):
            self.seen.set()


@pytest.fixture
def gate() -> Iterator[_Gate]:
    hold = _Gate(core_tasks.prune_task_runs.name)
    task_prerun.connect(hold, weak=False)
    try:
        yield hold
    finally:
        hold.release.set()
        task_prerun.disconnect(hold)


@contextmanager
def watching_acks() -> Iterator[_FailedAck]:
    """Inside ``with worker()``: the worker's start-up applies settings.LOGGING, which
    clears the handlers of every ``celery.*`` logger attached before it."""
    handler, logger = _FailedAck(), logging.getLogger("celery.worker.request")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def test_a_task_in_flight_when_redis_dies_is_delivered_again_and_succeeds(
        db, broker, worker, gate):
    old = timezone.now() - timedelta(days=40)
    for _ in range(3):
        TaskRun.objects.create(kind="sync_cluster", status=TaskRun.Status.SUCCEEDED)
    TaskRun.objects.filter(kind="sync_cluster").update(created_at=old)

    with worker(), watching_acks() as failed_ack:
        core_tasks.prune_task_runs.apply_async(kwargs={"keep_days": 30})
        assert gate.started.wait(timeout=60), "the worker never received the task"
        assert broker.client().hlen("unacked") == 1, "acks_late: held unacknowledged in Redis"
        broker.kill()  # the task is delivered, running, and not acknowledged
        gate.release.set()
        # The body finishes against the database; its ack cannot reach Redis.
        first = wait_for("the first run to finish", lambda: TaskRun.objects.filter(
            kind="prune_task_runs", status=TaskRun.Status.SUCCEEDED).first())
        assert failed_ack.seen.wait(timeout=60), "the ack should have failed: Redis is dead"
        assert first.stats == {"deleted": 3}

        broker.start()  # replays the append-only file: the unacked task is still there
        wait_for("the task to be delivered again", lambda: gate.deliveries >= 2, timeout=90)
        runs = wait_for("the second run to finish", lambda: [
            r for r in TaskRun.objects.filter(kind="prune_task_runs")
            if r.status != TaskRun.Status.RUNNING] if TaskRun.objects.filter(
                kind="prune_task_runs").exclude(status=TaskRun.Status.RUNNING).count() >= 2
            else None)
        wait_for("Redis to forget the acknowledged task", lambda: not (
            broker.client().hlen("unacked") or _queued(broker)), timeout=30)

    assert all(r.status == TaskRun.Status.SUCCEEDED for r in runs), [r.status for r in runs]
    assert sorted(r.stats["deleted"] for r in runs) == [0, 3]  # idempotent: nothing twice
    assert not TaskRun.objects.filter(kind="sync_cluster").exists()
    assert not TaskRun.objects.filter(status=TaskRun.Status.RUNNING).exists()
