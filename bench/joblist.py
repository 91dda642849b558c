"""Job list under load: p95 server time at 20 concurrent clients over 1,000,000 jobs (PostgreSQL).

1. Fill a dedicated PostgreSQL database (``<BENCH_DB_PREFIX>_joblist``, bench/common.py) with N
   jobs of 500 users in 50 teams (N: ``BENCH_JOBLIST_JOBS``, default 1,000,000; ``--quick``
   100,000; issue 29 asks for 10,000,000), made by SQL with the indexes built after (bench/fill.py
   ``indexes_built_after``); submit times 30 s apart from 2026-01-01
   up to 1M jobs, packed closer past that so 10M jobs still fill the same year. One job in ten
   is an array task (arrays of 10), 80% of started jobs have metrics (the efficiency band), one
   in seven a diagnosis finding and one in 200 a security finding (the "has findings" filter
   reads both). Kept between runs when the count and FILL_VERSION match; made anew when its
   schema is not this checkout's.
2. Serve it with gunicorn on loopback and load each view with wrk (20 connections). A Lua
   script collects each response's ``Server-Timing`` (time inside Django) next to wrk's own
   latency, which also counts queueing on this 2-core machine.
3. Target (issue 6): p95 server time < 100 ms for "my jobs", "team" and filtered views.
   The plans behind each view (EXPLAIN ANALYZE on this database): docs/joblist.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import (
    BenchError,
    Check,
    Result,
    cli,
    database_url,
    ensure_database,
    job_count,
    require_tool,
    setup_django,
    sized_command,
    stats,
    table_sizes,
)
from bench.fill import hashed, indexes_built_after, insert_select, migrate, users_table

ROOT = Path(__file__).resolve().parent.parent
DB_URL = database_url("joblist")
PORT = int(os.environ.get("BENCH_PORT", "8765"))
# The views are CPU-bound (queries take ~2 ms, rendering the rest): one worker per core keeps
# Django's own time honest; extra clients wait in the socket backlog, which wrk's latency shows.
WORKERS = os.cpu_count() or 2
TEAMS, USERS_PER_TEAM = 50, 10
LUA_SCRIPT = Path(__file__).with_name("wrk_report.lua")


# Bump when the fill below changes: a database filled by an older version is filled anew.
FILL_VERSION = 3  # 3: made by SQL (same shares as 2's Python COPY, other draws)
ARRAY_EVERY, ARRAY_TASKS = 10, 10  # one block of 10 jobs in 10 is an array of 10 tasks


def _fill(n_jobs: int) -> dict[str, Any]:
    """Create teams, users, n_jobs jobs with their metrics and findings; reuse them when
    this fill version already made n_jobs."""
    from django.contrib.auth.models import User
    from django.db import connection

    from apps.accounts.models import Membership, Team
    from apps.clusters.models import Cluster
    from apps.jobs.models import Job

    migrate(DB_URL)
    name = f"bench-fill{FILL_VERSION}"
    if Cluster.objects.filter(name=name).exists() and Job.objects.count() == n_jobs:
        return {"reused": True, "fill_s": 0.0}
    started = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute("TRUNCATE jobs_jobgpu, jobs_job, accounts_membership, accounts_team, "
                    "clusters_cluster, auth_user CASCADE")
    cluster = Cluster.objects.create(name=name)
    users, teams = [], []
    for t in range(TEAMS):
        team = Team.objects.create(slug=f"team{t:02d}", name=f"Team {t:02d}")
        teams.append(team)
        for u in range(USERS_PER_TEAM):
            user = User.objects.create(username=f"u{t:02d}{u}")
            users.append((user, team))
            Membership.objects.create(user=user, team=team, role="lead" if u == 0 else "member")
    # u080 leads two teams: the team scope then spans more than one team
    Membership.objects.create(user=User.objects.get(username="u080"), team=teams[9],
                              role="lead")
    User.objects.create(username="benchadmin", is_staff=True)
    with indexes_built_after(["jobs_job", "jobs_jobmetrics", "jobs_jobfinding",
                              "security_finding"]):
        users_table(users)
        _insert_jobs(cluster.pk, n_jobs)
        _fill_metrics_and_findings(cluster.pk)
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
    return {"reused": False, "fill_s": round(time.perf_counter() - started, 1)}


def _submit_step(n_jobs: int) -> int:
    """Seconds between submits: 30 up to 1M jobs (the fill issue 6 measured), then less, so
    10M jobs are a busier year rather than a decade reaching past now."""
    return max(1, 30 * 1_000_000 // max(n_jobs, 1_000_000))


def _insert_jobs(cluster_id: int, n_jobs: int) -> None:
    """Jobs made by PostgreSQL (INSERT ... SELECT over generate_series; a row-by-row COPY
    from Python took most of an hour for 10M on 2 shared cores). One block of ARRAY_TASKS
    jobs in ARRAY_EVERY is an array: its tasks share the head's user, name, size and submit
    time, and the head task holds the array's raw id, as Slurm records it. Per job: a uniform
    user; 1-32 GPUs; states 70% COMPLETED, 12 FAILED, 8 CANCELLED, 6 TIMEOUT, 3 RUNNING,
    1 PENDING; started 0-59 minutes after submit, two hours long."""
    from apps.jobs.models import Job

    step = _submit_step(n_jobs)
    draw = f"""(SELECT g.i, g.i / {ARRAY_TASKS} AS block, mod(g.i, {ARRAY_TASKS}) AS task, a.arr,
        CASE WHEN a.arr THEN g.i / {ARRAY_TASKS} * {ARRAY_TASKS} ELSE g.i END AS h
      FROM generate_series(0, {n_jobs - 1}) AS g(i)
      CROSS JOIN LATERAL (SELECT mod(g.i / {ARRAY_TASKS}, {ARRAY_EVERY}) = 0
          AND (g.i / {ARRAY_TASKS} + 1) * {ARRAY_TASKS} <= {n_jobs} AS arr) a) s
    CROSS JOIN LATERAL (SELECT
        timestamptz '2026-01-01 00:00+00'
            + (s.h * {step} + floor({hashed("s.h", 2)} * {step})) * interval '1 second' AS at,
        (ARRAY[1, 2, 4, 8, 8, 16, 32])[1 + floor({hashed("s.h", 3)} * 7)::int] AS n,
        floor({hashed("s.h", 4)} * 5)::int AS base,
        1000000 + s.block * {ARRAY_TASKS} AS array_id,
        CASE WHEN s.task = 0 THEN {ARRAY_TASKS - 1} ELSE s.task - 1 END AS task_id,
        floor({hashed("s.i", 7)} * 100)::int AS w,
        floor({hashed("s.h", 1)} * (SELECT count(*) FROM bench_users))::int AS k) d
    JOIN bench_users bu ON bu.k = d.k"""  # noqa: S608 (the module's own SQL, never input)
    start = f"d.at + floor({hashed('s.i', 6)} * 60) * interval '1 minute'"
    insert_select(Job, {
        "cluster_id": str(cluster_id), "job_id": "1000000 + s.i",
        "display_id": "CASE WHEN s.arr THEN d.array_id || '_' || d.task_id "
                      "ELSE (1000000 + s.i)::text END",
        "array_job_id": "CASE WHEN s.arr THEN d.array_id END",
        "array_task_id": "CASE WHEN s.arr THEN d.task_id END",
        "name": "CASE WHEN d.base = 4 THEN 'sweep-' || "
                f"lpad(floor({hashed('s.h', 5)} * 2000)::int::text, 4, '0') "
                "ELSE (ARRAY['llm-pretrain', 'finetune', 'eval', 'notebook'])[d.base + 1] END",
        "user_name": "bu.username", "user_id": "bu.user_id", "account": "bu.slug",
        "team_id": "bu.team_id", "partition": "'gpu'", "qos": "'normal'",
        "state": "CASE WHEN d.w < 70 THEN 'COMPLETED' WHEN d.w < 82 THEN 'FAILED' "
                 "WHEN d.w < 90 THEN 'CANCELLED' WHEN d.w < 96 THEN 'TIMEOUT' "
                 "WHEN d.w < 99 THEN 'RUNNING' ELSE 'PENDING' END",
        "exit_code": "0", "submit_time": "d.at", "start_time": start,
        "end_time": f"{start} + interval '2 hours'", "time_limit_min": "1440",
        "nodes": "'gpu01'", "node_count": "greatest(1, d.n / 8)", "cpus": "d.n * 8",
        "memory_mb": "d.n * 64000", "gpus": "d.n", "gpu_equivalent": "d.n",
    }, f"FROM {draw}")


def _fill_metrics_and_findings(cluster_id: int) -> None:
    """What the efficiency and findings filters read, spread as on a busy site:

    - metrics (``JobMetrics.useful_fraction``) for 4 in 5 started jobs, skewed low as GPU
      fleets are (about 15% idle, 27% low, 30% medium, 27% high);
    - diagnosis findings (``JobFinding``) on 1 job in 7, a second on 1 in 30;
    - security findings (``security.Finding``) on 1 job in 200.
    """
    from apps.jobs.models import JobFinding, JobMetrics
    from apps.security.models import Finding

    def u(salt: int) -> str:
        """A fixed pseudo-random number in [0, 1) per job and purpose (reproducible)."""
        return f"(hashtextextended(jobs_job.job_id::text, {salt}) & 1048575)::float / 1048576"

    insert_select(JobMetrics, {
        "job_id": "id", "status": "'complete'", "measure": "'sm_active'",
        "allocated_gpu_hours": "gpu_equivalent * 2",
        "useful_fraction": f"power({u(7919)}, 1.6)",
    }, f"FROM jobs_job WHERE start_time IS NOT NULL AND {u(104729)} < 0.8")
    for salt, share in ((15485863, 1 / 7), (32452843, 1 / 30)):
        insert_select(JobFinding, {
            "job_id": "id", "key": "'input-stall'", "area": "'data'",
            "severity": "'warning'", "title": "'Input pipeline stall'",
            "text": "'The GPUs waited on the data loader.'",
        }, f"FROM jobs_job WHERE {u(salt)} < {share}")
    insert_select(Finding, {
        "cluster_id": str(cluster_id), "job_id": "id", "job_id_raw": "jobs_job.job_id",
        "rule_key": "'crypto-mining'", "title": "'Mining-like GPU use'",
        "severity": "'high'", "first_seen": "submit_time", "last_seen": "submit_time",
        "dedup_key": "'crypto-mining:' || jobs_job.job_id", "user_id": "user_id",
        "team_id": "team_id",
    }, f"FROM jobs_job WHERE {u(49979687)} < 0.005")


def _sessions() -> dict[str, str]:
    """A signed-in session cookie per role, made by Django's own login (signals included)."""
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    cookies = {}
    for role, name in (("researcher", "u071"), ("lead", "u070"), ("lead2", "u080"),
                       ("admin", "benchadmin")):
        client = Client()
        client.force_login(User.objects.get(username=name))
        value = client.cookies[settings.SESSION_COOKIE_NAME].value
        cookies[role] = f"{settings.SESSION_COOKIE_NAME}={value}"
    return cookies


def _check_views(cookies: dict[str, str]) -> None:
    """Each view answers 200 to its role before it is loaded (a redirect means no session)."""

    for label, role, path in VIEWS:
        request = urllib.request.Request(f"http://127.0.0.1:{PORT}{path}",
                                         headers={"Cookie": cookies[role]})
        opener = urllib.request.build_opener(_NoRedirect())
        try:
            status = opener.open(request, timeout=30).status
        except urllib.error.HTTPError as exc:
            status = exc.code
        if status != 200:
            raise BenchError(f"{label}: {path} answered {status} to the {role}, not 200")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _serve(data_dir: str) -> subprocess.Popen[bytes]:
    """gunicorn on loopback, as in production (collected static files, manifest storage)."""
    from django.core.management import call_command

    call_command("collectstatic", interactive=False, verbosity=0)
    env = {**os.environ, "DATABASE_URL": DB_URL, "BEACON_DATA_DIR": data_dir,
           "LOG_LEVEL": "warning", "DJANGO_SETTINGS_MODULE": "portal.settings"}
    for rate in ("API_RATE_PER_TOKEN", "API_RATE_PER_ADDRESS"):
        env.setdefault(rate, "1000000/min")  # 20 clients of one user: measure, not throttle
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), "portal.wsgi", "-b", f"127.0.0.1:{PORT}",
         "-w", str(WORKERS), "--log-level", "warning"], cwd=ROOT, env=env, start_new_session=True)
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health/", timeout=1)
            return proc
        except OSError:
            time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(10)
    raise BenchError(f"gunicorn did not answer on 127.0.0.1:{PORT} within 20 s "
                     "(is the port taken? set BENCH_PORT)")


def _wrk(path: str, cookie: str, seconds: int, script: str) -> dict[str, Any]:
    proc = subprocess.run(
        ["wrk", "-t2", "-c20", f"-d{seconds}s", "--latency", "-s", script,
         "-H", f"Cookie: {cookie}", f"http://127.0.0.1:{PORT}{path}"],
        capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("WRK ")), None)
    if line is None:
        raise BenchError(f"wrk on {path} printed no report (exit {proc.returncode}): "
                         f"{proc.stderr.strip()[-500:]}")
    return dict(json.loads(line[4:]))


VIEWS = [
    ("my jobs (researcher)", "researcher", "/jobs/?scope=mine"),
    ("my jobs, one row per array task", "researcher", "/jobs/?scope=mine&group=tasks"),
    ("my team's jobs (lead)", "lead", "/jobs/?scope=team"),
    ("team jobs of a lead of 2 teams", "lead2", "/jobs/?scope=team"),
    ("team, filtered: FAILED, >= 8 GPUs", "lead", "/jobs/?scope=team&state=FAILED&min_gpus=8"),
    ("team, filtered: PENDING", "lead", "/jobs/?scope=team&state=PENDING"),
    ("team, filtered: idle efficiency", "lead", "/jobs/?scope=team&efficiency=idle"),
    ("team, filtered: has findings", "lead", "/jobs/?scope=team&has_findings=true"),
    ("search by name (lead)", "lead", "/jobs/?scope=team&q=finetune"),
    ("search a rare name (lead)", "lead", "/jobs/?scope=team&q=sweep-0042"),
    ("all jobs (admin)", "admin", "/jobs/?scope=all"),
    ("all jobs, filtered (admin)", "admin", "/jobs/?scope=all&state=TIMEOUT&min_gpus=16"),
    ("all jobs, filtered: low efficiency, findings", "admin",
     "/jobs/?scope=all&efficiency=low&has_findings=true"),
    ("all jobs, search a rare name (admin)", "admin", "/jobs/?scope=all&q=sweep-1234"),
    # visible_to without a scope (issue 29): one index scan per part, own jobs and led teams'
    ("all visible jobs (researcher)", "researcher", "/jobs/?scope=all"),
    ("API list, RUNNING (researcher)", "researcher", "/api/v1/jobs/?state=RUNNING"),
    ("API list, PENDING (lead)", "lead", "/api/v1/jobs/?state=PENDING"),
]


def main(quick: bool) -> Result:
    n_jobs = job_count("BENCH_JOBLIST_JOBS", quick)
    seconds, repeats = (2, 2) if quick else (10, 3)  # --quick: the whole make bench < 5 min
    require_tool("wrk", "install the Debian package: apt-get install wrk")
    ensure_database(DB_URL)
    with tempfile.TemporaryDirectory(prefix="beacon-bench-") as data_dir:
        setup_django(data_dir, DB_URL)
        fill = _fill(n_jobs)
        rows_db, bytes_db = table_sizes(["jobs_job"])["jobs_job"]
        rows, checks = _load_views(data_dir, _sessions(), seconds, repeats)
    return Result(
        name="joblist", title="Job list: p95 server time at 20 concurrent clients",
        command=sized_command("joblist", "BENCH_JOBLIST_JOBS", quick),
        inputs={"jobs": f"{n_jobs:,} in PostgreSQL 15 ({TEAMS} teams × {USERS_PER_TEAM} users)",
                "load": f"wrk -t2 -c20 -d{seconds}s, {repeats} runs per view; "
                        f"gunicorn -w {WORKERS}",
                "data": "reused from the previous run" if fill["reused"]
                else f"made by SQL in {fill['fill_s']} s",
                "fill": "1 job in 10 an array task (arrays of 10); metrics on 80% of started "
                        "jobs; a diagnosis finding on 1 in 7, a security finding on 1 in 200; "
                        "u080 leads 2 teams",
                "jobs_job in PostgreSQL (heap + TOAST + indexes)":
                    f"{bytes_db / 1e6:,.0f} MB = {bytes_db / max(rows_db, 1):,.0f} bytes per job"},
        columns=["view", "path", "p95 server time", "CPU per request (workers)",
                 "p95 latency (wrk, incl. queueing)", "requests/s", "non-200"],
        rows=rows, checks=checks,
        notes=["Server time is Django's own time per response (the Server-Timing header); "
               "wrk's latency adds queueing: 20 clients share 2 cores. CPU per request is "
               "the gunicorn workers' user + system time over the run divided by its "
               "requests: what a request costs whatever else shares the machine.",
               "Query plans of every view: docs/joblist.md."],
    )


def _load_views(data_dir: str, cookies: dict[str, str], seconds: int,
                repeats: int) -> tuple[list[list[Any]], list[Check]]:
    """wrk against each view in turn, under one gunicorn that is always stopped."""
    server = _serve(data_dir)
    rows, checks = [], []
    try:
        _check_views(cookies)
        for label, role, path in VIEWS:
            runs = [_wrk_with_cpu(server.pid, path, cookies[role], seconds)
                    for _ in range(repeats)]
            srv = stats([r["srv_p95_ms"] for r in runs])
            lat = stats([r["lat_p95_ms"] for r in runs])
            rps = stats([r["rps"] for r in runs])
            cpu = stats([r["cpu_ms"] for r in runs])
            bad = sum(r["non200"] for r in runs)
            rows.append([label, f"`{path}`", srv.text(" ms"), cpu.text(" ms"),
                         lat.text(" ms"), rps.text(), bad])
            checks.append(Check(f"{label}: p95 server time < 100 ms", f"{srv.median:.1f} ms",
                                srv.median < 100 and bad == 0))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)
    return rows, checks


def _wrk_with_cpu(master: int, path: str, cookie: str, seconds: int) -> dict[str, Any]:
    """One wrk run, plus the gunicorn workers' CPU time per request (user + system).

    Unlike the server time, this does not stretch when other work shares the cores: on a
    busy machine it says what a request costs (PostgreSQL's own CPU is not in it).
    """
    before = _workers_cpu_s(master)
    run = _wrk(path, cookie, seconds, str(LUA_SCRIPT))
    spent = _workers_cpu_s(master) - before
    run["cpu_ms"] = spent * 1000 / max(run["requests"], 1)
    return run


def _workers_cpu_s(master: int) -> float:
    """CPU seconds of gunicorn's workers (the master's children), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    with open(f"/proc/{master}/task/{master}/children") as fh:
        children = [int(pid) for pid in fh.read().split()]
    for pid in children:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (after pid and comm)
    return total / ticks


if __name__ == "__main__":
    cli("joblist", main)
