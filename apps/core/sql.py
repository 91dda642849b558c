"""SQL expressions more than one app needs, written once per database."""

from __future__ import annotations

from typing import Any

from django.db.models import FloatField, Func


class Seconds(Func):
    """Seconds from ``b`` to ``a`` (two datetimes), in SQL, per database."""

    output_field = FloatField()
    arity = 2

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection,
                           template="EXTRACT(EPOCH FROM (%(expressions)s))::double precision",
                           arg_joiner=" - ", **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection,
                           template="((julianday(%(expressions)s)) * 86400.0)",
                           arg_joiner=") - julianday(", **extra)
