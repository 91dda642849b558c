"""/metrics: closed by default, opened by token or address; latency, task outcomes, sync lag."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from celery import shared_task
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from apps.clusters.models import Cluster

URL = "/metrics"


def _samples(body: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples}


def _value(body: bytes, name: str, **labels: str) -> float | None:
    return _samples(body).get((name, frozenset(labels.items())))


# --- access ------------------------------------------------------------------------------


def test_metrics_are_closed_by_default(db):
    assert Client().get(URL).status_code == 403


@pytest.mark.parametrize(("header", "status"), [
    ("Bearer scrape-me-please", 200), ("Bearer wrong", 403), ("scrape-me-please", 403),
    ("", 403),
])
def test_a_bearer_token_opens_metrics(db, settings, header, status):
    settings.METRICS_TOKEN = "scrape-me-please"
    extra = {"HTTP_AUTHORIZATION": header} if header else {}
    assert Client().get(URL, **extra).status_code == status


@pytest.mark.parametrize(("allowed", "address", "status"), [
    (["127.0.0.1"], "127.0.0.1", 200), (["127.0.0.0/8"], "127.0.0.7", 200),
    (["192.0.2.0/24"], "127.0.0.1", 403), (["::1"], "::1", 200), ([], "127.0.0.1", 403),
])
def test_an_address_allow_list_opens_metrics(db, settings, allowed, address, status):
    settings.METRICS_ALLOWED_IPS = allowed
    assert Client(REMOTE_ADDR=address).get(URL).status_code == status


# --- what they say -----------------------------------------------------------------------


@pytest.fixture
def scraper(db, settings):
    settings.METRICS_TOKEN = "t0ken"
    client = Client(HTTP_AUTHORIZATION="Bearer t0ken")
    return lambda: client.get(URL).content


def test_request_latency_is_counted_by_route_name(world, login, scraper):
    name = "beacon_http_request_duration_seconds_count"
    labels = {"route": "jobs-detail", "method": "GET", "status": "404"}
    before = _value(scraper(), name, **labels) or 0
    login("carol").get(reverse("jobs-detail", args=["testcluster", 101]))
    login("carol").get(reverse("jobs-detail", args=["testcluster", 999]))
    assert _value(scraper(), name, **labels) == before + 2
    # the raw path never becomes a label
    assert not any("/jobs/" in str(key) for key in _samples(scraper()))


@shared_task(name="tests.flaky")
def _flaky(fail: bool) -> str:
    if fail:
        raise ValueError("boom")
    return "ok"


def test_celery_outcomes_are_counted(scraper):
    name = "beacon_celery_tasks_total"
    before = {o: _value(scraper(), name, task="tests.flaky", outcome=o) or 0
              for o in ("success", "failure")}
    # throw=False: as a worker runs it (eager mode re-raises before Celery's failure
    # handling, so the embedded default counts successes only)
    _flaky.apply(args=[False], throw=False)
    _flaky.apply(args=[True], throw=False)
    _flaky.apply(args=[False], throw=False)
    after = {o: _value(scraper(), name, task="tests.flaky", outcome=o) for o in before}
    assert after == {"success": before["success"] + 2, "failure": before["failure"] + 1}


def test_sync_lag_per_syncing_cluster(db, scraper):
    with time_machine.travel("2026-11-02 09:00Z", tick=False) as clock:
        Cluster.objects.create(name="fresh", slurm_backend="cli")
        never = Cluster.objects.create(name="never", slurm_backend="rest")
        Cluster.objects.create(name="imports", slurm_backend="none")  # no sync: no lag
        clock.shift(timedelta(minutes=10))
        Cluster.objects.filter(name="fresh").update(last_sync_ok_at=timezone.now())
        clock.shift(timedelta(minutes=5))
        body = scraper()
    lag = "beacon_cluster_sync_lag_seconds"
    assert _value(body, lag, cluster="fresh") == 300
    assert _value(body, lag, cluster="never") == 900  # since it was added
    assert _value(body, lag, cluster="imports") is None
    assert _value(body, "beacon_cluster_last_sync_ok_timestamp_seconds", cluster="never") == 0
    assert never.last_sync_ok_at is None


# --- the Celery worker's own endpoint ----------------------------------------------------------


@pytest.fixture
def worker_metrics(settings):
    from apps.core.metrics import serve_worker_metrics

    settings.METRICS_TOKEN, settings.METRICS_ALLOWED_IPS = "worker-token", []
    server = serve_worker_metrics(0, "127.0.0.1")  # a free port
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def _fetch(url: str, token: str = "") -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    assert url.startswith("http://127.0.0.1:")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),  # noqa: S310
                                    timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_worker_serves_its_task_outcomes_behind_the_same_token(worker_metrics):
    assert _fetch(worker_metrics)[0] == 403
    assert _fetch(worker_metrics, "wrong")[0] == 403
    status, body = _fetch(worker_metrics, "worker-token")
    before = _value(body, "beacon_celery_tasks_total", task="tests.flaky", outcome="failure") or 0
    _flaky.apply(args=[True], throw=False)  # counted in this process, as in a worker
    status, body = _fetch(worker_metrics, "worker-token")
    assert status == 200
    assert _value(body, "beacon_celery_tasks_total", task="tests.flaky",
                  outcome="failure") == before + 1


def test_worker_start_up_serves_metrics_only_when_a_port_is_set(settings, monkeypatch):
    from apps.core import metrics

    started = []
    monkeypatch.setattr(metrics, "serve_worker_metrics", lambda *a: started.append(a))
    settings.WORKER_METRICS_PORT = 0
    metrics._serve_worker_metrics()
    assert started == []
    settings.WORKER_METRICS_PORT, settings.WORKER_METRICS_ADDRESS = 9808, "0.0.0.0"  # noqa: S104
    metrics._serve_worker_metrics()
    assert started == [(9808, "0.0.0.0")]  # noqa: S104


def test_the_worker_start_up_empties_the_multiprocess_folder(tmp_path, monkeypatch):
    from apps.core import metrics

    (tmp_path / "counter_123.db").write_bytes(b"old")
    (tmp_path / "keep.txt").write_text("not ours")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    metrics._empty_multiproc_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
