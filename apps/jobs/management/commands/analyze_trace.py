"""``manage.py analyze_trace PATH [PATH ...] [--json]``: phases, GPU timeline and straggler.

``manage.py`` runs this command without starting Django (``apps/jobs/trace_command.py``);
this class is the same command for ``call_command`` and Django's command list.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.jobs.trace_command import HELP, TraceCommandError, add_arguments, execute


class Command(BaseCommand):
    help = HELP

    def add_arguments(self, parser: CommandParser) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            execute(options, lambda text: self.stdout.write(text, ending=""),
                    lambda text: self.stderr.write(text, ending=""))
        except TraceCommandError as exc:
            raise CommandError(str(exc)) from exc
