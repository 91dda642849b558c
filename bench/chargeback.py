"""Chargeback: a month's statements for 50 teams over 1,000,000 jobs (PostgreSQL), against a
hand-written SQL GROUP BY over the same rows in the same run.

1. Fill its own PostgreSQL database (``<BENCH_DB_PREFIX>_chargeback`` on ``BENCH_POSTGRES_URL``:
   bench/common.py ``database_url``) with N jobs (N: ``BENCH_CHARGEBACK_JOBS``, default
   1,000,000; ``--quick`` 100,000; issue 29 asks for 10M) of 500 users in 50 teams around
   November 2026 (some spanning the month's edges, some running, two GPU models, a few sharded
   jobs) and an archived split for 70 % of them, made by SQL with the indexes built after (kept
   between runs when the count matches; made anew when another checkout's migrations left
   another schema). PostgreSQL down: a ``BenchError`` saying so, no traceback.
2. Floor: one hand-written ``GROUP BY`` computing the same sums (allocated GPU-hours inside the
   month and the four split parts) per team, user, partition and GPU types, all rows fetched.
3. Beacon: ``services.refresh_statements`` for the month: the ORM aggregate, the pure pricing
   (Decimal), and every team's draft statement and lines written in one transaction.
4. Target (issue 8): Beacon <= 1.5 x the floor, medians of interleaved runs.
"""

from __future__ import annotations

import os
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from bench.common import (
    Check,
    Result,
    cli,
    database_url,
    ensure_database,
    job_count,
    setup_django,
    sized_command,
    stats,
)
from bench.fill import fill_once, hashed, indexes_built_after, insert_select, users_table

DB_URL = database_url("chargeback")
TEAMS, USERS_PER_TEAM = 50, 10
MONTH = date(2026, 11, 1)
LO, HI = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
NOW = datetime(2026, 11, 30, 23, tzinfo=UTC)  # jobs still running end "now"

FLOOR_SQL = """
SELECT j.team_id, j.user_name, j.partition, j.gpu_types,
       SUM(j.gpu_equivalent * s.sec) AS allocated,
       SUM(j.gpu_equivalent * s.sec * CASE WHEN m.ok THEN m.useful_hours / m.allocated_gpu_hours
                                           ELSE 0 END) AS useful,
       SUM(j.gpu_equivalent * s.sec * CASE WHEN m.ok THEN m.waiting_hours / m.allocated_gpu_hours
                                           ELSE 0 END) AS waiting,
       SUM(j.gpu_equivalent * s.sec * CASE WHEN m.ok THEN m.held_idle_hours / m.allocated_gpu_hours
                                           ELSE 0 END) AS held_idle,
       SUM(j.gpu_equivalent * s.sec * CASE WHEN m.ok THEN m.no_process_hours / m.allocated_gpu_hours
                                           ELSE 0 END) AS no_process
FROM jobs_job j
LEFT JOIN (SELECT job_id, useful_hours, waiting_hours, held_idle_hours, no_process_hours,
                  allocated_gpu_hours,
                  status IN ('complete', 'live') AND allocated_gpu_hours > 0 AND measure <> ''
                  AS ok
           FROM jobs_jobmetrics) m ON m.job_id = j.id
CROSS JOIN LATERAL (SELECT GREATEST(EXTRACT(EPOCH FROM LEAST(COALESCE(j.end_time, %(now)s),
                                                             %(hi)s)
                                                    - GREATEST(j.start_time, %(lo)s)), 0)
                           ::double precision AS sec) s
WHERE j.start_time < %(hi)s AND (j.end_time IS NULL OR j.end_time > %(lo)s)
  AND j.gpu_equivalent > 0
GROUP BY j.team_id, j.user_name, j.partition, j.gpu_types
"""


def _fill(n_jobs: int) -> dict[str, Any]:
    """Teams, users, rates, jobs and archived splits; reused when the job count matches."""
    return fill_once(DB_URL, n_jobs, truncate=(
        "chargeback_statementline", "chargeback_statement", "chargeback_billingperiod",
        "chargeback_rate", "jobs_jobmetrics", "jobs_job", "accounts_membership",
        "accounts_team", "auth_user"), teams=TEAMS, per_team=USERS_PER_TEAM, write=_write)


def _write(cluster_id: int, users: list[tuple[Any, Any]], n_jobs: int) -> None:
    """The rate card (a default and an H100 price), the jobs and their archived splits, made
    by PostgreSQL itself (INSERT ... SELECT over generate_series, indexes built after): at
    10M jobs a row-by-row COPY from Python took hours on a shared 2-core machine."""
    from apps.chargeback.models import Rate

    Rate.objects.create(price=Decimal("2.0000"), valid_from=date(2026, 1, 1))
    Rate.objects.create(price=Decimal("3.5000"), gpu_model="h100", valid_from=date(2026, 1, 1))
    with indexes_built_after(["jobs_job", "jobs_jobmetrics"]):
        users_table(users)
        _insert_jobs(cluster_id, n_jobs)
        _insert_metrics()


def _ts(when: datetime) -> str:
    return f"'{when.isoformat()}'::timestamptz"


def _insert_jobs(cluster_id: int, n_jobs: int) -> None:
    """Job i: a uniform user; a start uniform over the five days before the month and the
    month; log-normal hours (mu 0.5, sigma 1.2, Box-Muller over two hashes) capped at 72,
    running when that ends past NOW; H100 on ``gpu`` twice as often as A100 on ``a100``;
    1, 1, 2, 4, 8, 8 or 16 GPUs; 2 % sharded (two shards, a quarter GPU, no GPU type)."""
    from apps.jobs.models import Job

    t0 = LO - timedelta(days=5)
    span = (HI - t0).total_seconds()
    # the SQL is this module's own: constants and hashed() expressions, never input
    draw = f"""(SELECT i,
        {_ts(t0)} + {hashed("i", 1)} * {span} * interval '1 second' AS start,
        least(72.0, exp(0.5 + 1.2 * sqrt(-2 * ln(1 - {hashed("i", 2)}))
                                   * cos(2 * pi() * {hashed("i", 3)}))) AS hours,
        (ARRAY['h100', 'h100', 'a100'])[1 + floor({hashed("i", 4)} * 3)::int] AS model,
        (ARRAY[1, 1, 2, 4, 8, 8, 16])[1 + floor({hashed("i", 5)} * 7)::int] AS n,
        {hashed("i", 6)} < 0.02 AS shards,
        floor({hashed("i", 7)} * (SELECT count(*) FROM bench_users))::int AS k
      FROM generate_series(0, {n_jobs - 1}) AS g(i)) s"""  # noqa: S608
    running = f"s.start + s.hours * interval '1 hour' > {_ts(NOW)}"
    insert_select(Job, {
        "cluster_id": str(cluster_id), "job_id": "2000000 + s.i",
        "display_id": "(2000000 + s.i)::text", "name": "'job'", "user_name": "bu.username",
        "user_id": "bu.user_id", "account": "bu.slug", "team_id": "bu.team_id",
        "partition": "CASE s.model WHEN 'a100' THEN 'a100' ELSE 'gpu' END", "qos": "'normal'",
        "state": f"CASE WHEN {running} THEN 'RUNNING' ELSE 'COMPLETED' END", "exit_code": "0",
        "submit_time": "s.start - interval '5 minutes'", "start_time": "s.start",
        "end_time": f"CASE WHEN {running} THEN NULL "
                    "ELSE s.start + s.hours * interval '1 hour' END",
        "time_limit_min": "4320", "nodes": "'gpu01'", "node_count": "greatest(1, s.n / 8)",
        "cpus": "s.n * 8", "memory_mb": "s.n * 64000",
        "gpus": "CASE WHEN s.shards THEN 0 ELSE s.n END",
        "gpu_shards": "CASE WHEN s.shards THEN 2 ELSE 0 END",
        "gpu_equivalent": "CASE WHEN s.shards THEN 0.25 ELSE s.n END",
        "gpu_types": "CASE WHEN s.shards THEN '{}'::jsonb "
                     "ELSE jsonb_build_object(s.model, s.n) END",
    }, f"FROM {draw} JOIN bench_users bu ON bu.k = s.k")


def _insert_metrics() -> None:
    """An archived split for 70 % of the jobs: a uniform useful share, the rest 40 % waiting,
    40 % held idle, 20 % no process, like the archive's."""
    from apps.jobs.models import JobMetrics

    insert_select(JobMetrics, {
        "job_id": "m.id", "status": "'complete'", "measure": "'sm_active'",
        "allocated_gpu_hours": "m.h", "useful_hours": "m.h * m.f",
        "waiting_hours": "m.h * (1 - m.f) * 0.4", "held_idle_hours": "m.h * (1 - m.f) * 0.4",
        "no_process_hours": "m.h * (1 - m.f) * 0.2", "coverage": "1.0",
    }, f"""FROM (SELECT id, {hashed("job_id", 9)} AS f,
                        gpu_equivalent * EXTRACT(EPOCH FROM COALESCE(end_time, {_ts(NOW)})
                                                 - start_time)::float8 / 3600 AS h
                 FROM jobs_job WHERE {hashed("job_id", 10)} < 0.7) m""")  # noqa: S608


def _floor() -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(FLOOR_SQL, {"lo": LO, "hi": HI, "now": NOW})
        return list(cur.fetchall())


def _beacon() -> int:
    from apps.chargeback import services

    return services.refresh_statements(MONTH, now=NOW).lines


def _check_agreement(floor_rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """The statements' allocated hours equal the floor's (so both measure the same work)."""
    from django.db.models import Sum

    from apps.chargeback.models import Statement

    floor_hours = sum(row[4] for row in floor_rows) / 3600
    ours = float(Statement.objects.filter(period__month=MONTH)
                 .aggregate(s=Sum("allocated_hours"))["s"])
    return {"floor_gpu_hours": round(floor_hours, 1), "statement_gpu_hours": round(ours, 1),
            # lines are rounded to 0.0001 GPU-hour each: a few thousand lines, well under 1
            "agree": abs(floor_hours - ours) <= 1.0}


def main(quick: bool) -> Result:
    n_jobs = job_count("BENCH_CHARGEBACK_JOBS", quick)
    repeats = 3 if quick or n_jobs > 1_000_000 else 5  # at 10M each side takes ~a minute
    ensure_database(DB_URL)
    os.environ["TIME_ZONE"] = "UTC"  # the month's edges are UTC midnights
    with tempfile.TemporaryDirectory(prefix="beacon-bench-") as data_dir:
        setup_django(data_dir, DB_URL)
        fill = _fill(n_jobs)
        _beacon()  # warm: first drafts and caches; later runs rewrite them, as the hourly task does
        floor_times, beacon_times, lines, groups = _measure(repeats)
        agreement = _check_agreement(groups)
    floor, ours = stats(floor_times), stats(beacon_times)
    ratio = stats([b / f for b, f in zip(beacon_times, floor_times, strict=True)])
    return _result(quick, n_jobs, fill, floor, ours, ratio, lines, groups, agreement)


def _measure(repeats: int) -> tuple[list[float], list[float], int, list[tuple[Any, ...]]]:
    """Floor and Beacon in turn, so load on this shared machine hits both alike."""
    floor_times, beacon_times, lines, groups = [], [], 0, []
    for _ in range(repeats):
        started = time.perf_counter()
        groups = _floor()
        floor_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        lines = _beacon()
        beacon_times.append(time.perf_counter() - started)
    return floor_times, beacon_times, lines, groups


def _result(quick: bool, n_jobs: int, fill: dict[str, Any], floor: Any, ours: Any, ratio: Any,
            lines: int, groups: list[tuple[Any, ...]], agreement: dict[str, Any]) -> Result:
    return Result(
        name="chargeback", title="Chargeback: a month's statements for 50 teams",
        command=sized_command("chargeback", "BENCH_CHARGEBACK_JOBS", quick),
        inputs={"jobs": f"{n_jobs:,}", "teams": TEAMS, "users": TEAMS * USERS_PER_TEAM,
                "archived splits": "70 %", "database": "PostgreSQL (filled by SQL)",
                "fill": f"{fill['fill_s']} s" + (" (reused)" if fill["reused"] else "")},
        columns=["step", "seconds", "rows"],
        rows=[["hand-written SQL GROUP BY (floor)", floor.text(" s", 2),
               f"{len(groups)} groups"],
              ["refresh_statements (aggregate, price, write drafts)", ours.text(" s", 2),
               f"{lines} lines"],
              ["ratio Beacon / floor", ratio.text("", 2), ""]],
        checks=[Check("statements <= 1.5 x the SQL GROUP BY floor", f"{ratio.median:.2f} x",
                      ratio.median <= 1.5),
                Check("statements' allocated GPU-hours = the floor's",
                      f"{agreement['statement_gpu_hours']} vs {agreement['floor_gpu_hours']}",
                      bool(agreement["agree"]))],
        notes=["Both sides compute the same sums (overlap with the month x GPUs, and the four "
               "split parts weighted by the archive), group by team, user, partition and GPU "
               "types, and fetch every group. Beacon also prices every line in Decimal and "
               "rewrites 50 draft statements with their lines in one transaction."],
    )


if __name__ == "__main__":
    cli("chargeback", main)
