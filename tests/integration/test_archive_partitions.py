"""The archive's monthly partitions on a real PostgreSQL (issue 29; apps/jobs/partitions.py).

Runs on the suite's own database when DATABASE_URL is PostgreSQL (as under CI); on SQLite it
skips (a failure under CI=true). Each test's DDL rolls back with its transaction.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from apps.core.models import TaskRun
from apps.jobs import partitions
from apps.jobs.models import Job, JobMetrics, JobMetricSummary, JobNodeMetrics
from tests.conftest import make_job
from tests.integration.services import require

pytestmark = [pytest.mark.integration("postgres"), pytest.mark.django_db]
NOW = datetime(2026, 12, 7, 12, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _postgres() -> None:
    require(connection.vendor == "postgresql", "postgres",
            "DATABASE_URL=postgres://postgres@127.0.0.1:5432/beacon pytest ...")


def _archive(job: Job, gpus: int = 2) -> None:
    """What archive._write stores for a job: one row per GPU and per node, and JobMetrics."""
    JobMetrics.objects.create(job=job, status=JobMetrics.Status.COMPLETE, measure="gpu_util")
    JobMetricSummary.objects.bulk_create([JobMetricSummary(
        job=job, host="gpu01", gpu_index=i, measure="gpu_util", measured_s=60, mean=0.5,
        p5=0.1, p50=0.5, p95=0.9, idle_fraction=0, useful=1, waiting=0, held_idle=0,
        no_process=0) for i in range(gpus)])
    JobNodeMetrics.objects.create(job=job, host="gpu01")
    # the test's transaction holds the deferred foreign-key checks, which would keep DDL on
    # these tables waiting ("pending trigger events"); a real run commits first
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def _where(model: Any, job: Job) -> set[str]:
    """The partitions ``job``'s rows of ``model`` are stored in."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT tableoid::regclass::text FROM {model._meta.db_table} "  # noqa: S608
                       "WHERE job_id = %s", [job.pk])
        return {row[0] for row in cursor.fetchall()}


def _job(world: Any, job_id: int, submit: datetime, end: datetime | None) -> Job:
    return make_job(world.cluster, job_id, world.users["bob"], world.team_a, submit_time=submit,
                    start_time=submit, end_time=end,
                    state=Job.State.RUNNING if end is None else Job.State.COMPLETED)


def test_the_archive_tables_are_partitioned_by_month_with_a_default(db: Any) -> None:
    assert partitions.partitioned()
    with connection.cursor() as cursor:
        for table in partitions.TABLES:
            cursor.execute("SELECT pg_get_partkeydef(%s::regclass)", [table])
            assert cursor.fetchone()[0] == "RANGE (month)"
            cursor.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE "
                           "conrelid = %s::regclass AND contype = 'p'", [table])
            assert cursor.fetchone()[0] == "PRIMARY KEY (id, month)"
        names = {p.name for t in partitions.TABLES for p in partitions.partitions(t)}
    assert {"jobs_jobmetricsummary_default", "jobs_jobnodemetrics_default"} <= names


def test_rows_go_to_the_jobs_end_month_or_while_running_its_submit_month(world: Any) -> None:
    for table in partitions.TABLES:
        for month in (date(2026, 10, 1), date(2026, 11, 1)):
            partitions.create_month(table, month)
    ended = _job(world, 900, datetime(2026, 10, 31, 20, tzinfo=UTC),
                 datetime(2026, 11, 1, 3, tzinfo=UTC))
    running = _job(world, 901, datetime(2026, 10, 30, tzinfo=UTC), None)
    _archive(ended)
    _archive(running)
    assert _where(JobMetricSummary, ended) == {"jobs_jobmetricsummary_p2026_11"}
    assert _where(JobNodeMetrics, ended) == {"jobs_jobnodemetrics_p2026_11"}
    assert _where(JobMetricSummary, running) == {"jobs_jobmetricsummary_p2026_10"}
    assert ended.archived_gpus().count() == 2 and running.archived_nodes().count() == 1


def test_a_jobs_page_reads_only_its_months_partitions(world: Any) -> None:
    for month in (date(2026, 9, 1), date(2026, 10, 1), date(2026, 11, 1)):
        partitions.create_month("jobs_jobmetricsummary", month)
    job = _job(world, 902, datetime(2026, 10, 31, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC))
    plan = job.archived_gpus().explain()
    assert "jobs_jobmetricsummary_p2026_11" in plan and "jobs_jobmetricsummary_p2026_10" in plan
    assert "p2026_09" not in plan and "_default" not in plan


def test_a_month_without_a_partition_lands_in_the_default_and_maintain_moves_it(
        world: Any) -> None:
    job = _job(world, 903, datetime(2031, 5, 2, tzinfo=UTC), datetime(2031, 5, 3, tzinfo=UTC))
    _archive(job, gpus=3)  # no partition for May 2031: the insert must not fail
    assert _where(JobMetricSummary, job) == {"jobs_jobmetricsummary_default"}
    ids = set(JobMetricSummary.objects.filter(job=job).values_list("id", flat=True))
    run = partitions.maintain(NOW, ahead=1, keep=0)
    assert run.status == TaskRun.Status.SUCCEEDED, run.error
    assert "jobs_jobmetricsummary_p2031_05" in run.stats["created"]
    assert _where(JobMetricSummary, job) == {"jobs_jobmetricsummary_p2031_05"}
    assert _where(JobNodeMetrics, job) == {"jobs_jobnodemetrics_p2031_05"}
    assert set(JobMetricSummary.objects.filter(job=job).values_list("id", flat=True)) == ids
    assert partitions.months_in_default("jobs_jobmetricsummary") == []
    # created ahead: December 2026 and January 2027
    have = {p.month for p in partitions.partitions("jobs_jobnodemetrics")}
    assert {date(2026, 12, 1), date(2027, 1, 1)} <= have


def test_retention_dry_runs_then_detaches_whole_months_and_keeps_job_figures(
        world: Any, django_capture_on_commit_callbacks: Any) -> None:
    old = _job(world, 904, datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 3, 2, tzinfo=UTC))
    kept = _job(world, 905, datetime(2025, 12, 1, tzinfo=UTC), datetime(2025, 12, 2, tzinfo=UTC))
    for table in partitions.TABLES:
        for month in (date(2025, 3, 1), date(2025, 12, 1)):
            partitions.create_month(table, month)
    _archive(old)
    _archive(kept)

    out = StringIO()
    call_command("archive_partitions", "--dry-run", "--retention-months", "12", stdout=out)
    assert "would detach and drop jobs_jobmetricsummary_p2025_03" in out.getvalue()
    assert "would detach and drop jobs_jobnodemetrics_p2025_03" in out.getvalue()
    assert "p2025_12" not in out.getvalue()
    assert JobMetricSummary.objects.filter(job=old).count() == 2  # the dry run changed nothing

    out = StringIO()
    with connection.execute_wrapper(_no_delete), \
            django_capture_on_commit_callbacks() as queued:
        call_command("archive_partitions", "--retention-months", "12", stdout=out)
    # retention's visible step is done: the month's rows are out of the archive
    assert not JobMetricSummary.objects.filter(job=old).exists()
    assert not JobNodeMetrics.objects.filter(job=old).exists()
    assert JobMetricSummary.objects.filter(job=kept).count() == 2
    assert JobMetrics.objects.filter(job=old).exists()  # the job-level figures stay
    run = TaskRun.objects.filter(kind="archive_partitions").latest("started_at")
    gone = {"jobs_jobmetricsummary_p2025_03", "jobs_jobnodemetrics_p2025_03"}
    assert set(run.stats["detached"]) == gone and run.stats["drop_queued"]
    assert run.stats["detach_s"] > 0
    assert "detached 2 in" in out.getvalue() and "drop queued" in out.getvalue()
    names = {p.name for t in partitions.TABLES for p in partitions.partitions(t)}
    assert not any("p2025_03" in n for n in names)
    # ... and the drop is the queued task's, not this run's
    assert {p.name for t in partitions.TABLES for p in partitions.detached(t)} == gone
    assert len(queued) == 1
    queued[0]()
    assert not any(partitions.detached(t) for t in partitions.TABLES)
    drop = TaskRun.objects.get(kind="archive_drop")
    assert drop.status == TaskRun.Status.SUCCEEDED and set(drop.stats["dropped"]) == gone


def test_a_run_with_nothing_detached_queues_no_drop_and_the_drop_is_idempotent(
        django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks() as queued:
        run = partitions.maintain(NOW, ahead=0, keep=0)
    assert run.stats["to_drop"] == [] and not run.stats["drop_queued"] and queued == []
    first, second = partitions.drop_detached(), partitions.drop_detached()
    assert first.stats["dropped"] == second.stats["dropped"] == []
    assert second.status == TaskRun.Status.SUCCEEDED


def test_the_command_drops_inline_with_drop_now(
        world: Any, django_capture_on_commit_callbacks: Any) -> None:
    partitions.create_month("jobs_jobnodemetrics", date(2024, 2, 1))
    out = StringIO()
    with django_capture_on_commit_callbacks() as queued:
        call_command("archive_partitions", "--retention-months", "12", "--ahead", "0",
                     "--drop-now", stdout=out)
    assert queued == []
    assert "dropped 1 in" in out.getvalue() and "jobs_jobnodemetrics_p2024_02" in out.getvalue()
    assert partitions.detached("jobs_jobnodemetrics") == []


def _no_delete(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    """Retention must not delete rows one by one (the default partition's moves aside)."""
    assert not sql.lstrip().upper().startswith("DELETE"), sql
    return execute(sql, params, many, context)


def test_the_archive_write_path_replaces_a_running_jobs_rows_under_its_end_month(
        world: Any) -> None:
    """Rows written while the job ran (submit month) are replaced, not duplicated, when the
    final archive writes them under the end month."""
    from apps.jobs import archive

    for table in partitions.TABLES:
        for month in (date(2026, 10, 1), date(2026, 11, 1)):
            partitions.create_month(table, month)
    job = _job(world, 906, datetime(2026, 10, 31, tzinfo=UTC), None)
    _archive(job)
    job.end_time, job.state = datetime(2026, 11, 1, 2, tzinfo=UTC), Job.State.COMPLETED
    job.save()
    summary = archive.Summary(pk=job.pk, summaries=[dict(
        host="gpu01", gpu_index=i, measure="gpu_util", measured_s=60, mean=0.5, p5=0.1, p50=0.5,
        p95=0.9, idle_fraction=0, useful=1, waiting=0, held_idle=0, no_process=0)
        for i in range(2)], nodes=[dict(host="gpu01")], fields={"measure": "gpu_util"},
        has_data=True, warned=False, finished=True, straggler="none")
    archive._write([(job, summary)], NOW)
    assert _where(JobMetricSummary, job) == {"jobs_jobmetricsummary_p2026_11"}
    assert JobMetricSummary.objects.filter(job=job).count() == 2
    assert _where(JobNodeMetrics, job) == {"jobs_jobnodemetrics_p2026_11"}


def test_a_month_left_detached_by_a_failed_drop_is_dropped_by_the_next_run(
        world: Any, django_capture_on_commit_callbacks: Any) -> None:
    partitions.create_month("jobs_jobnodemetrics", date(2024, 1, 1))
    job = _job(world, 907, datetime(2024, 1, 5, tzinfo=UTC), datetime(2024, 1, 6, tzinfo=UTC))
    _archive(job)
    with django_capture_on_commit_callbacks() as queued:
        run = partitions.maintain(NOW, ahead=0, keep=1)
    assert run.stats["detached"] == ["jobs_jobnodemetrics_p2024_01"] and len(queued) == 1
    with connection.execute_wrapper(_failing_drop), pytest.raises(RuntimeError):
        queued[0]()  # the background drop fails (say its lock timed out)
    failed = TaskRun.objects.get(kind="archive_drop")
    assert failed.status == TaskRun.Status.FAILED and "lock timeout" in failed.error
    # left detached: out of the archive, waiting for a drop
    assert not JobNodeMetrics.objects.filter(job=job).exists()
    assert [p.name for p in partitions.detached("jobs_jobnodemetrics")] == [
        "jobs_jobnodemetrics_p2024_01"]

    todo = partitions.plan(NOW.date(), ahead=0, keep=0)
    assert [(p.name, p.attached) for p in todo.drop] == [("jobs_jobnodemetrics_p2024_01", False)]
    with django_capture_on_commit_callbacks(execute=True):
        run = partitions.maintain(NOW, ahead=0, keep=0)
    assert run.stats["detached"] == [] and run.stats["to_drop"] == ["jobs_jobnodemetrics_p2024_01"]
    assert partitions.detached("jobs_jobnodemetrics") == []


def _failing_drop(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
    if sql.startswith("DROP TABLE"):
        raise RuntimeError("canceling statement due to lock timeout")
    return execute(sql, params, many, context)
