"""Monthly partitions of the archive tables on PostgreSQL: created ahead, dropped whole.

``JobMetricSummary`` and ``JobNodeMetrics`` (``apps/jobs/models/archive.py``) are range
partitioned by ``month`` on PostgreSQL (migration ``jobs.0025``); SQLite keeps them as plain
tables and everything here is a no-op there. Each table has:

- one partition per month, ``<table>_pYYYY_MM``, created ``ARCHIVE_PARTITIONS_AHEAD`` months
  ahead by beat (``maintain``; ``manage.py archive_partitions`` is its twin);
- a default partition, ``<table>_default``, so an insert never fails: a row whose month has no
  partition yet lands there, and the next ``maintain`` moves it into its month's new
  partition (it stays small: only rows of months nobody created);
- retention: with ``ARCHIVE_RETENTION_MONTHS`` = N, the months before the current month
  minus N are detached, a whole table at a time (no row-by-row DELETE, no vacuum debt): once
  ``maintain`` returns, their rows are gone from the archive. The detached tables are dropped
  afterwards by the ``drop_detached_partitions`` task (``drop_detached``), whose DROP frees
  the files in time that grows with the month's size (issue 29: 1.6 to 2.2 s for 1.5 GB) but locks
  only the detached table, which nobody reads. ``python -m bench archive_drop`` times both.

DDL runs with a short ``lock_timeout``: DETACH and ATTACH wait for the parent's lock, and a
long reader must make this run fail and retry later, not queue every page behind it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.analysis.months import add_months, expired, months_ahead, partition_name
from apps.core.models import TaskRun
from apps.core.runs import tracked_run

TABLES = ("jobs_jobmetricsummary", "jobs_jobnodemetrics")
LOCK_TIMEOUT = "5s"
_BOUND = re.compile(r"FROM \('(\d{4})-(\d{2})-01'\) TO")


@dataclass(frozen=True)
class Partition:
    """One partition as PostgreSQL lists it (``month`` None: the default partition)."""

    table: str
    name: str
    month: date | None
    rows: int  # the planner's estimate (-1: never analysed)
    bytes: int
    attached: bool = True  # False: detached by a drop that failed before its DROP


@dataclass
class Plan:
    """What ``maintain`` would do: months to create (or fill from the default partition)
    and partitions to drop (attached ones are detached first; detached ones are left by a
    drop that has not run yet or failed)."""

    create: list[tuple[str, date]] = field(default_factory=list)
    drop: list[Partition] = field(default_factory=list)
    cutoff: date | None = None

    def lines(self) -> list[str]:
        """The plan in words (the dry run prints these)."""
        out = [f"create {partition_name(t, m)}" for t, m in self.create]
        out += [f"{'detach and drop' if p.attached else 'drop (detached)'} {p.name} "
                f"({p.month:%Y-%m}: about {max(p.rows, 0):,} rows, {p.bytes / 1e6:,.1f} MB)"
                for p in self.drop]
        return out or ["nothing to do"]

    def to_detach(self) -> list[Partition]:
        """The partitions still attached: retention's visible step."""
        return [p for p in self.drop if p.attached]


def partitioned() -> bool:
    """The archive tables are partitioned here (PostgreSQL, after migration jobs.0025)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_class WHERE relname = ANY(%s) AND relkind = 'p'",
                       [list(TABLES)])
        return bool(cursor.fetchone()[0] == len(TABLES))


# --- Reading -----------------------------------------------------------------------------


def partitions(table: str) -> list[Partition]:
    """``table``'s partitions, oldest month first, the default partition last."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid), c.reltuples::bigint, "
            "pg_total_relation_size(c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [table])
        rows = cursor.fetchall()
    found = [Partition(table, name, _month(bound), int(n), int(size))
             for name, bound, n, size in rows]
    return sorted(found, key=lambda p: (p.month is None, p.month or date.min))


def _month(bound: str) -> date | None:
    match = _BOUND.search(bound)
    return date(int(match[1]), int(match[2]), 1) if match else None


def detached(table: str) -> list[Partition]:
    """Month tables of ``table`` left detached by a drop that stopped between its steps."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reltuples::bigint, pg_total_relation_size(oid) FROM pg_class "
            "WHERE relname ~ %s AND relkind = 'r' AND NOT relispartition",
            [f"^{table}_p[0-9]{{4}}_[0-9]{{2}}$"])
        rows = cursor.fetchall()
    return [Partition(table, name, date(int(name[-7:-3]), int(name[-2:]), 1), int(n), int(size),
                      attached=False) for name, n, size in rows]


def months_in_default(table: str) -> list[date]:
    """Months that have rows in the default partition (each should get its own)."""
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT DISTINCT month FROM "{table}_default" ORDER BY 1')  # noqa: S608
        return [row[0] for row in cursor.fetchall()]


# --- Planning and applying ---------------------------------------------------------------


def plan(today: date, ahead: int, keep: int) -> Plan:
    """Months to create (``ahead`` months from ``today``'s, and any the default partition
    holds rows of) and months past retention (``keep`` < 1: none) to drop."""
    out = Plan(cutoff=add_months(date(today.year, today.month, 1), -keep) if keep > 0 else None)
    for table in TABLES:
        have = {p.month for p in partitions(table) if p.month is not None}
        wanted = set(months_ahead(today, ahead)) | set(months_in_default(table))
        out.create += [(table, m) for m in sorted(wanted - have)]
        old = set(expired(have, today, keep))
        out.drop += [p for p in partitions(table) if p.month in old] + detached(table)
    return out


def apply(todo: Plan) -> float:
    """Create, then detach, one partition per transaction (each one is whole or not at
    all); returns the seconds spent detaching. The detached tables are left for
    ``drop_detached``."""
    for table, month in todo.create:
        create_month(table, month)
    return sum(detach_partition(part) for part in todo.to_detach())


def create_month(table: str, month: date) -> None:
    """Create ``table``'s partition for ``month``; rows of that month already in the default
    partition move into it first (ATTACH refuses while the default still holds any)."""
    name, lo, hi = partition_name(table, month), month, add_months(month, 1)
    with _ddl() as cursor:
        cursor.execute(f'LOCK TABLE "{table}_default" IN SHARE ROW EXCLUSIVE MODE')
        cursor.execute(f'SELECT 1 FROM "{table}_default" WHERE month >= %s AND month < %s '  # noqa: S608
                       "LIMIT 1", [lo, hi])
        if cursor.fetchone() is None:
            cursor.execute(f'CREATE TABLE "{name}" PARTITION OF "{table}" '
                           f"FOR VALUES FROM ('{lo}') TO ('{hi}')")
            return
        cursor.execute(f'CREATE TABLE "{name}" (LIKE "{table}" INCLUDING DEFAULTS '
                       "INCLUDING CONSTRAINTS)")
        cursor.execute(f'WITH moved AS (DELETE FROM "{table}_default" WHERE month >= %s AND '  # noqa: S608
                       f'month < %s RETURNING *) INSERT INTO "{name}" SELECT * FROM moved',
                       [lo, hi])
        cursor.execute(f'ALTER TABLE "{table}" ATTACH PARTITION "{name}" '
                       f"FOR VALUES FROM ('{lo}') TO ('{hi}')")


def detach_partition(part: Partition) -> float:
    """Detach ``part`` from its table, in a transaction of its own: the month's rows leave
    the archive at its commit. The only retention step that locks the archive table, and
    briefly (it reads no rows). Returns its seconds; a detached ``part`` is left as it is."""
    if part.month is None:
        raise ValueError("the default partition is never detached")
    start = time.perf_counter()
    if part.attached:
        with _ddl() as cursor:
            cursor.execute(f'ALTER TABLE "{part.table}" DETACH PARTITION "{part.name}"')
    return time.perf_counter() - start


def drop_table(part: Partition) -> float:
    """Drop a detached month table; returns its seconds. Its commit truncates the files,
    which takes file-system time that grows with the month's size, holding a lock only on
    this table, which no page reads. A table already gone is not an error (run twice)."""
    if part.attached:
        raise ValueError(f"{part.name} is still attached: detach it first")
    start = time.perf_counter()
    with _ddl() as cursor:
        cursor.execute(f'DROP TABLE IF EXISTS "{part.name}"')
    return time.perf_counter() - start


@contextmanager
def _ddl() -> Iterator[Any]:
    """A transaction whose DDL waits at most ``LOCK_TIMEOUT`` for its locks."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        yield cursor


def maintain(now: datetime | None = None, *, ahead: int | None = None,
             keep: int | None = None, queue_drop: bool = True) -> TaskRun:
    """Beat's daily run: create the coming months' partitions, move stray rows out of the
    default partition, and detach the months past ``ARCHIVE_RETENTION_MONTHS``. Recorded as
    a TaskRun (kind ``archive_partitions``) whose stats list what was created and detached,
    and the seconds detaching took (retention's visible step).

    Every detached table (these, and any a failed drop left) is then dropped by the
    ``drop_detached_partitions`` task, queued once this run's rows are committed; with
    ``queue_drop`` False the caller drops them (``drop_detached``) or leaves them.
    """
    today = (now or timezone.now()).date()
    ahead = settings.ARCHIVE_PARTITIONS_AHEAD if ahead is None else ahead
    keep = settings.ARCHIVE_RETENTION_MONTHS if keep is None else keep
    with tracked_run("archive_partitions") as run:
        if not partitioned():
            run.stats = {"note": f"{connection.vendor}: the archive tables are not partitioned"}
            return run
        todo = plan(today, ahead, keep)
        detach_s = apply(todo)
        run.stats = _stats(todo, keep, detach_s, queue_drop)
    if run.stats["drop_queued"]:
        _queue_drop()
    return run


def _queue_drop() -> None:
    """Queue the drop of the detached tables; a broker that is down leaves them detached
    (out of the archive already) for the next run to queue again."""
    from apps.core.broker import publish_on_commit
    from apps.jobs.tasks import drop_detached_partitions  # tasks import this module

    publish_on_commit(drop_detached_partitions)


def _stats(todo: Plan, keep: int, detach_s: float, queued: bool) -> dict[str, Any]:
    detached_now = todo.to_detach()
    return {"created": [partition_name(t, m) for t, m in todo.create],
            "detached": [p.name for p in detached_now],
            "detached_bytes": sum(p.bytes for p in detached_now),
            "detach_s": round(detach_s, 4),
            "to_drop": [p.name for p in todo.drop],
            "drop_queued": queued and bool(todo.drop),
            "retention_months": keep,
            "cutoff": todo.cutoff.isoformat() if todo.cutoff else None}


def drop_detached() -> TaskRun:
    """Drop every month table retention detached (``detached``): the background half of
    retention, run by the ``drop_detached_partitions`` task after ``maintain``. Recorded as
    a TaskRun (kind ``archive_drop``) with the tables, their bytes and seconds. Safe to run
    twice: with nothing detached it does nothing. A drop that fails (its lock timed out)
    fails the run and leaves that table detached, out of the archive; the next run drops it.
    """
    with tracked_run("archive_drop") as run:
        run.stats = {"dropped": [], "dropped_bytes": 0, "drop_s": 0.0}
        if connection.vendor != "postgresql":
            run.stats["note"] = f"{connection.vendor}: the archive tables are not partitioned"
            return run
        for part in [p for table in TABLES for p in detached(table)]:
            seconds = drop_table(part)
            run.stats["dropped"].append(part.name)
            run.stats["dropped_bytes"] += part.bytes
            run.stats["drop_s"] = round(run.stats["drop_s"] + seconds, 4)
    return run


# --- Converting the tables (migration jobs.0025) -----------------------------------------


def convert(schema_editor: Any, ahead: int = 3) -> None:
    """Turn the plain archive tables into partitioned ones, keeping every row, index name
    and constraint name Django knows (later migrations refer to them by name).

    1. Read the table's constraint and index definitions, then rename it aside and drop
       them from it (their names must be free).
    2. Create the partitioned table from its columns, primary key ``(id, month)``, the
       constraints and indexes again, the default partition, and one partition for every
       month its rows hold plus the ``ahead`` months from now.
    3. Copy the rows over, move the identity past the highest id, drop the old table.

    On a site with years of archive this copies it all once, in one transaction: plan a
    maintenance window (docs/DEPLOY.md).
    """
    cursor = schema_editor.connection.cursor()
    today = timezone.now().date()
    for table in TABLES:
        old = f"{table}_unpartitioned"
        constraints, indexes = _set_aside(cursor, table, old)
        cursor.execute(f'CREATE TABLE "{table}" (LIKE "{old}" INCLUDING DEFAULTS '
                       "INCLUDING IDENTITY INCLUDING STORAGE) PARTITION BY RANGE (month)")
        _add_keys(cursor, table, "(id, month)", constraints, [d for _, d in indexes])
        cursor.execute(f'CREATE TABLE "{table}_default" PARTITION OF "{table}" DEFAULT')
        cursor.execute(f'SELECT DISTINCT month FROM "{old}"')  # noqa: S608
        months = {row[0] for row in cursor.fetchall()} | set(months_ahead(today, ahead))
        for month in sorted(months):
            cursor.execute(f'CREATE TABLE "{partition_name(table, month)}" PARTITION OF '
                           f"\"{table}\" FOR VALUES FROM ('{month}') TO "
                           f"('{add_months(month, 1)}')")
        _copy_back(cursor, table, old)
        cursor.execute(f'DROP TABLE "{old}"')


def revert(schema_editor: Any) -> None:
    """The reverse of ``convert``: one plain table again, every row kept."""
    cursor = schema_editor.connection.cursor()
    for table in TABLES:
        old = f"{table}_partitioned"
        constraints, indexes = _set_aside(cursor, table, old)
        cursor.execute(f'CREATE TABLE "{table}" (LIKE "{old}" INCLUDING DEFAULTS '
                       "INCLUDING IDENTITY INCLUDING STORAGE)")
        # a partitioned table's indexes are defined ON ONLY it; a plain table's are not
        _add_keys(cursor, table, "(id)", constraints,
                  [d.replace(" ON ONLY ", " ON ") for _, d in indexes])
        _copy_back(cursor, table, old)
        cursor.execute(f'DROP TABLE "{old}" CASCADE')


def _set_aside(cursor: Any, table: str, old: str) -> tuple[list[tuple[str, str]],
                                                         list[tuple[str, str]]]:
    """Rename ``table`` to ``old`` and drop its constraints, indexes and primary key there,
    so their names are free for the new table; returns what ``_definitions`` read."""
    constraints, indexes = _definitions(cursor, table)
    cursor.execute(f'ALTER TABLE "{table}" RENAME TO "{old}"')
    for name, _ in constraints:
        cursor.execute(f'ALTER TABLE "{old}" DROP CONSTRAINT "{name}"')
    for name, _ in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    cursor.execute(f'ALTER TABLE "{old}" DROP CONSTRAINT "{table}_pkey"')
    return constraints, indexes


def _add_keys(cursor: Any, table: str, primary: str, constraints: list[tuple[str, str]],
              indexes: list[str]) -> None:
    """The new ``table``'s primary key ``primary``, then the constraints and indexes set
    aside, under their old names (later migrations refer to them by name)."""
    cursor.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{table}_pkey" PRIMARY KEY {primary}')
    for name, definition in constraints:
        cursor.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{name}" {definition}')
    for definition in indexes:
        cursor.execute(definition)


def _copy_back(cursor: Any, table: str, old: str) -> None:
    """Every row of ``old`` into the new ``table``, and its identity past the highest id."""
    cursor.execute(f'INSERT INTO "{table}" SELECT * FROM "{old}"')  # noqa: S608
    cursor.execute(f"SELECT setval(pg_get_serial_sequence('\"{table}\"', 'id'), "  # noqa: S608
                   f'GREATEST((SELECT max(id) FROM "{table}"), 0) + 1, false)')


def _definitions(cursor: Any, table: str) -> tuple[list[tuple[str, str]],
                                                   list[tuple[str, str]]]:
    """``table``'s constraints but the primary key (name, definition), and its indexes that
    back no constraint (name, CREATE INDEX statement)."""
    cursor.execute("SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
                   "WHERE conrelid = %s::regclass AND contype <> 'p' AND conparentid = 0 "
                   "ORDER BY conname", [table])
    constraints = [(n, d) for n, d in cursor.fetchall()]
    cursor.execute("SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i "
                   "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass "
                   "AND NOT EXISTS (SELECT 1 FROM pg_constraint k "
                   "WHERE k.conindid = i.indexrelid) ORDER BY c.relname", [table])
    indexes = [(n, d) for n, d in cursor.fetchall()]
    return constraints, indexes
