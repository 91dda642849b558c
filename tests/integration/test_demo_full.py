"""``deploy/dev/demo-full.sh``: it parses, explains what runs live, stops only what it
started, and (with Prometheus, VictoriaMetrics and Redis here) brings a tiny simulated
cluster up through the live paths with its telemetry split over two stores (issue 29):
gpu01-02 in Prometheus, the a100 partition's gpu03 in VictoriaMetrics. Job refreshes go
portal -> Redis -> worker -> each node's store and back; the archive and detection read
both stores with nothing "not checked", and so does beat's guardrails pass over the simulated
cluster's running jobs at its simulated "now" (run by the worker, recorded as a TaskRun);
then ``down`` leaves nothing running.

Isolation: its own data folder (SQLite), Prometheus on ``DEMO_FULL_PROM_PORT`` and
VictoriaMetrics on ``DEMO_FULL_VM_PORT`` (else free ports below the kernel's ephemeral range,
see ``_private_ports``) with their own data dirs, Redis db ``DEMO_FULL_REDIS_DB`` (10), a
free web port. A failed ``up`` is reported with its exit status and stderr first, then its
output and the tail of every log the started services wrote (``_why``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests

from tests.integration.services import port_open, require

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "dev" / "demo-full.sh"


def _private_ports(n: int) -> list[int]:
    """``n`` distinct ports nothing holds now, below the kernel's ephemeral range.

    A port from ``bind(0)`` lies in the ephemeral range, where every outgoing connection
    (Redis, PostgreSQL, curl) and every other xdist worker's ``bind(0)`` also draw. The
    stores bind theirs a minute after the pick (migrate, simulate, load_demo first); in
    between, any of those may take it, and the store then fails to bind or a stranger
    answers on its port. Below the range only an explicit bind can take it."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    pick = random.SystemRandom()
    ports: list[int] = []
    while len(ports) < n:
        # 20000-26499: clear of the dev Slurm clusters (6817-17006, 26817-27006)
        port = pick.randrange(20000, min(max(low, 20001), 26500))
        if port not in ports and _bindable(port):
            ports.append(port)
    return ports


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    prom, vm, web = _private_ports(3)
    env.update(BEACON_DATA_DIR=str(tmp / "data"), DEMO_DIR=str(tmp / "sim"),
               DEMO_RUN_DIR=str(tmp / "run"), PROM_DIR=str(tmp / "prom"),
               PROM_PORT=os.environ.get("DEMO_FULL_PROM_PORT") or str(prom),
               VM_DIR=str(tmp / "vm"),
               VM_PORT=os.environ.get("DEMO_FULL_VM_PORT") or str(vm),
               WEB_PORT=str(web), PY=sys.executable, LOG_LEVEL="warning",
               REDIS_URL=f"redis://127.0.0.1:6379/{os.environ.get('DEMO_FULL_REDIS_DB', '10')}",
               # beat's guardrails pass as often as it may, so the test sees one
               GUARDRAILS_CHECK_EVERY="60")
    env.pop("PROMETHEUS_URL", None)
    env.update(extra)
    return env


def _why(done: subprocess.CompletedProcess[str], env: dict[str, str]) -> str:
    """A failed script run, the reason first (a CI summary shows the first line): its exit
    status and stderr, the end of its output, then the tail of every log of what it
    started (worker, beat, web, Prometheus, VictoriaMetrics)."""
    err = done.stderr.strip()
    code = done.returncode  # a negative one: killed by that signal, the script had no say
    ended = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited {code}"
    parts = [f"demo-full.sh {' '.join(map(str, done.args[2:]))} {ended}: "
             f"{err.splitlines()[-1] if err else 'nothing on stderr'}",
             "--- stderr:", err or "(empty)", "--- stdout (last 40 lines):",
             _tail(done.stdout, 40)]
    logs = [*Path(env["DEMO_RUN_DIR"]).glob("*.log"), *Path(env["PROM_DIR"]).glob("run/*.log"),
            *Path(env["VM_DIR"]).glob("run/*.log")]
    for log in sorted(logs):
        parts += [f"--- {log} (last 20 lines):", _tail(log.read_text(errors="replace"), 20)]
    return "\n".join(parts)


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(empty)"


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
                  "guardrails-check", 'simulated "now"', "sent to nobody", "PROM_PORT",
                  "VictoriaMetrics", "VM_PORT", "VM_PARTITIONS", "DEMO_FULL_WAIT", "down"):
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


@pytest.mark.integration("redis")
def test_up_names_the_process_holding_a_stores_port(tmp_path):
    """A store's port held by another process stops ``up`` before it starts anything there,
    naming the holder (not a bind error deep in the store's log, nor a stranger's answers)."""
    require(port_open("127.0.0.1", 6379) and port_open("127.0.0.1", 5432),
            "PostgreSQL and Redis", "deploy/dev/services.sh up")
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "cluster.json").write_text('{"name": "demo", "now": 0}')
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        env = _env(tmp_path, PROM_PORT=str(held.getsockname()[1]))
        done = _script(env, "up")
    assert done.returncode == 1, _why(done, env)
    assert f"Prometheus cannot start: 127.0.0.1:{env['PROM_PORT']} is held by" in done.stderr
    assert f"pid={os.getpid()}," in done.stderr and "PROM_PORT" in done.stderr
    assert not list((tmp_path / "prom").glob("run/*.pid"))  # nothing started there


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
        # the script bounds each of its waits (DEMO_FULL_WAIT, 120 s) and says what did not
        # come up; this timeout is only the backstop above them
        up = _script(env, "up", timeout=420)
        assert up.returncode == 0, _why(up, env)
        for words in ("1 simulated cluster(s) read Prometheus",
                      "partitions a100 read VictoriaMetrics", "default: 2 node(s) (gpu01, gpu02)",
                      "vm: 1 node(s) (gpu03)"):
            assert words in up.stdout, f"{words!r} not said\n{_why(up, env)}"
        database = tmp_path / "data" / "beacon.sqlite3"
        _check_each_store_holds_its_nodes(env)
        _check_live(env, database)
        _check_both_stores_read(env)
        _check_beat_guardrails(env, database)
        again = _script(env, "up", timeout=240)  # idempotent: nothing started twice
        assert again.returncode == 0, _why(again, env)
        assert again.stdout.count("already running") == 3, _why(again, env)
        assert "telemetry already backfilled" in again.stdout, _why(again, env)
    finally:
        down = _script(env, "down", timeout=120)
        subprocess.run(["redis-cli", "-n", db, "flushdb"], capture_output=True, check=False)
    assert down.returncode == 0, _why(down, env)
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
# page and archive-pending do) and a detection window ending at the simulated "now" (beat's
# security-detect); each says what it read.
_BOTH_STORES = """
import json
from datetime import UTC, datetime, timedelta
from apps.core.models import TaskRun
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
report = security.run_window(running.first().cluster, now - timedelta(hours=6), now)
out["detect"] = [report.telemetry_complete, report.sources["telemetry"], report.failures,
                 TaskRun.objects.filter(kind="security.detect").latest("pk").status]
print(json.dumps(out, default=str))
"""


def _check_both_stores_read(env: dict[str, str]) -> None:
    """Archive and detection read both stores, nothing "not checked"."""
    now = json.loads((Path(env["DEMO_DIR"]) / "cluster.json").read_text())["now"]
    out = json.loads(_manage(env, "shell", "-v0", "-c",
                             _BOTH_STORES.replace("NOW", str(now))).splitlines()[-1])
    for node, (files, live, warnings, missing, run) in out["archive"].items():
        # a job the files measured, read again from its node's store: all its GPUs, and
        # only that store holds its node (_check_each_store_holds_its_nodes)
        assert files[0] == "openmetrics" and live[:2] == ["prometheus", "complete"], (node, live)
        assert live[2] > 0.5, (node, files, live)
        assert not missing and not warnings and run == "succeeded", (node, warnings, run)
    complete, source, failures, status = out["detect"]
    assert complete and not failures and status == "succeeded", out["detect"]
    assert source == (f"stores vm http://127.0.0.1:{env['VM_PORT']}, default http://127.0.0.1:"
                      f"{env['PROM_PORT']}: 24 GPUs, 3 nodes, step 3600s"), source  # all read


def _check_beat_guardrails(env: dict[str, str], database: Path) -> None:
    """Beat's guardrails-check queued the simulated cluster's pass and the worker ran it at
    the simulated "now": the three running GPU jobs (gpu01's in Prometheus, gpu03's in
    VictoriaMetrics) each measured from its node's store, none "not checked", and any alert
    kept marked simulated (nothing sent)."""
    now = int(json.loads((Path(env["DEMO_DIR"]) / "cluster.json").read_text())["now"])

    def beat_run() -> tuple[str, str, str] | None:
        with sqlite3.connect(database, timeout=10) as conn:
            return conn.execute(
                "SELECT status, target, stats FROM core_taskrun WHERE kind = 'guardrails_check'"
                " AND cluster_id IS NOT NULL AND finished_at IS NOT NULL ORDER BY id DESC"
            ).fetchone()

    assert _until(lambda: beat_run() is not None, 150), \
        "beat's guardrails-check ran no pass over the simulated cluster within 150 s"
    status, target, stats = beat_run()  # type: ignore[misc]
    stats = json.loads(stats)
    assert status == "succeeded", (status, stats)
    assert stats["jobs"] == stats["measured"] == 3, stats
    assert stats["not_checked"] == 0 and stats["errors"] == 0 and stats["sent"] == {}, stats
    assert f"{datetime.fromtimestamp(now, UTC):%Y-%m-%d %H:%M}" in target, target
    with sqlite3.connect(database, timeout=10) as conn:
        nodes = {n for (n,) in conn.execute(
            "SELECT nodes FROM jobs_job WHERE state = 'RUNNING' AND gpu_equivalent > 0")}
        statuses = {s for (s,) in conn.execute("SELECT DISTINCT status FROM guardrails_alert")}
    assert any("gpu01" in n for n in nodes) and any("gpu03" in n for n in nodes), nodes
    assert statuses <= {"simulated"}, statuses  # the replay's and this pass's: none sent


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
