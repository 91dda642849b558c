"""``deploy/dev/demo-full.sh``: it parses, explains what runs live, stops only what it
started, and (with Prometheus, VictoriaMetrics and Redis here) brings a tiny simulated
cluster up through the live paths with its telemetry split over two stores (issue 29):
gpu01-02 in Prometheus, the a100 partition's gpu03 in VictoriaMetrics. Job refreshes go
portal -> Redis -> worker -> each node's store and back; the archive, guardrails and
detection read both stores with nothing "not checked"; then ``down`` leaves nothing running.

Isolation: its own data folder (SQLite), Prometheus on ``DEMO_FULL_PROM_PORT`` and
VictoriaMetrics on ``DEMO_FULL_VM_PORT`` (else free ports) with their own data dirs, Redis
db ``DEMO_FULL_REDIS_DB`` (10), a free web port.
"""

from __future__ import annotations

import json
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
               VM_DIR=str(tmp / "vm"),
               VM_PORT=os.environ.get("DEMO_FULL_VM_PORT") or str(_free_port()),
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
                  "PROM_PORT", "VictoriaMetrics", "VM_PORT", "VM_PARTITIONS", "simulated",
                  "down"):
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
@pytest.mark.integration("victoriametrics")
@pytest.mark.integration("redis")
@pytest.mark.slow
def test_a_tiny_demo_runs_through_the_live_paths_and_stops(tmp_path):
    require(port_open("127.0.0.1", 6379), "Redis", "deploy/dev/services.sh up")
    for binary, script in (("prometheus", "prometheus.sh up"),
                           ("victoria-metrics", "victoria-metrics.sh install")):
        require(subprocess.run(["which", binary], capture_output=True).returncode == 0,
                binary, f"deploy/dev/{script} (installs it)")
    env = _env(tmp_path)
    db = env["REDIS_URL"].rsplit("/", 1)[1]
    subprocess.run(["redis-cli", "-n", db, "flushdb"], capture_output=True, check=True)
    _manage(env, "migrate", "--noinput", "-v0")
    # seed 8: running and finished GPU jobs on gpu01 (Prometheus) and gpu03 (VictoriaMetrics)
    _manage(env, "simulate", "--nodes", "3", "--days", "1", "--seed", "8", "--telemetry-step",
            "3600", "--out", env["DEMO_DIR"])
    _manage(env, "load_demo", env["DEMO_DIR"])
    try:
        up = _script(env, "up", timeout=180)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "1 simulated cluster(s) read Prometheus" in up.stdout
        assert "partitions a100 read VictoriaMetrics" in up.stdout
        assert "default: 2 node(s) (gpu01, gpu02)" in up.stdout, up.stdout
        assert "vm: 1 node(s) (gpu03)" in up.stdout, up.stdout
        _check_each_store_holds_its_nodes(env)
        _check_live(env, tmp_path / "data" / "beacon.sqlite3")
        _check_both_stores_read(env)
        again = _script(env, "up", timeout=120)  # idempotent: nothing started twice
        assert again.stdout.count("already running") == 3, again.stdout
        assert "telemetry already backfilled" in again.stdout
    finally:
        down = _script(env, "down", timeout=120)
        subprocess.run(["redis-cli", "-n", db, "flushdb"], capture_output=True, check=False)
    assert down.returncode == 0, down.stderr
    for name in ("web", "beat", "worker"):
        assert f"stopped {name}" in down.stdout
    for port in ("WEB_PORT", "PROM_PORT", "VM_PORT"):
        assert not port_open("127.0.0.1", int(env[port])), port
    assert not list((tmp_path / "run").glob("*.pid"))


def _hosts(url: str, at: int) -> set[str]:
    """The nodes a store has GPU samples of in the simulated day before ``at``."""
    body = requests.get(f"{url}/api/v1/query", timeout=10, params={
        "query": "group by (Hostname) (last_over_time(DCGM_FI_DEV_GPU_UTIL[1d]))",
        "time": str(at)}).json()
    return {r["metric"]["Hostname"] for r in body["data"]["result"]}


def _check_each_store_holds_its_nodes(env: dict[str, str]) -> None:
    """Each store got its own nodes' samples only: what it answers comes from it."""
    now = int(json.loads((Path(env["DEMO_DIR"]) / "cluster.json").read_text())["now"])
    assert _hosts(f"http://127.0.0.1:{env['PROM_PORT']}", now) == {"gpu01", "gpu02"}
    assert _hosts(f"http://127.0.0.1:{env['VM_PORT']}", now) == {"gpu03"}


def _check_live(env: dict[str, str], database: Path) -> None:
    """The portal answers; a running job's refresh (what its page asks for) is done by the
    worker from the store holding its node, one job on each store."""
    web = f"http://127.0.0.1:{env['WEB_PORT']}/health/"
    assert _until(lambda: _get(web) == 200, 60), "the portal never answered"
    jobs = _manage(env, "shell", "-v0", "-c", (
        "from apps.jobs import services; from apps.jobs.models import Job\n"
        "for node in ('gpu01', 'gpu03'):\n"
        "    job = Job.objects.filter(state='RUNNING', gpu_equivalent__gt=0, nodes=node)"
        ".first()\n"
        "    assert services.request_refresh(job)\n"
        "    print(job.pk)")).split()[-2:]

    def refreshed() -> list[tuple[str, str, float, str]]:
        with sqlite3.connect(database, timeout=10) as conn:
            return conn.execute(
                "SELECT source, status, coverage, warnings FROM jobs_jobmetrics WHERE job_id IN "
                "(?, ?) AND source = 'prometheus' AND status = 'live'", jobs).fetchall()

    assert _until(lambda: len(refreshed()) == 2, 120), \
        "the worker did not refresh a running job of each store"
    for _, _, coverage, warnings in refreshed():
        assert coverage > 0 and "not checked" not in warnings, (coverage, warnings)


# Run in the demo's database: a finished GPU job per store archived again live (what its
# page and archive-pending do), the guardrails' pass over the running jobs at the simulated
# "now", and a detection window ending there (beat's security-detect); each says what it read.
_BOTH_STORES = """
import json
from datetime import UTC, datetime, timedelta
from apps.core.models import TaskRun
from apps.guardrails import services as guardrails
from apps.jobs import services
from apps.jobs.models import Job
from apps.security import services as security

now = datetime.fromtimestamp(NOW, UTC)
out = {"archive": {}}
for node in ("gpu01", "gpu03"):
    job = Job.objects.filter(nodes=node, state="COMPLETED", gpu_equivalent__gt=0,
                             metrics__source="openmetrics", metrics__coverage__gt=0.5) \
        .order_by("-end_time").first()  # a job the simulator's files measured
    files = job.metrics.source, job.metrics.coverage
    live = services.archive_job(job, force=True)
    run = TaskRun.objects.filter(kind="archive_job").latest("pk")
    out["archive"][node] = [files, [live.source, live.status, live.coverage], live.warnings,
                            live.gpus_missing, run.status]
running = Job.objects.filter(state="RUNNING", gpu_equivalent__gt=0)
out["guardrails"] = guardrails.run_checks(now=now, jobs=running)
out["guardrails_run"] = TaskRun.objects.filter(kind="guardrails_check").latest("pk").status
report = security.run_window(running.first().cluster, now - timedelta(hours=6), now)
out["detect"] = [report.telemetry_complete, report.sources["telemetry"], report.failures,
                 TaskRun.objects.filter(kind="security.detect").latest("pk").status]
print(json.dumps(out, default=str))
"""


def _check_both_stores_read(env: dict[str, str]) -> None:
    """Archive, guardrails and detection read both stores, nothing "not checked"."""
    now = json.loads((Path(env["DEMO_DIR"]) / "cluster.json").read_text())["now"]
    out = json.loads(_manage(env, "shell", "-v0", "-c",
                             _BOTH_STORES.replace("NOW", str(now))).splitlines()[-1])
    for node, (files, live, warnings, missing, run) in out["archive"].items():
        # a job the files measured, read again from its node's store: all its GPUs, and
        # only that store holds its node (_check_each_store_holds_its_nodes)
        assert files[0] == "openmetrics" and live[:2] == ["prometheus", "complete"], (node, live)
        assert live[2] > 0.5, (node, files, live)
        assert not missing and not warnings and run == "succeeded", (node, warnings, run)
    guard = out["guardrails"]
    assert guard["jobs"] == guard["measured"] == 3 and guard["not_checked"] == 0, guard
    assert out["guardrails_run"] == "succeeded"
    complete, source, failures, status = out["detect"]
    assert complete and not failures and status == "succeeded", out["detect"]
    assert source == (f"stores vm http://127.0.0.1:{env['VM_PORT']}, default http://127.0.0.1:"
                      f"{env['PROM_PORT']}: 24 GPUs, 3 nodes, step 3600s"), source  # all read


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
