"""``manage.py archive_partitions``: the twin of beat's ``maintain_archive_partitions``.

    manage.py archive_partitions                  # create months ahead, apply retention
    manage.py archive_partitions --dry-run        # say what it would create and drop
    manage.py archive_partitions --list           # every partition, its rows and size
    manage.py archive_partitions --retention-months 12 --dry-run

PostgreSQL only: on SQLite the archive is not partitioned and this says so.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.utils import timezone

from apps.core.models import TaskRun
from apps.jobs import partitions


class Command(BaseCommand):
    help = "Create the archive's monthly partitions ahead and drop months past retention."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true",
                            help="print what would be created and dropped, change nothing")
        parser.add_argument("--list", action="store_true", help="list the partitions")
        parser.add_argument("--ahead", type=int, default=None,
                            help="months ahead (default ARCHIVE_PARTITIONS_AHEAD)")
        parser.add_argument("--retention-months", type=int, default=None,
                            help="months kept before the current one; 0 keeps everything "
                                 "(default ARCHIVE_RETENTION_MONTHS)")

    def handle(self, *args: Any, **opts: Any) -> None:
        ahead = settings.ARCHIVE_PARTITIONS_AHEAD if opts["ahead"] is None else opts["ahead"]
        keep = (settings.ARCHIVE_RETENTION_MONTHS if opts["retention_months"] is None
                else opts["retention_months"])
        if ahead < 0 or keep < 0:
            raise CommandError("--ahead and --retention-months must be 0 or more")
        if not partitions.partitioned():
            self.stdout.write(f"{connection.vendor}: the archive tables are not partitioned "
                              "(PostgreSQL only); nothing to do")
            return
        if opts["list"]:
            self._list()
        elif opts["dry_run"]:
            todo = partitions.plan(timezone.now().date(), ahead, keep)
            for line in todo.lines():
                self.stdout.write(f"would {line}" if line != "nothing to do" else line)
        else:
            run = partitions.maintain(ahead=ahead, keep=keep)
            if run.status != TaskRun.Status.SUCCEEDED:
                raise CommandError(run.error)
            self.stdout.write(f"created {len(run.stats['created'])}, dropped "
                              f"{len(run.stats['dropped'])}: "
                              f"{', '.join(run.stats['created'] + run.stats['dropped']) or '-'}")

    def _list(self) -> None:
        for table in partitions.TABLES:
            for p in partitions.partitions(table):
                month = "default" if p.month is None else f"{p.month:%Y-%m}"
                self.stdout.write(f"{p.name:45} {month:8} ~{max(p.rows, 0):>12,} rows "
                                  f"{p.bytes / 1e6:>10,.1f} MB")
