"""A real prefork Celery worker serves its children's task outcomes on WORKER_METRICS_PORT,
behind the metrics token (what docker-compose's Prometheus scrapes as job beacon-worker)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from celery import Celery

from tests.integration.redis_server import PrivateRedis, free_port
from tests.integration.services import require, stop

pytestmark = pytest.mark.integration("redis")
ROOT = Path(__file__).resolve().parents[2]


def _get(url: str, token: str = "") -> tuple[int, str]:
    assert url.startswith("http://127.0.0.1:")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),  # noqa: S310
                                    timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_worker_serves_the_outcomes_its_children_count(tmp_path):
    require(PrivateRedis.available(), "redis", "apt-get install redis-server")
    broker = PrivateRedis(tmp_path / "redis")
    broker.start()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(REDIS_URL=broker.url, WORKER_METRICS_PORT=str(port), METRICS_TOKEN="scrape",
               PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "multiproc"),
               BEACON_DATA_DIR=str(tmp_path / "data"))
    (tmp_path / "multiproc").mkdir()
    (tmp_path / "multiproc" / "counter_1.db").write_bytes(b"stale")  # a previous run's
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115
    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q",
                               "analysis", "--concurrency", "2", "--without-mingle",
                               "--without-gossip"], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if _get(url, "scrape")[0] == 200:
                    break
            except OSError:
                time.sleep(0.3)
        else:
            pytest.fail("the worker never served metrics:\n"
                        + (tmp_path / "worker.log").read_text()[-3000:])
        assert not (tmp_path / "multiproc" / "counter_1.db").exists()  # emptied at start
        assert _get(url)[0] == 403 and _get(url, "wrong")[0] == 403
        Celery(broker=broker.url, set_as_current=False).send_task(
            "apps.core.tasks.prune_task_runs", kwargs={"keep_days": 30}, queue="analysis")
        name = 'task="apps.core.tasks.prune_task_runs"'
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and name not in _get(url, "scrape")[1]:
            time.sleep(0.3)
        lines = [line for line in _get(url, "scrape")[1].splitlines()
                 if line.startswith("beacon_celery_tasks_total{") and name in line]
        # Counted in a prefork child, served by the main process. (The worker's database is
        # an unmigrated SQLite file: the task meets "no such table" and retries.)
        assert lines and all(float(line.rsplit(" ", 1)[1]) >= 1 for line in lines), lines
    finally:
        stop(worker)
        log.close()
        broker.kill()
