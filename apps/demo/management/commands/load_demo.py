"""``manage.py load_demo DIR``: import a simulator folder through the real import paths.

Idempotent: loading the same folder again changes nothing. See ``apps/demo/loader.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.core.errors import AdapterError
from apps.core.progress import Progress
from apps.demo import loader as demo


class Command(BaseCommand):
    help = "Import a `manage.py simulate` folder (Slurm, GPU history, telemetry, traces)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("folder", type=Path)

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            result = demo.load(opts["folder"], Progress(self.stdout))
        except demo.DemoError as exc:
            raise CommandError(str(exc)) from None
        except AdapterError as exc:  # a file the importers read is missing or unreadable
            raise CommandError(f"cannot load {opts['folder']}: {exc}. Is it an unmodified "
                               "`manage.py simulate` folder? Simulate it again.") from None
        for stage, stats in result.stages.items():
            shown = {k: v for k, v in stats.items() if v not in ([], {}, "", None)}
            self.stdout.write(f"{stage:<12} {shown}")
        print_logins(self.stdout, result.logins)


def print_logins(out: Any, logins: list[tuple[str, str, str]]) -> None:
    out.write("Demo logins (kept in the data folder as demo-logins.txt):")
    for name, password, role in logins:
        out.write(f"  {name:<10} {password:<16} {role}")
