"""``deploy/dev/demo-full.sh``: it parses, explains what runs live, stops only what it
started, and (with Prometheus and Redis here) brings a tiny simulated cluster up through the
live paths: a job refresh goes portal -> Redis -> worker -> Prometheus and back, then ``down``
leaves nothing running.

Isolation: its own data folder (SQLite), Prometheus on ``DEMO_FULL_PROM_PORT`` (else a free
port) with its own data dir, Redis db ``DEMO_FULL_REDIS_DB`` (10), a free web port.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from tests.integration.services import port_open, require

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "dev" / "demo-full.sh"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(BEACON_DATA_DIR=str(tmp / "data"), DEMO_DIR=str(tmp / "sim"),
               DEMO_RUN_DIR=str(tmp / "run"), PROM_DIR=str(tmp / "prom"),
               PROM_PORT=os.environ.get("DEMO_FULL_PROM_PORT") or str(_free_port()),
               WEB_PORT=str(_free_port()), PY=sys.executable, LOG_LEVEL="warning",
               REDIS_URL=f"redis://127.0.0.1:6379/{os.environ.get('DEMO_FULL_REDIS_DB', '10')}")
    env.pop("PROMETHEUS_URL", None)
    env.update(extra)
    return env


def _script(env: dict[str, str], *args: str, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def _manage(env: dict[str, str], *args: str, timeout: int = 300) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


# --- Without services ---------------------------------------------------------------------


def test_the_script_parses_and_says_what_runs_live():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0
    shown = _script(dict(os.environ), "help")
    assert shown.returncode == 0
    for words in ("What runs live", "What does not", "security-detect", "skip simulated",
                  "PROM_PORT", "down"):
        assert words in shown.stdout, words
    wrong = _script(dict(os.environ), "start")
    assert wrong.returncode == 2 and "demo-full.sh up" in wrong.stderr


def test_down_with_nothing_running_stops_nothing(tmp_path):
    done = _script(_env(tmp_path), "down")
    assert done.returncode == 0, done.stderr
    assert "nothing of demo-full was running" in done.stdout


def test_up_without_the_demo_data_says_what_to_run(tmp_path):
    done = _script(_env(tmp_path), "up")
    assert done.returncode == 1
    assert "no simulator output; run make demo-data first" in done.stderr
    assert not (tmp_path / "run").exists()  # refused before starting anything


# --- The bring-up -----------------------------------------------------------------------------


@pytest.mark.integration("prometheus")
@pytest.mark.integration("redis")
@pytest.mark.slow
def test_a_tiny_demo_runs_through_the_live_paths_and_stops(tmp_path):
    require(port_open("127.0.0.1", 6379), "Redis", "deploy/dev/services.sh up")
    require(subprocess.run(["which", "prometheus"], capture_output=True).returncode == 0,
            "prometheus", "deploy/dev/prometheus.sh up (installs it)")
    env = _env(tmp_path)
    db = env["REDIS_URL"].rsplit("/", 1)[1]
    subprocess.run(["redis-cli", "-n", db, "flushdb"], capture_output=True, check=True)
    _manage(env, "migrate", "--noinput", "-v0")
    _manage(env, "simulate", "--nodes", "3", "--days", "1", "--seed", "3", "--telemetry-step",
            "3600", "--out", env["DEMO_DIR"])
    _manage(env, "load_demo", env["DEMO_DIR"])
    try:
        up = _script(env, "up", timeout=180)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "1 simulated cluster(s) read Prometheus" in up.stdout
        _check_live(env, tmp_path / "data" / "beacon.sqlite3")
        again = _script(env, "up", timeout=120)  # idempotent: nothing started twice
        assert again.stdout.count("already running") == 3, again.stdout
        assert "telemetry already backfilled" in again.stdout
    finally:
        down = _script(env, "down", timeout=120)
        subprocess.run(["redis-cli", "-n", db, "flushdb"], capture_output=True, check=False)
    assert down.returncode == 0, down.stderr
    for name in ("web", "beat", "worker"):
        assert f"stopped {name}" in down.stdout
    assert not port_open("127.0.0.1", int(env["WEB_PORT"]))
    assert not port_open("127.0.0.1", int(env["PROM_PORT"]))
    assert not list((tmp_path / "run").glob("*.pid"))


def _check_live(env: dict[str, str], database: Path) -> None:
    """The portal answers; a running job's refresh (what its page asks for) is done by the
    worker from Prometheus."""
    web = f"http://127.0.0.1:{env['WEB_PORT']}/health/"
    assert _until(lambda: _get(web) == 200, 60), "the portal never answered"
    job = _manage(env, "shell", "-v0", "-c", (
        "from apps.jobs import services; from apps.jobs.models import Job\n"
        "job = Job.objects.filter(state='RUNNING', gpu_equivalent__gt=0).first()\n"
        "assert services.request_refresh(job)\nprint(job.pk)")).split()[-1]

    def refreshed() -> bool:
        with sqlite3.connect(database, timeout=10) as conn:
            row = conn.execute("SELECT source, status FROM jobs_jobmetrics WHERE job_id = ?",
                               [int(job)]).fetchone()
        return row == ("prometheus", "live")

    assert _until(refreshed, 120), "the worker did not refresh the job from Prometheus"


def _get(url: str) -> int:
    try:
        return requests.get(url, timeout=5).status_code
    except requests.RequestException:
        return 0


def _until(check, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(1)
    return False
