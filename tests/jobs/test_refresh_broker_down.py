"""A job page whose metrics want a refresh while the broker is unreachable still renders.

The broker is a loopback port with nothing listening (the state Redis leaves behind when
it dies); tests/integration/test_faults_redis.py kills a real Redis mid-operation.
"""

from __future__ import annotations

import socket

import pytest

from apps.jobs import services
from apps.jobs.models import Job, JobMetrics
from portal.celery import app
from tests.conftest import make_job


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def broker_down():
    saved = {k: app.conf[k] for k in ("broker_url", "task_always_eager")}
    app.conf.update(broker_url=f"redis://127.0.0.1:{_closed_port()}/0", task_always_eager=False)
    app._pool = None
    app.amqp._producer_pool = None
    try:
        yield
    finally:
        app.conf.update(saved)
        app._pool = None
        app.amqp._producer_pool = None


@pytest.fixture
def running_job(world) -> Job:
    world.cluster.prometheus_url = "http://127.0.0.1:9"  # configured; never reached here
    world.cluster.save()
    return make_job(world.cluster, 4242, world.users["bob"], world.team_a,
                    state=Job.State.RUNNING, end_time=None)


# Autocommit, as in a web request: the publish happens inside request_refresh.
@pytest.mark.django_db(transaction=True)
def test_it_releases_the_claim_when_the_broker_is_down(running_job, broker_down):
    assert services.request_refresh(running_job) == services.Refresh.UNAVAILABLE
    assert JobMetrics.objects.get(job=running_job).refresh_requested_at is None


@pytest.mark.django_db(transaction=True)
def test_the_job_page_says_the_refresh_could_not_be_queued(running_job, login, broker_down):
    response = login("bob").get(f"/jobs/{running_job.cluster.name}/{running_job.job_id}/")
    assert response.status_code == 200
    assert b'id="refresh-unavailable"' in response.content
    assert b"A worker is refreshing" not in response.content
    assert JobMetrics.objects.get(job=running_job).refresh_requested_at is None


def test_a_healthy_broker_shows_no_such_banner(running_job, login, monkeypatch,
                                               django_capture_on_commit_callbacks):
    from apps.jobs import tasks

    monkeypatch.setattr(tasks.archive_job, "apply_async", lambda args, **kw: None)
    with django_capture_on_commit_callbacks(execute=True):
        response = login("bob").get(f"/jobs/{running_job.cluster.name}/{running_job.job_id}/")
    assert response.status_code == 200
    assert b'id="refresh-unavailable"' not in response.content
    assert JobMetrics.objects.get(job=running_job).refresh_requested_at is not None
