"""Write job rows fast: one upsert on (cluster, job_id) per batch.

PostgreSQL: ``COPY`` into a session temp table, then one ``INSERT ... SELECT ... ON CONFLICT
DO UPDATE`` (the ORM's ``bulk_create`` spends ~250 µs a row in Python; this ~20 µs). Other
databases (SQLite for tests and the embedded default): ``bulk_create(update_conflicts=True)``.
Both write the same columns; rows are dicts of ``Job`` attribute names (``user_id``...).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection
from django.utils import timezone

from apps.core.fields import column
from apps.jobs.models import Job

# Every column the importer writes; created_at is set on insert only, the rest keep defaults.
COLUMNS = [
    "cluster_id", "job_id", "display_id", "array_job_id", "array_task_id",
    "array_tasks_pending", "het_job_id", "het_job_offset", "name", "user_name", "user_id",
    "account", "team_id", "partition", "qos", "work_dir", "comment", "state", "wait_reason",
    "exit_code", "exit_signal", "submit_time", "eligible_time", "start_time", "end_time",
    "time_limit_min", "nodes", "node_count", "cpus", "memory_mb", "mem_peak_mb", "gpus",
    "gpu_shards", "gpu_equivalent", "gpu_types", "tres_alloc", "gpu_source", "req_gpus",
    "req_cpus", "req_memory_mb", "req_nodes", "tres_req", "sync_hash", "implausible",
    "implausible_accepted_at", "implausible_accepted_by_id",
]
_KEY = ("cluster_id", "job_id")
_JSON_AT = [COLUMNS.index(c) for c in ("gpu_types", "implausible")]  # COPY takes JSON as text
_TEMP = "beacon_job_import"


def existing_rows(cluster_id: int, job_ids: list[int], fields: Sequence[str]) -> list[tuple]:
    """``(job_id, *fields)`` of the jobs that exist. PostgreSQL gets one array parameter
    (``= ANY``): a thousand ``IN`` placeholders cost psycopg ~5 ms to split per query."""
    if connection.vendor != "postgresql":
        return list(Job.objects.filter(cluster_id=cluster_id, job_id__in=job_ids)
                    .values_list("job_id", *fields))
    columns = ", ".join(column(Job._meta.pk if f == "pk" else Job._meta.get_field(f))
                        for f in ("job_id", *fields))
    # Identifiers come from the model's metadata, values are parameters.
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {Job._meta.db_table} "  # noqa: S608
                       "WHERE cluster_id = %s AND job_id = ANY(%s::bigint[])",
                       [cluster_id, job_ids])
        return list(cursor.fetchall())


def refresh_statistics() -> None:
    """``ANALYZE`` the jobs table (PostgreSQL). A bulk import grows it faster than autovacuum
    notices; with stale statistics the planner answers ``existing_rows`` through the
    cluster index (300 ms a batch at 100k jobs) instead of the unique one (2 ms)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {Job._meta.db_table} (cluster_id, job_id)")


def upsert_jobs(rows: Sequence[Mapping[str, Any]], all_new: bool = False) -> dict[int, int]:
    """Insert or update these rows (call inside a transaction); returns {job_id: pk}.

    ``all_new``: the caller found none of these jobs stored, so PostgreSQL copies them
    straight into the table (no temporary table, no conflict handling). A row stored in
    the meantime by someone else makes the COPY fail on the unique key: the caller's
    fallback then writes row by row through the upsert.
    """
    if not rows:
        return {}
    if connection.vendor != "postgresql":
        return _orm_upsert(rows)
    with connection.cursor() as cursor, connection.wrap_database_errors:
        raw = cursor.cursor  # the psycopg cursor: COPY is not in Django's cursor API
        # This transaction's commit does not wait for its WAL flush. Safe: WAL is flushed
        # in order, so the next synchronous commit (the sync's watermark on the cluster row,
        # the import's TaskRun) makes these rows durable before anything counts on them; a
        # crash before it loses only rows that no watermark has passed, which the next sync
        # (or a re-run of the import) writes again.
        raw.execute("SET LOCAL synchronous_commit TO OFF")
        return _copy_insert(raw, rows) if all_new else _copy_upsert(raw, rows)


def _orm_upsert(rows: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    objs = [Job(**row) for row in rows]
    update = [f.name for f in Job._meta.concrete_fields
              if f.attname in COLUMNS and f.attname not in _KEY] + ["updated_at"]
    Job.objects.bulk_create(objs, update_conflicts=True, unique_fields=["cluster", "job_id"],
                            update_fields=update)
    ids = [row["job_id"] for row in rows]
    return dict(Job.objects.filter(cluster_id=rows[0]["cluster_id"], job_id__in=ids)
                .values_list("job_id", "pk"))


def _defaults() -> tuple[list[str], list[Any]]:
    """Columns the importer does not write, with their model defaults (new rows need them)."""
    names: list[str] = []
    values: list[Any] = []
    now = timezone.now()
    for f in Job._meta.concrete_fields:
        if f.attname in COLUMNS or f.primary_key:
            continue
        value = now if f.name in ("created_at", "updated_at") else f.get_default()
        names.append(column(f))
        values.append(f.get_db_prep_save(value, connection))
    return names, values


def _copy_rows(copy: Any, rows: Sequence[Mapping[str, Any]], tail: Sequence[Any] = ()) -> None:
    for row in rows:
        values = [row[c] for c in COLUMNS]
        for at in _JSON_AT:
            values[at] = json.dumps(values[at])
        copy.write_row([*values, *tail] if tail else values)


def _copy_insert(raw: Any, rows: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    table = Job._meta.db_table
    extra, params = _defaults()
    with raw.copy(f"COPY {table} ({', '.join([*COLUMNS, *extra])}) FROM STDIN") as copy:
        _copy_rows(copy, rows, params)
    raw.execute(f"SELECT job_id, id FROM {table} "  # noqa: S608 - identifiers from the model
                "WHERE cluster_id = %s AND job_id = ANY(%s::bigint[])",
                [rows[0]["cluster_id"], [row["job_id"] for row in rows]])
    return dict(raw.fetchall())


def _copy_upsert(raw: Any, rows: Sequence[Mapping[str, Any]]) -> dict[int, int]:
    table = Job._meta.db_table
    cols = ", ".join(COLUMNS)
    extra, params = _defaults()
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in [*COLUMNS, "updated_at"]
                        if c not in _KEY)
    raw.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_TEMP} AS "  # noqa: S608 - identifiers
                f"SELECT {cols} FROM {table} WITH NO DATA")
    raw.execute(f"TRUNCATE {_TEMP}")
    with raw.copy(f"COPY {_TEMP} ({cols}) FROM STDIN") as copy:
        _copy_rows(copy, rows)
    placeholders = ", ".join(["%s"] * len(params))
    raw.execute(  # identifiers from the model, values as parameters
        f"INSERT INTO {table} ({cols}, {', '.join(extra)}) "  # noqa: S608
        f"SELECT {cols}, {placeholders} FROM {_TEMP} "
        f"ON CONFLICT (cluster_id, job_id) DO UPDATE SET {updates} "
        "RETURNING job_id, id", params)
    return dict(raw.fetchall())
