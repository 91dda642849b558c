"""PostgreSQL stopped for real in the middle of work, then started again.

A private PostgreSQL 15 cluster (tests/integration/pg_server.py: initdb under /tmp, a free
port, trust), migrated by ``manage.py migrate``; every Beacon process here is a real
subprocess (``manage.py``, gunicorn, a Celery worker) pointed at it with DATABASE_URL.

To stop the database *in the middle* of an operation, and not before or after it, the test
holds a row lock the operation will need partway through (a user row that batch 4 of the
import references; a statement row the refresh's line inserts reference), waits until the
operation's backend is waiting on it, and then stops the server. So the cut lands at a
known point, with batches committed before it and a transaction open at it.

What it proves:
1. ``import_sacct`` cut by a crash (``pg_ctl stop -m immediate``) keeps the batches
   committed before it, reports the outage (not bad records), and a re-run completes with
   exactly the file's job set: none lost, none duplicated.
2. A chargeback refresh cut by a shutdown (``-m fast``) leaves the previous statements
   and lines exactly as they were (one transaction); a re-run rewrites them whole.
3. The TaskRun of each killed run does not stay "running": ``sweep_task_runs`` closes it.
4. While the database is down ``/health/`` answers 503, pages a 503 page (no traceback)
   and the API a JSON 503; after the restart the same server serves again.
5. A Celery task that meets the dead database retries with backoff and succeeds once the
   database is back.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench.sacct_import import USERS, write_file
from tests.integration.pg_server import PrivatePostgres
from tests.integration.redis_server import PrivateRedis, free_port
from tests.integration.services import require, stop

pytestmark = pytest.mark.integration("postgres")

ROOT = Path(__file__).resolve().parents[2]
N_JOBS = 2000
BATCH = 50  # SLURM_SYNC_BATCH and SLURM_IMPORT_BATCH for the import subprocess
LOCKED_USER = USERS[150]  # its first job is record 151: batch 4 needs its row
CLUSTER = "devcluster"  # the cluster the generated records name

SETUP = f"""
from datetime import date
from django.contrib.auth.models import User
from apps.accounts.models import Membership, Team
from apps.chargeback.models import Rate
from apps.clusters.models import Cluster, SlurmAccount
cluster = Cluster.objects.create(name={CLUSTER!r}, display_name="Fault cluster")
for slug in ("nlp", "vision", "speech", "multimodal", "robotics"):
    team = Team.objects.create(slug=slug, name=slug.title())
    SlurmAccount.objects.create(cluster=cluster, name=slug, team=team)
User.objects.create_user({LOCKED_USER!r})
User.objects.create_user("admin", is_staff=True, is_superuser=True)
Rate.objects.create(price="2.5000", valid_from=date(2000, 1, 1))
"""


@dataclass
class Site:
    pg: PrivatePostgres
    env: dict[str, str]
    sacct: Path
    job_ids: set[int]
    folder: Path

    def manage(self, *args: str, check: bool = True,
               **env: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT,
                              env={**self.env, **env}, capture_output=True, text=True,
                              timeout=600)
        if check and done.returncode:
            pytest.fail(f"manage.py {' '.join(args)} exited {done.returncode}:\n"
                        f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        return done

    def popen(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT,
                                env={**self.env, **env}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def jobs(self) -> list[int]:
        return [r[0] for r in self.pg.query(  # type: ignore[misc]
            "SELECT j.job_id FROM jobs_job j JOIN clusters_cluster c ON c.id = j.cluster_id "
            "WHERE c.name = %s", CLUSTER)]

    def runs(self, kind: str) -> list[tuple[Any, ...]]:
        return self.pg.query("SELECT id, status, error FROM core_taskrun WHERE kind = %s "
                             "ORDER BY id", kind)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    require(PrivatePostgres.available(), "postgres",
            "apt-get install postgresql-15 (its binaries in /usr/lib/postgresql/15/bin)")
    pg = PrivatePostgres()
    folder = tmp_path_factory.mktemp("pgsite")
    try:
        pg.init()
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PROMETHEUS_URL")}
        env.update(DATABASE_URL=pg.url, BEACON_DATA_DIR=str(folder / "data"),
                   STATIC_ROOT=str(folder / "static"), DJANGO_SETTINGS_MODULE="portal.settings",
                   DEBUG="false", SLURM_SYNC_BATCH=str(BATCH), SLURM_IMPORT_BATCH=str(BATCH),
                   PYTHONPATH=str(ROOT))
        sacct = folder / "sacct.json"
        write_file(sacct, N_JOBS)
        job_ids = {int(j["job_id"]) for j in json.loads(sacct.read_text())["jobs"]}
        site = Site(pg, env, sacct, job_ids, folder)
        site.manage("migrate", "--noinput", "-v0")
        site.manage("shell", "-c", SETUP)
        yield site
    finally:
        pg.destroy()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")


def _blocked_on_a_lock(pg: PrivatePostgres) -> bool:
    return pg.query("SELECT count(*) FROM pg_stat_activity WHERE datname = 'beacon' "
                    "AND wait_event_type = 'Lock'")[0][0] > 0  # type: ignore[operator]


class _LockHolder:
    """An open transaction holding ``FOR UPDATE`` on rows the operation will reference."""

    def __init__(self, pg: PrivatePostgres, sql: str, *params: object) -> None:
        self.conn = psycopg.connect(pg.dsn())
        self.conn.execute(sql, params)

    def drop(self) -> None:
        with contextlib.suppress(psycopg.Error):  # the server it talked to is gone
            self.conn.close()


def _sweep(site: Site) -> str:
    return site.manage("sweep_task_runs", "--older-than-minutes", "0").stdout


# --- 1. An import cut by a crash ------------------------------------------------------------


def test_an_import_cut_by_a_crash_resumes_to_the_exact_job_set(site: Site) -> None:
    pg = site.pg
    holder = _LockHolder(pg, "SELECT id FROM auth_user WHERE username = %s FOR UPDATE",
                         LOCKED_USER)
    proc = site.popen("import_sacct", str(site.sacct), "--cluster", CLUSTER)
    try:
        wait_for("the import to reach the locked user's batch", lambda: _blocked_on_a_lock(pg))
        stored = len(site.jobs())
        assert 0 < stored < N_JOBS, stored  # batches before the cut are committed
        pg.stop("immediate")  # a crash: no checkpoint, the open batch is never committed
    finally:
        holder.drop()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, (out, err)
    assert "database became unavailable during the import" in err
    assert "rejected" not in err  # an outage is not reported as bad records

    pg.start()  # crash recovery replays the WAL
    # Batches commit without waiting for their WAL flush (apps/clusters/upsert.py), so a
    # crash may take the last few with it; whole batches only, never more than was stored,
    # and the re-run below writes them again.
    survived = len(site.jobs())
    assert survived <= stored and survived % BATCH == 0, (survived, stored)
    [(_, status, _)] = site.runs("slurm.import_sacct")
    assert status == "running"  # the process died before it could record its end
    assert "closed 1 abandoned run(s)" in _sweep(site)
    [(_, status, error)] = site.runs("slurm.import_sacct")
    assert status == "failed" and "abandoned" in error

    again = site.manage("import_sacct", str(site.sacct), "--cluster", CLUSTER)
    assert f"created {N_JOBS - survived}," in again.stdout, again.stdout
    ids = site.jobs()
    assert len(ids) == len(set(ids)) == N_JOBS  # none duplicated
    assert set(ids) == site.job_ids  # none lost
    assert site.runs("slurm.import_sacct")[-1][1] == "succeeded"


# --- 2. A statement refresh cut by a shutdown ----------------------------------------------


def _month(site: Site) -> str:
    [(month,)] = site.pg.query(
        "SELECT to_char(date_trunc('month', start_time AT TIME ZONE 'UTC'), 'YYYY-MM') AS m "
        "FROM jobs_job WHERE start_time IS NOT NULL GROUP BY m ORDER BY count(*) DESC LIMIT 1")
    return str(month)


def _statements(site: Site) -> dict[str, tuple[Any, ...]]:
    """Per team: the statement's amount and hours, its line count and the lines' sum."""
    rows = site.pg.query(
        "SELECT t.slug, s.amount, s.allocated_hours, count(l.id), coalesce(sum(l.amount), 0) "
        "FROM chargeback_statement s JOIN accounts_team t ON t.id = s.team_id "
        "LEFT JOIN chargeback_statementline l ON l.statement_id = s.id "
        "GROUP BY t.slug, s.amount, s.allocated_hours ORDER BY t.slug")
    return {str(r[0]): tuple(r[1:]) for r in rows}


def test_a_refresh_cut_by_a_shutdown_leaves_the_statements_whole(site: Site) -> None:
    pg = site.pg
    if len(site.jobs()) < N_JOBS:  # run alone: import first
        site.manage("import_sacct", str(site.sacct), "--cluster", CLUSTER)
    month = _month(site)
    site.manage("chargeback", "--month", month)
    before = _statements(site)
    assert before and all(lines > 0 for _, _, lines, _ in before.values()), before
    pg.query("UPDATE chargeback_rate SET price = price * 2")  # the next refresh rewrites

    holder = _LockHolder(pg, "SELECT s.id FROM chargeback_statement s JOIN accounts_team t "
                             "ON t.id = s.team_id WHERE t.slug = 'vision' FOR UPDATE")
    proc = site.popen("chargeback", "--month", month)
    try:
        wait_for("the refresh to write into the locked statement",
                 lambda: _blocked_on_a_lock(pg))
        pg.stop("fast")  # the open transaction (old lines already deleted) is rolled back
    finally:
        holder.drop()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, err

    pg.start()
    assert _statements(site) == before  # not one line deleted, added or re-priced
    stuck = [r for r in site.runs("chargeback.refresh") if r[1] == "running"]
    assert len(stuck) == 1
    assert "closed 1 abandoned run(s)" in _sweep(site)

    site.manage("chargeback", "--month", month)
    after = _statements(site)
    assert after.keys() == before.keys()
    for slug, (amount, hours, lines, line_sum) in after.items():
        assert lines == before[slug][2] and hours == before[slug][1], slug
        assert amount == line_sum, slug  # whole: the total is its lines' sum
        # at the doubled price (each line is rounded to the cent on its own)
        assert abs(amount - 2 * before[slug][0]) <= Decimal("0.01") * lines, slug
    assert site.runs("chargeback.refresh")[-1][1] == "succeeded"


# --- 3. Pages and health while the database is down ------------------------------------------


def _get(url: str, cookie: str = "") -> tuple[int, str, dict[str, str]]:
    assert url.startswith("http://127.0.0.1:")
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


@pytest.fixture
def server(site: Site) -> Iterator[str]:
    site.manage("collectstatic", "--noinput", "-v0")
    port = free_port()
    log = open(site.folder / "gunicorn.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "portal.wsgi", "-b",
                             f"127.0.0.1:{port}", "-w", "1", "--timeout", "60"], cwd=ROOT,
                            env=site.env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for("gunicorn to answer", lambda: _answers(base), timeout=60)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def _answers(base: str) -> bool:
    try:
        return _get(base + "/health/")[0] in (200, 503)
    except OSError:
        return False


def test_pages_answer_503_while_the_database_is_down_and_serve_again_after(
        site: Site, server: str) -> None:
    key = site.manage("shell", "-c", (
        "from django.contrib.auth.models import User; from django.contrib.sessions.backends.db "
        "import SessionStore; u = User.objects.get(username='admin'); s = SessionStore(); "
        "s['_auth_user_id'] = str(u.pk); s['_auth_user_backend'] = "
        "'django.contrib.auth.backends.ModelBackend'; s['_auth_user_hash'] = "
        "u.get_session_auth_hash(); s.create(); print(s.session_key)")).stdout.split()[-1]
    cookie = f"sessionid={key}"
    assert _get(server + "/jobs/", cookie)[0] == 200

    site.pg.stop("fast")
    try:
        status, body, _ = _get(server + "/health/")
        assert status == 503 and json.loads(body)["status"] == "error"
        for path in ("/jobs/", "/", "/platform/"):
            status, body, headers = _get(server + path, cookie)
            assert status == 503, (path, status)
            assert 'id="database-unavailable"' in body and headers.get("Retry-After") == "30"
            assert "Traceback" not in body and "psycopg" not in body
        status, body, _ = _get(server + "/api/v1/jobs/", cookie)
        assert status == 503 and "database is unavailable" in json.loads(body)["detail"]
    finally:
        site.pg.start()
    assert _get(server + "/health/")[0] == 200
    assert _get(server + "/jobs/", cookie)[0] == 200  # the same process reconnected


# --- 4. A task meets the dead database -------------------------------------------------------


def test_a_task_that_meets_the_dead_database_retries_and_succeeds(site: Site,
                                                                  tmp_path: Path) -> None:
    require(PrivateRedis.available(), "redis", "apt-get install redis-server")
    broker = PrivateRedis(tmp_path / "redis")
    broker.start()
    log_path = tmp_path / "worker.log"
    log = open(log_path, "w")  # noqa: SIM115
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", "analysis,sync,celery",
         "--pool", "solo", "--loglevel", "INFO", "--without-heartbeat", "--without-mingle",
         "--without-gossip"], cwd=ROOT, env={**site.env, "REDIS_URL": broker.url},
        stdout=log, stderr=subprocess.STDOUT)
    try:
        before = len(site.runs("prune_task_runs"))
        site.pg.stop("fast")
        try:
            _send(broker.url, "apps.core.tasks.prune_task_runs", {"keep_days": 30})
            # The failed run published its retry, counted and delayed (backoff), which the
            # worker holds unacknowledged until it is due.
            wait_for("the task to be retried", lambda: _retries(broker) >= 1, 120)
        finally:
            site.pg.start()
        runs = wait_for("the retried task to succeed", lambda: [
            r for r in site.runs("prune_task_runs")[before:] if r[1] == "succeeded"], 240)
        assert len(runs) == 1, site.runs("prune_task_runs")
    finally:
        stop(worker)
        log.close()
        broker.kill()


def _retries(broker: PrivateRedis) -> int:
    """The highest retry count among the messages Redis holds (queued or unacknowledged)."""
    client = broker.client()
    raw = list(client.hvals("unacked")) + [m for q in ("analysis", "celery")
                                          for m in client.lrange(q, 0, -1)]
    counts = [0]
    for item in raw:
        message = json.loads(item)
        message = message[0] if isinstance(message, list) else message
        counts.append(int(message.get("headers", {}).get("retries") or 0))
    return max(counts)


def _send(url: str, name: str, kwargs: dict[str, Any]) -> None:
    """Publish by name through a private Celery app (this process' app is the test one)."""
    from celery import Celery

    Celery(broker=url, set_as_current=False).send_task(name, kwargs=kwargs, queue="analysis")
