"""What the PostgreSQL benchmarks over many jobs (chargeback, slo, reports) set up alike: the
schema, teams of users with one lead each, and a fill kept between runs while the job count
matches (``fill_once``). Their jobs differ (each bench writes its own by COPY)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from bench.common import ensure_database


def migrate(db_url: str) -> None:
    """Migrate; a database left by another checkout's migrations is made anew."""
    from django.core.management import call_command
    from django.db import DatabaseError, connection

    try:
        call_command("migrate", verbosity=0)
    except DatabaseError:
        connection.close()
        ensure_database(db_url, fresh=True)
        call_command("migrate", verbosity=0)


def teams_and_users(teams: int, per_team: int) -> list[tuple[Any, Any]]:
    """``teams`` teams (team00, team01, ...) of ``per_team`` users, the first one its lead;
    (user, team) pairs in creation order."""
    from django.contrib.auth.models import User

    from apps.accounts.models import Membership, Team

    users = []
    for t in range(teams):
        team = Team.objects.create(slug=f"team{t:02d}", name=f"Team {t:02d}")
        for u in range(per_team):
            user = User.objects.create(username=f"u{t:02d}{u}")
            users.append((user, team))
            Membership.objects.create(user=user, team=team, role="lead" if u == 0 else "member")
    return users


def fill_once(db_url: str, n_jobs: int, *, truncate: Sequence[str], teams: int, per_team: int,
              write: Callable[[int, list[tuple[Any, Any]], int], None]) -> dict[str, Any]:
    """The bench's database with ``n_jobs`` jobs, reused when it holds that many already.

    Otherwise: ``truncate`` (with CASCADE), ``teams`` teams of ``per_team`` users, then
    ``write(cluster_pk, users, n_jobs)`` writes the jobs and whatever else the bench needs, then
    ANALYZE. Returns ``reused`` and the fill's seconds, for the bench's inputs."""
    from django.db import connection

    from apps.clusters.models import Cluster
    from apps.jobs.models import Job

    migrate(db_url)
    cluster, _ = Cluster.objects.get_or_create(name="bench")
    if Job.objects.count() == n_jobs:
        return {"reused": True, "fill_s": 0.0}
    started = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute(f"TRUNCATE {', '.join(truncate)} CASCADE")
    write(cluster.pk, teams_and_users(teams, per_team), n_jobs)
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    return {"reused": False, "fill_s": round(time.perf_counter() - started, 1)}


def copy_jobs(rows: Iterable[dict[str, Any]]) -> None:
    """COPY ``rows`` (column -> value) into ``jobs_job``; a column a row leaves out gets its
    field's default, so a column added later does not break the fill."""
    from django.db import connection

    from apps.jobs.models import Job

    fields = [f for f in Job._meta.concrete_fields if not f.primary_key]
    stamp = datetime.now(UTC)
    defaults = {f.column: f.get_db_prep_save(f.get_default(), connection) for f in fields}
    defaults.update(created_at=stamp, updated_at=stamp)
    cols = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    connection.ensure_connection()
    raw = connection.connection  # psycopg's own connection: COPY is not in Django's API
    with raw.cursor() as cur, cur.copy(f"COPY jobs_job ({cols}) FROM STDIN") as copy:
        for row in rows:
            merged = {**defaults, **row}
            copy.write_row([merged[f.column] for f in fields])


def copy_metrics(rows: Iterable[dict[str, Any]]) -> None:
    """COPY ``rows`` (field name -> value) into ``jobs_jobmetrics`` (archived splits); a
    field a row leaves out gets its default (JSON defaults as text)."""
    from django.db import connection

    from apps.jobs.models import JobMetrics

    fields = [f for f in JobMetrics._meta.concrete_fields if f.attname != "id"]
    defaults = {f.attname: f.get_default() for f in fields}
    defaults = {k: json.dumps(v) if isinstance(v, dict | list) else v
                for k, v in defaults.items()}
    cols = ", ".join(f.column for f in fields)
    connection.ensure_connection()
    raw = connection.connection  # psycopg's own connection: COPY is not in Django's API
    with raw.cursor() as cur, cur.copy(f"COPY jobs_jobmetrics ({cols}) FROM STDIN") as copy:
        for row in rows:
            merged = {**defaults, **row}
            copy.write_row([merged[f.attname] for f in fields])


TIMES = ("submit_time", "eligible_time", "start_time", "end_time")


def replicate_jobs(base: int, copies: int, shift_s: int = 97) -> None:
    """Grow the ``base`` jobs just written to ``base x copies``, in SQL: copy ``k`` (1 ..
    copies - 1) is every job again with ``job_id + k x base`` and its times ``k x shift_s``
    seconds earlier (a job running or pending stays so), its archived split with it.

    Why: writing rows in Python runs at ~10k jobs a second on these shared cores, so 10M
    jobs took most of an hour and a half; INSERT ... SELECT takes minutes. The copies keep
    the base's mix (users, teams, waits, endings, sizes) and the number of groups a report
    has (users x days); only the row count grows, which is what the benches measure."""
    from django.db import connection

    from apps.jobs.models import Job, JobMetrics

    job_cols = [f.column for f in Job._meta.concrete_fields if not f.primary_key]

    def value(col: str) -> str:
        if col == "job_id":
            return "j.job_id + k * %(base)s"
        if col == "display_id":
            return "(j.job_id + k * %(base)s)::text"
        if col in TIMES:
            return f"j.{col} - k * %(shift)s * interval '1 second'"
        return f"j.{col}"

    metric_cols = [f.column for f in JobMetrics._meta.concrete_fields
                   if not f.primary_key and f.column != "job_id"]
    params = {"base": base, "shift": shift_s, "copies": copies}
    # the column names are the models'; the numbers are parameters
    jobs = (f"INSERT INTO jobs_job ({', '.join(job_cols)}) "  # noqa: S608
            f"SELECT {', '.join(value(c) for c in job_cols)} FROM jobs_job j "
            "CROSS JOIN generate_series(1, %(copies)s - 1) k")
    metrics = (f"INSERT INTO jobs_jobmetrics ({', '.join(metric_cols)}, job_id) "  # noqa: S608
               f"SELECT {', '.join('m.' + c for c in metric_cols)}, c.id "
               "FROM jobs_jobmetrics m JOIN jobs_job j ON j.id = m.job_id "
               "CROSS JOIN generate_series(1, %(copies)s - 1) k "
               "JOIN jobs_job c ON c.cluster_id = j.cluster_id "
               "AND c.job_id = j.job_id + k * %(base)s")
    with connection.cursor() as cur:
        cur.execute(jobs, params)
        cur.execute(metrics, params)
