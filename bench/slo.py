"""SLO scorecards: 50 teams over 28 days and 1,000,000 jobs (PostgreSQL), against hand-written
SQL computing the same figures in the same run; and the scorecard page from stored results.

1. Fill a dedicated PostgreSQL database (``<BENCH_DB_PREFIX>_slo``, bench/common.py) with N
   GPU jobs of 500 users in 50 teams over the 30 days before "now" (waits from none to hours,
   some on the team's own limits, every kind of ending, three partitions, running jobs) and
   an archived split for 70 % of them (some with hardware XIDs), through COPY (kept between
   runs when the count matches).
2. Floor: hand-written SQL for the three default SLOs (queue wait, job success, GPU
   efficiency, rolling 28 days): the same counts per team, per day, per burn window, the
   queue-wait breakdown with its percentiles (GROUPING SETS), the prorated GPU-seconds per
   day, and the worst jobs per team, every row fetched.
3. Beacon: ``services.compute_scorecards``: the ORM aggregates, the pure maths, and every
   scorecard written (150 rows in one transaction per SLO).
4. Targets (issue 7): Beacon <= 1.5 x the floor (medians of interleaved runs), and the team
   scorecard page rendered from the stored results in < 100 ms of server time (p95 of the
   ``Server-Timing`` header over repeated requests, in-process; the overview page too).
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import BenchError, Check, Result, cli, database_url, ensure_database, stats
from bench.fill import copy_jobs, copy_metrics, fill_once, replicate_jobs

DB_URL = database_url("slo")
TEAMS, USERS_PER_TEAM = 50, 10
NOW = datetime(2026, 11, 30, 23, 0, tzinfo=UTC)
LO = NOW - timedelta(days=28)
PAGE_REQUESTS = 40
TEAM_PAGE, OVERVIEW = "team scorecard (lead)", "overview, 150 scorecards (admin)"
REPLICATE_BASE = 1_000_000  # a multiple of it past it is this many jobs, copied
OWN = ("Dependency", "JobHeldUser", "JobArrayTaskLimit")  # a sample; the SQL uses the table


def _setup(data_dir: str) -> None:
    os.environ.update(DATABASE_URL=DB_URL, BEACON_DATA_DIR=data_dir, LOG_LEVEL="warning",
                      DJANGO_SETTINGS_MODULE="portal.settings", TIME_ZONE="UTC",
                      STATIC_ROOT=os.path.join(data_dir, "static"),
                      ALLOWED_HOSTS="testserver,127.0.0.1,localhost")
    import django

    django.setup()


def fill(n_jobs: int) -> dict[str, Any]:
    """Teams, users, jobs and archived splits; reused when the job count already matches (the
    reports bench fills and reuses this same database)."""
    filled = fill_once(DB_URL, n_jobs, truncate=(
        "slo_scorecard", "slo_snapshot", "slo_alert", "jobs_jobmetrics", "jobs_job",
        "accounts_membership", "accounts_team", "auth_user"),
        teams=TEAMS, per_team=USERS_PER_TEAM, write=write_jobs)
    _default_objectives()
    return filled


def write_jobs(cluster_id: int, users: list[tuple[Any, Any]], n_jobs: int) -> None:
    """An admin, ``n_jobs`` jobs of ``users`` and their archived splits (reports' too)."""
    from django.contrib.auth.models import User

    User.objects.create(username="benchadmin", is_staff=True)
    # past 1M, 1M jobs written here and copied in SQL (bench/fill.py replicate_jobs)
    copies = n_jobs // REPLICATE_BASE if n_jobs % REPLICATE_BASE == 0 else 1
    _copy_jobs(cluster_id, users, n_jobs // copies)
    _copy_metrics()
    if copies > 1:
        replicate_jobs(n_jobs // copies, copies)


def _default_objectives() -> None:
    """Exactly the three default SLOs, as a new site has them (TRUNCATE ... CASCADE through
    the teams removes objectives; seeding puts them back)."""
    from django.apps import apps

    from apps.slo.defaults import OBJECTIVES, seed
    from apps.slo.models import Objective

    seed(apps)
    Objective.objects.exclude(name__in=[o[0] for o in OBJECTIVES]).delete()
    Objective.objects.update(enabled=True, window="rolling_28d", scope="team", team=None,
                             cluster=None, partition="")


def _job_row(rng: random.Random, i: int, user: Any, team: Any) -> dict[str, Any]:
    submit = NOW - timedelta(seconds=rng.random() * 30 * 86400)
    eligible = submit + timedelta(minutes=rng.choice((0, 0, 0, 0, 5, 40)))
    start = eligible + timedelta(minutes=min(rng.expovariate(1 / 25.0), 3000))
    end = start + timedelta(hours=min(rng.lognormvariate(0.8, 1.1), 96))
    state = rng.choice(("COMPLETED",) * 16 + ("FAILED", "FAILED", "CANCELLED", "TIMEOUT",
                                               "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"))
    if start >= NOW:
        start = end = None
        state = "PENDING"
    elif end >= NOW:
        end, state = None, "RUNNING"
    gpus = rng.choice((1, 1, 2, 4, 8, 8, 16, 64))
    reason = rng.choice(("",) * 12 + ("Priority", "Resources", "AssocGrpGRES", *OWN))
    return {"cluster_id": 0, "job_id": 3_000_000 + i, "display_id": str(3_000_000 + i),
            "name": rng.choice(("llm-pretrain", "finetune", "eval", "notebook", "sweep")),
            "user_name": user.username, "user_id": user.pk, "account": team.slug,
            "team_id": team.pk, "partition": rng.choice(("gpu", "gpu", "a100", "interactive")),
            "qos": "normal", "state": state, "wait_reason": reason, "exit_code": 0,
            "submit_time": submit, "eligible_time": eligible, "start_time": start,
            "end_time": end, "time_limit_min": 5760, "nodes": "gpu01" if start else "",
            "node_count": max(1, gpus // 8) if start else 0, "cpus": gpus * 8,
            "memory_mb": gpus * 64000, "gpus": gpus if start else 0,
            "gpu_equivalent": float(gpus) if start else 0.0}


def _copy_jobs(cluster_id: int, users: list[tuple[Any, Any]], n_jobs: int) -> None:
    rng = random.Random(7)

    def rows() -> Iterator[dict[str, Any]]:
        for i in range(n_jobs):
            user, team = users[rng.randrange(len(users))]
            yield {**_job_row(rng, i, user, team), "cluster_id": cluster_id}

    copy_jobs(rows())


def _copy_metrics() -> None:
    """An archived split for 70 % of the started jobs, some with a hardware XID."""
    from django.db import connection

    rng = random.Random(9)
    with connection.cursor() as cur:
        cur.execute("SELECT id, gpu_equivalent, EXTRACT(EPOCH FROM COALESCE(end_time, %s) "
                    "- start_time), state FROM jobs_job WHERE start_time IS NOT NULL", [NOW])
        jobs = cur.fetchall()

    def rows() -> Iterator[dict[str, Any]]:
        for pk, gpus, seconds, state in jobs:
            if rng.random() >= 0.7:
                continue
            hours = gpus * float(seconds) / 3600
            yield {"job_id": pk, "status": "live" if state == "RUNNING" else "complete",
                   "measure": "sm_active", "allocated_gpu_hours": hours,
                   "useful_hours": hours * rng.random(), "coverage": 1.0,
                   "xid_gpus": 1 if state == "FAILED" and rng.random() < 0.2 else 0,
                   "ecc_dbe": 0}

    copy_metrics(rows())


# --- The floor: hand-written SQL ----------------------------------------------------------------
# Templates ($names filled by _floor_sql from the constants below; values are parameters).

POPULATION = ("j.team_id IS NOT NULL AND j.gpu_equivalent > 0 AND j.node_count > 0 "
              "AND j.start_time IS NOT NULL")
BURN = (300, 1800, 3600, 7200, 21600, 86400, 259200)
WAITS = """WITH w AS (
    SELECT j.id, j.team_id AS team, j.partition AS part, j.start_time AS t,
           CASE WHEN j.gpu_equivalent <= 1 THEN '1' WHEN j.gpu_equivalent <= 4 THEN '2-4'
                WHEN j.gpu_equivalent <= 8 THEN '5-8' WHEN j.gpu_equivalent <= 32 THEN '9-32'
                ELSE '33+' END AS bucket,
           FLOOR(EXTRACT(EPOCH FROM j.start_time - %(lo)s) / 86400)::int AS day,
           GREATEST(EXTRACT(EPOCH FROM j.start_time
                            - COALESCE(j.eligible_time, j.submit_time)), 0) AS wait,
           GREATEST(EXTRACT(EPOCH FROM COALESCE(j.eligible_time, j.submit_time)
                            - j.submit_time), 0) AS before,
           ($own) AS own
    FROM jobs_job j WHERE $population AND j.start_time >= %(lo)s AND j.start_time < %(now)s)
"""
QUEUE = WAITS + """
SELECT team, part, bucket, own, COUNT(*), COUNT(*) FILTER (WHERE wait <= %(target)s),
       COUNT(*) FILTER (WHERE before > 0),
       percentile_disc(0.5) WITHIN GROUP (ORDER BY wait + CASE WHEN own THEN before ELSE 0 END),
       percentile_disc(0.9) WITHIN GROUP (ORDER BY wait + CASE WHEN own THEN before ELSE 0 END),
       $burn_total, $burn_good
FROM w GROUP BY GROUPING SETS ((team, own), (team, part, bucket, own))"""
QUEUE_DAYS = WAITS + """
SELECT team, day, COUNT(*) FILTER (WHERE NOT own),
       COUNT(*) FILTER (WHERE NOT own AND wait <= %(target)s)
FROM w GROUP BY team, day"""
RULE = """CASE WHEN j.state IN ('FAILED','TIMEOUT','CANCELLED','NODE_FAIL','OUT_OF_MEMORY',
                            'PREEMPTED','BOOT_FAIL','DEADLINE')
                AND (COALESCE(m.xid_gpus, 0) > 0 OR COALESCE(m.ecc_dbe, 0) > 0) THEN 'gpu_fault'
           WHEN j.state = 'NODE_FAIL' THEN 'node_fail'
           WHEN j.state = 'PREEMPTED' THEN 'preempted'
           WHEN j.state = 'BOOT_FAIL' THEN 'boot_fail'
           WHEN j.state = 'FAILED' AND j.wait_reason ~* 'launch|prolog|SystemFailure'
                THEN 'launch_failed'
           WHEN j.state = 'COMPLETED' THEN 'completed'
           WHEN j.state = 'FAILED' THEN 'exit_nonzero'
           WHEN j.state = 'OUT_OF_MEMORY' THEN 'out_of_memory'
           WHEN j.state = 'CANCELLED' THEN 'cancelled'
           WHEN j.state IN ('TIMEOUT', 'DEADLINE') THEN 'timeout'
           ELSE 'unclassified' END"""
ENDED = """FROM jobs_job j LEFT JOIN jobs_jobmetrics m ON m.job_id = j.id
WHERE $population AND j.end_time >= %(lo)s AND j.end_time < %(now)s
  AND j.state NOT IN ('PENDING', 'RUNNING', 'SUSPENDED', 'COMPLETING', 'REQUEUED')"""
SUCCESS = """SELECT j.team_id, $rule AS rule,
       FLOOR(EXTRACT(EPOCH FROM j.end_time - %(lo)s) / 86400)::int AS day, COUNT(*),
       $burn_ended
$ended GROUP BY 1, 2, 3"""
RUNNING = """WITH e AS (
    SELECT j.id, j.team_id AS team, j.gpu_equivalent AS g,
           CASE WHEN m.job_id IS NULL THEN 0.0 ELSE 1.0 END AS meas,
           COALESCE(m.useful_hours / NULLIF(m.allocated_gpu_hours, 0), 0) AS frac,
           EXTRACT(EPOCH FROM GREATEST(j.start_time, %(lo)s) - %(lo)s) AS s,
           EXTRACT(EPOCH FROM LEAST(COALESCE(j.end_time, %(now)s), %(now)s) - %(lo)s) AS e
    FROM jobs_job j LEFT JOIN jobs_jobmetrics m ON m.job_id = j.id
         AND m.status IN ('complete', 'live', 'partial') AND m.measure <> ''
         AND m.allocated_gpu_hours > 0
    WHERE $population AND j.start_time < %(now)s AND (j.end_time IS NULL OR j.end_time > $since))
"""
SPANS = RUNNING + """
SELECT team, FLOOR(s / 86400)::int AS sd, CEIL(e / 86400)::int - 1 AS ed,
       SUM(g), SUM(g * s), SUM(g * e), SUM(g * meas), SUM(g * meas * s), SUM(g * meas * e),
       SUM(g * meas * frac), SUM(g * meas * frac * s), SUM(g * meas * frac * e)
FROM e GROUP BY 1, 2, 3"""
SPANS_BURN = RUNNING + "SELECT team, $burn_gpu FROM e GROUP BY team"  # noqa: S608 (constants)
WORST_WAITS = WAITS + """, r AS (
    SELECT id, team, wait, ROW_NUMBER() OVER (PARTITION BY team ORDER BY wait DESC, id) AS rank
    FROM w WHERE NOT own AND wait > %(target)s)
SELECT r.id, c.name, j.job_id, j.display_id, j.name, j.user_name, j.partition, r.team, r.wait
FROM r JOIN jobs_job j ON j.id = r.id JOIN clusters_cluster c ON c.id = j.cluster_id
WHERE r.rank <= 5"""  # noqa: S608 (constants)
WORST_ENDINGS = """WITH f AS (
    SELECT j.id, j.team_id AS team, $rule AS rule,
           j.gpu_equivalent * EXTRACT(EPOCH FROM j.end_time - j.start_time) AS lost
    $ended),
r AS (SELECT id, team, rule, lost,
             ROW_NUMBER() OVER (PARTITION BY team ORDER BY lost DESC, id) AS rank
      FROM f WHERE rule IN ('gpu_fault', 'node_fail', 'preempted', 'boot_fail',
                            'launch_failed'))
SELECT r.id, j.job_id, j.display_id, j.user_name, r.team, r.rule, r.lost
FROM r JOIN jobs_job j ON j.id = r.id WHERE r.rank <= 5"""
WORST_EFFICIENCY = RUNNING + """, r AS (
    SELECT id, team, frac, g * (1 - frac) * (e - s) AS waste,
           ROW_NUMBER() OVER (PARTITION BY team ORDER BY g * (1 - frac) * (e - s) DESC, id)
           AS rank
    FROM e WHERE meas = 1.0 AND frac <= 0.5 AND g * (1 - frac) * (e - s) > 0)
SELECT r.id, j.job_id, j.display_id, j.user_name, r.team, r.frac, r.waste
FROM r JOIN jobs_job j ON j.id = r.id WHERE r.rank <= 5"""  # noqa: S608 (constants)


def _floor_sql() -> list[str]:
    """The floor's statements, from the templates above: the queue wait per team and per
    breakdown row (GROUPING SETS) and per day, the endings per rule and day, the prorated
    GPU-seconds per (first day, last day) and per burn window, and the worst jobs."""
    from string import Template

    from apps.analysis.pending import OWN_REASONS

    def burn(condition: str, column: str) -> str:
        return ", ".join(f"COUNT(*) FILTER (WHERE {condition} AND {column} >= %(b{w})s)"
                         for w in BURN)

    gpu = ", ".join(f"SUM(g * meas * GREATEST(e - GREATEST(s, {86400 * 28 - w}), 0)), "
                    f"SUM(g * meas * frac * GREATEST(e - GREATEST(s, {86400 * 28 - w}), 0))"
                    for w in BURN)
    own = " OR ".join([f"j.wait_reason = '{r}'" for r in sorted(OWN_REASONS)]
                      + ["j.wait_reason LIKE 'Assoc%%'", "j.wait_reason LIKE 'QOS%%'"])
    parts = {"own": own, "population": POPULATION, "rule": RULE,
             "burn_total": burn("TRUE", "t"), "burn_good": burn("wait <= %(target)s", "t"),
             "burn_ended": burn("TRUE", "j.end_time"), "burn_gpu": gpu, "since": "%(lo)s"}
    parts["ended"] = Template(ENDED).substitute(parts)

    def sql(template: str, **extra: str) -> str:
        return Template(template).substitute({**parts, **extra})

    return [sql(QUEUE), sql(QUEUE_DAYS), sql(SUCCESS), sql(SPANS),
            sql(SPANS_BURN, since="%(b259200)s"), sql(WORST_WAITS), sql(WORST_ENDINGS),
            sql(WORST_EFFICIENCY)]


def _params() -> dict[str, Any]:
    from apps.slo.models import Objective

    wait = Objective.objects.get(name="Queue wait").wait_minutes or 30
    return {"lo": LO, "now": NOW, "target": wait * 60.0,
            **{f"b{s}": max(LO, NOW - timedelta(seconds=s)) for s in BURN}}


def _floor(statements: list[str], params: dict[str, Any]) -> list[list[tuple[Any, ...]]]:
    from django.db import connection

    out = []
    with connection.cursor() as cur:
        for sql in statements:
            cur.execute(sql, params)
            out.append(list(cur.fetchall()))
    return out


def _beacon() -> int:
    from apps.slo import services

    return services.compute_scorecards(NOW)


def _agreement(floor_rows: list[list[tuple[Any, ...]]]) -> dict[str, Any]:
    """Beacon's stored totals equal the floor's: jobs counted for queue wait and success,
    measured GPU-seconds for efficiency."""
    from django.db.models import Sum

    from apps.slo.models import Scorecard

    floor = {"Queue wait": sum(r[4] for r in floor_rows[0]  # the (team, own) set, counted
                               if r[1] is None and not r[3]),
             "Job success": sum(r[3] for r in floor_rows[2] if r[1] != "unclassified"),
             "GPU efficiency": sum(r[8] - r[7] for r in floor_rows[3])}
    ours = {name: Scorecard.objects.filter(objective__name=name).aggregate(s=Sum("total"))["s"]
            or 0.0 for name in floor}
    agree = all(abs(ours[n] - floor[n]) <= 1e-6 * max(abs(floor[n]), 1.0) for n in floor)
    return {"floor": floor, "ours": ours, "agree": agree}


def _page_times() -> dict[str, list[float]]:
    """Server-Timing of the team scorecard (its lead) and the overview (an admin), in-process,
    from the stored results (with this month's snapshots for the history)."""
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    from apps.slo import services

    services.record_snapshots(NOW, force=True)
    call_command("collectstatic", interactive=False, verbosity=0)
    out: dict[str, list[float]] = {}
    for label, user, path in ((TEAM_PAGE, "u000", "/slo/teams/team00/"),
                              (OVERVIEW, "benchadmin", "/slo/")):
        client = Client()
        client.force_login(User.objects.get(username=user))
        client.get(path)  # warm
        times = []
        for _ in range(PAGE_REQUESTS):
            response = client.get(path)
            if response.status_code != 200:
                raise BenchError(f"{path} answered {response.status_code}")
            times.append(float(response["Server-Timing"].split("dur=")[1]))
        out[label] = times
    return out


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def job_count(quick: bool) -> int:
    """The job count: ``BENCH_SLO_JOBS`` (the issue's 10M is a run with it set), else 1M
    (``--quick``: 100k). The reports bench reads the same, as it reuses these jobs."""
    n_jobs = int(os.environ.get("BENCH_SLO_JOBS") or (100_000 if quick else 1_000_000))
    if n_jobs < 1000:
        raise BenchError(f"BENCH_SLO_JOBS={n_jobs}: give at least 1,000 jobs")
    return n_jobs


def repeat_count(default: int) -> int:
    """Interleaved runs per side: ``BENCH_SLO_REPEATS`` (a 10M run takes minutes a side, so
    one is what fits), else ``default``; the reports bench reads the same."""
    return max(1, int(os.environ.get("BENCH_SLO_REPEATS") or default))


def main(quick: bool) -> Result:
    n_jobs = job_count(quick)
    repeats = repeat_count(3 if quick else 5)
    ensure_database(DB_URL)
    _setup(tempfile.mkdtemp(prefix="beacon-bench-"))
    filled = fill(n_jobs)
    statements, params = _floor_sql(), _params()
    _beacon()  # warm: first scorecards and caches; later runs rewrite them, as beat does
    floor_times, beacon_times, rows, written = [], [], [], 0
    for _ in range(repeats):  # interleaved, so load on this shared machine hits both alike
        started = time.perf_counter()
        rows = _floor(statements, params)
        floor_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        written = _beacon()
        beacon_times.append(time.perf_counter() - started)
    floor, ours = stats(floor_times), stats(beacon_times)
    ratio = stats([b / f for b, f in zip(beacon_times, floor_times, strict=True)])
    agreement = _agreement(rows)
    pages = _page_times()
    page_rows = [[f"page: {label}", f"{stats(t).median:.1f} ms median, {_p95(t):.1f} ms p95",
                  f"{len(t)} requests"] for label, t in pages.items()]
    return Result(
        name="slo", title="SLO scorecards: 50 teams over 28 days",
        command="python -m bench slo" + (" --quick" if quick else ""),
        inputs={"jobs": f"{n_jobs:,}", "teams": TEAMS, "users": TEAMS * USERS_PER_TEAM,
                "SLOs": "queue wait, job success, GPU efficiency (rolling 28 days)",
                "archived splits": "70 %", "database": "PostgreSQL (COPY-filled)",
                "fill": f"{filled['fill_s']} s" + (" (reused)" if filled["reused"] else "")},
        columns=["step", "time", "rows"],
        rows=[["hand-written SQL (floor): counts, days, burn windows, breakdown, worst jobs",
               floor.text(" s", 2), f"{sum(len(r) for r in rows)} rows"],
              ["compute_scorecards (ORM aggregates, pure maths, write scorecards)",
               ours.text(" s", 2), f"{written} scorecards"],
              ["ratio Beacon / floor", ratio.text("", 2), ""], *page_rows],
        checks=[Check("scorecards <= 1.5 x the hand-written SQL", f"{ratio.median:.2f} x",
                      ratio.median <= 1.5),
                Check("scorecards count the floor's events", ", ".join(
                    f"{n}: {agreement['ours'][n]:.6g} vs {agreement['floor'][n]:.6g}"
                    for n in agreement["floor"]), bool(agreement["agree"])),
                Check("team scorecard page < 100 ms server time (p95)",
                      f"{_p95(pages[TEAM_PAGE]):.1f} ms", _p95(pages[TEAM_PAGE]) < 100)],
        notes=["Both sides compute the three default SLOs' figures for 50 teams: events and "
               "good events per team, per trend day and per burn window (5 m to 3 d), the "
               "queue-wait breakdown by partition and GPU-count bucket with p50/p90 "
               "(percentile_disc), the job endings per rule, the GPU-seconds prorated per day, "
               "and the five worst jobs per team; every row is fetched. Beacon also runs the "
               "pure budget and burn-rate maths and rewrites 150 scorecards. Page times are "
               "Django's own (Server-Timing), rendering stored scorecards only; the "
               "overview (every team's three scorecards on one page) has no target in issue "
               "7 and is shown for scale."],
    )


if __name__ == "__main__":
    cli("slo", main)
