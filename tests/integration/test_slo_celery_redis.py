"""A breach is told once: the beat task runs twice in a real Celery worker on a real Redis
broker, and exactly one e-mail and one webhook message go out for the breach.

The worker runs in this process (``start_worker``, as tests/integration/test_celery_redis.py
does), so Django's locmem mail outbox and a loopback webhook server see what it sends.
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker
from django.apps import apps
from django.core import mail
from django.db import OperationalError
from django.urls import reverse
from django.utils import timezone

from apps.core.models import TaskRun
from apps.slo import tasks
from apps.slo.defaults import seed
from apps.slo.models import Alert
from portal.celery import app
from tests.conftest import make_job
from tests.integration.services import port_open, require

REDIS_URL = os.environ.get("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")

pytestmark = [pytest.mark.integration("redis"), pytest.mark.django_db(transaction=True)]


class Hook(BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # http.server calls it by this name
        type(self).bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook(settings):
    Hook.bodies = []
    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.SLO_WEBHOOK_URL = f"http://127.0.0.1:{server.server_port}/hook"
    settings.WEBHOOK_ALLOW = ["127.0.0.1"]  # a loopback receiver: allowed by name (issue 27)
    yield Hook
    server.shutdown()
    server.server_close()


@pytest.fixture
def redis_worker():
    require(port_open("127.0.0.1", 6379), "redis", "./deploy/dev/services.sh up")
    saved = {k: app.conf[k] for k in ("broker_url", "task_always_eager")}
    app.conf.update(broker_url=REDIS_URL, task_always_eager=False)
    _drop_cached_connections()
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10,
                          queues=["analysis", "sync", "celery"]) as worker:
            yield worker
    finally:
        app.conf.update(saved)
        _drop_cached_connections()


def _drop_cached_connections() -> None:
    app._pool = None
    app.amqp._producer_pool = None


def _finished_runs() -> int:
    try:
        return TaskRun.objects.filter(kind="slo.evaluate").exclude(
            status=TaskRun.Status.RUNNING).count()
    except OperationalError:  # SQLite's test database locks across threads
        return -1


def _run_through_redis(expected_runs: int) -> None:
    tasks.evaluate_slos.apply_async(queue="analysis")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _finished_runs() < expected_runs:
        time.sleep(0.2)
    assert _finished_runs() == expected_runs, "the worker never ran the evaluation"


def test_a_breach_is_notified_once_through_a_real_worker(world, webhook, redis_worker):
    seed(apps)  # the default SLOs and ending rules (a transactional test starts without them)
    world.users["alice"].email = "alice@example.org"
    world.users["alice"].save()
    now = timezone.now()
    # team A: three node failures two days ago among ten jobs: 70 % against 99 %
    for i in range(10):
        start = now - timedelta(days=2, hours=3)
        make_job(world.cluster, 8000 + i, world.users["bob"], world.team_a,
                 submit_time=start, start_time=start, end_time=start + timedelta(hours=1),
                 state="NODE_FAIL" if i < 3 else "COMPLETED")
    _run_through_redis(1)
    _run_through_redis(2)  # the breach goes on: nothing more is sent
    runs = TaskRun.objects.filter(kind="slo.evaluate")
    assert {r.status for r in runs} == {TaskRun.Status.SUCCEEDED}
    breach = Alert.objects.get(kind="breach", team=world.team_a)
    assert breach.sent_at is not None and breach.channels == ["email", "webhook"]
    assert Alert.objects.count() == 1  # no fast burn: the failures are two days old
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["alice@example.org"]
    link = reverse("slo-team", args=["nlp"])
    assert link in mail.outbox[0].body
    assert len(webhook.bodies) == 1 and link in webhook.bodies[0]["text"]
    assert [r.stats["alerts_sent"] for r in runs.order_by("pk")] == [1, 0]
