"""``manage.py chargeback --month YYYY-MM --format csv|json``: a month's statements, printed.

The open month's drafts are refreshed first (``--no-refresh`` prints what is stored), so this
is also the twin of the periodic ``refresh_drafts`` task. The output is byte for byte the
CSV or JSON export the statement pages offer, for every team.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.chargeback import services
from apps.chargeback.models import Statement


class Command(BaseCommand):
    help = "Print every team's chargeback statement for a month as CSV or JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--month", required=True, help="YYYY-MM")
        parser.add_argument("--format", choices=("csv", "json"), default="csv")
        parser.add_argument("--no-refresh", action="store_true",
                            help="print the stored statements without refreshing drafts")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            month = services.parse_month(opts["month"])
        except services.ChargebackError as exc:
            raise CommandError(str(exc)) from None
        if not opts["no_refresh"]:
            result = services.refresh_statements(month)
            self.stderr.write(f"{result.month}: {result.drafts} drafts refreshed, "
                              f"{result.finals_kept} final kept, "
                              f"{result.unmapped_hours} GPU-hours of unmapped accounts")
        statements = services.statements_of(month, Statement.objects.all())
        export = services.export_csv if opts["format"] == "csv" else services.export_json
        self.stdout.write(export(statements), ending="")
