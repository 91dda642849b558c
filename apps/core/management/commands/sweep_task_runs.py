"""``manage.py sweep_task_runs [--older-than-minutes N]``: close runs whose process died.

The twin of the ``sweep_stale_runs`` beat task: every TaskRun still "running" after N
minutes (default ``TASK_RUN_STALE_MINUTES``) is marked failed with the reason.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core import services


class Command(BaseCommand):
    help = "Mark failed the task runs still 'running' long after their process died."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than-minutes", type=int,
                            default=settings.TASK_RUN_STALE_MINUTES,
                            help="runs started longer ago than this (default: "
                                 "TASK_RUN_STALE_MINUTES)")

    def handle(self, *args: Any, **opts: Any) -> None:
        minutes = opts["older_than_minutes"]
        if minutes < 0:
            raise CommandError("--older-than-minutes must be 0 or more")
        closed = services.sweep_stale_runs(timedelta(minutes=minutes))
        self.stdout.write(f"closed {closed} abandoned run(s)")
