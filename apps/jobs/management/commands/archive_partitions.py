"""``manage.py archive_partitions``: the twin of beat's ``maintain_archive_partitions``.

    manage.py archive_partitions                  # create months ahead, detach past retention,
                                                  # queue the drop of what it detached
    manage.py archive_partitions --drop-now       # ... and drop the detached tables here
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
    help = ("Create the archive's monthly partitions ahead, detach months past retention and "
            "queue their drop.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true",
                            help="print what would be created and dropped, change nothing")
        parser.add_argument("--list", action="store_true", help="list the partitions")
        parser.add_argument("--drop-now", action="store_true",
                            help="drop the detached months here instead of queueing the "
                                 "drop_detached_partitions task")
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
            self._maintain(ahead, keep, drop_now=opts["drop_now"])

    def _maintain(self, ahead: int, keep: int, drop_now: bool) -> None:
        run = partitions.maintain(ahead=ahead, keep=keep, queue_drop=not drop_now)
        if run.status != TaskRun.Status.SUCCEEDED:
            raise CommandError(run.error)
        stats = run.stats
        self.stdout.write(f"created {len(stats['created'])}: "
                          f"{', '.join(stats['created']) or '-'}")
        self.stdout.write(f"detached {len(stats['detached'])} in "
                          f"{stats['detach_s'] * 1000:,.0f} ms "
                          f"({stats['detached_bytes'] / 1e6:,.1f} MB out of the archive): "
                          f"{', '.join(stats['detached']) or '-'}")
        if not stats["to_drop"]:
            return
        if not drop_now:
            where = ("ran in this process: no broker" if settings.CELERY_TASK_ALWAYS_EAGER
                     else "the drop_detached_partitions task, a TaskRun of kind archive_drop")
            self.stdout.write(f"drop queued ({where}): {', '.join(stats['to_drop'])}")
            return
        dropped = partitions.drop_detached()
        if dropped.status != TaskRun.Status.SUCCEEDED:
            raise CommandError(f"the drop failed, the tables stay detached: {dropped.error}")
        self.stdout.write(f"dropped {len(dropped.stats['dropped'])} in "
                          f"{dropped.stats['drop_s'] * 1000:,.0f} ms: "
                          f"{', '.join(dropped.stats['dropped'])}")

    def _list(self) -> None:
        for table in partitions.TABLES:
            for p in partitions.partitions(table):
                month = "default" if p.month is None else f"{p.month:%Y-%m}"
                self.stdout.write(f"{p.name:45} {month:8} ~{max(p.rows, 0):>12,} rows "
                                  f"{p.bytes / 1e6:>10,.1f} MB")
            for p in partitions.detached(table):  # out of the archive, not yet dropped
                self.stdout.write(f"{p.name:45} {p.month:%Y-%m} ~{max(p.rows, 0):>12,} rows "
                                  f"{p.bytes / 1e6:>10,.1f} MB  detached, to drop")
