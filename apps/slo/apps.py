"""SLOs over populations of GPU jobs: team scorecards with error budgets for queue wait, job
success and real GPU efficiency, monthly history, and breach notifications (docs/slo.md)."""

from typing import Any

from django.apps import AppConfig
from django.db.backends.signals import connection_created


def _register_sqlite_functions(sender: Any, connection: Any, **kwargs: Any) -> None:
    """SQLite has no ``ARRAY_AGG(x ORDER BY x)``: give each new connection one in Python."""
    if connection.vendor == "sqlite":
        from apps.slo.queries import SqliteSorted

        connection.connection.create_aggregate("BEACON_SORTED", 1, SqliteSorted)


class SloConfig(AppConfig):
    name = "apps.slo"
    label = "slo"
    verbose_name = "SLOs"

    def ready(self) -> None:
        connection_created.connect(_register_sqlite_functions,
                                   dispatch_uid="slo-sqlite-sorted")
