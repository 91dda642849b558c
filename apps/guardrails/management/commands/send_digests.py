"""``manage.py send_digests``: last week's right-sizing digests (each sent once)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand
from django.utils import timezone

from apps.guardrails import sizing


class Command(BaseCommand):
    help = "Send last week's right-sizing digests to users and team leads (once each)."

    def handle(self, *args: Any, **opts: Any) -> None:
        stats = sizing.send_digests(timezone.now())
        self.stdout.write(json.dumps(stats, indent=2, sort_keys=True))
