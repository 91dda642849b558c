"""Write statement lines and totals fast: ``COPY`` and one ``UPDATE ... FROM (VALUES ...)`` on
PostgreSQL, ``bulk_create`` / ``bulk_update`` elsewhere.

The ORM prepares every Decimal through ``format_number`` (~20 µs each, 13 per line): for a
month of a few thousand lines that is most of a refresh. psycopg adapts ``Decimal`` itself.
Only ``services.refresh_statements`` calls this, for draft statements, under the period lock:
``StatementLine.save()``'s immutability guard is not needed on that path.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection

from apps.chargeback.models import Statement, StatementLine
from apps.core.fields import column


def insert_lines(rows: Sequence[StatementLine]) -> None:
    """Insert new lines (call inside a transaction)."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        StatementLine.objects.bulk_create(rows, batch_size=2000)
        return
    fields = [f for f in StatementLine._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(column(f)) for f in fields)
    table = connection.ops.quote_name(StatementLine._meta.db_table)
    with connection.cursor() as cursor, connection.wrap_database_errors:
        raw = cursor.cursor  # the psycopg cursor: COPY is not in Django's cursor API
        with raw.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([_value(row, f) for f in fields])


def _value(row: StatementLine, field: object) -> object:
    name = field.attname  # type: ignore[attr-defined]
    if name == "created_at" and row.created_at is None:
        from django.utils import timezone

        return timezone.now()
    return getattr(row, name)


def update_totals(statements: Sequence[Statement], fields: Sequence[str]) -> None:
    """Write these fields of draft statements in one UPDATE (PostgreSQL: ``FROM (VALUES ...)``;
    ``bulk_update``'s CASE per row and field costs ~5 ms a statement in Python). Rows that are
    final in the database are never touched (``status = 'draft'`` in the WHERE)."""
    if not statements:
        return
    if connection.vendor != "postgresql":
        Statement.objects.filter(status=Statement.Status.DRAFT).bulk_update(
            statements, list(fields), batch_size=500)
        return
    opts = Statement._meta
    cols = [connection.ops.quote_name(column(opts.get_field(f))) for f in fields]
    row = "(" + ", ".join(["%s"] * (len(cols) + 1)) + ")"
    sets = ", ".join(f"{c} = v.{c}" for c in cols)
    # identifiers from the model's metadata, every value a parameter
    sql = (f"UPDATE {connection.ops.quote_name(opts.db_table)} AS s SET {sets} "  # noqa: S608
           f"FROM (VALUES {', '.join([row] * len(statements))}) AS v(id, {', '.join(cols)}) "
           "WHERE s.id = v.id AND s.status = 'draft'")
    params = [value for s in statements for value in (s.pk, *(getattr(s, f) for f in fields))]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
