"""``manage.py send_digests [--now ISO-TIME]``: last week's right-sizing digests (each once).

``--now`` reads the clock at another time: on the simulated month, its "now" sends the
digests of the demo's last full week.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from apps.guardrails import sizing


class Command(BaseCommand):
    help = "Send last week's right-sizing digests to users and team leads (once each)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--now", help="the time to read as now (ISO 8601, with a zone)")

    def handle(self, *args: Any, **opts: Any) -> None:
        now = timezone.now()
        if opts["now"]:
            try:
                now = datetime.fromisoformat(opts["now"].replace("Z", "+00:00"))
            except ValueError as exc:
                raise CommandError(f"--now: {exc}") from exc
            if now.tzinfo is None:
                raise CommandError("--now needs a time zone (e.g. 2026-12-01T07:00:00Z)")
        stats = sizing.send_digests(now)
        self.stdout.write(json.dumps(stats, indent=2, sort_keys=True))
