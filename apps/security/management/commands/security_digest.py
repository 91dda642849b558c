"""``manage.py security_digest``: send the digest of non-critical findings now (the twin of
the ``send_digest`` beat task)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from apps.security import services


class Command(BaseCommand):
    help = "Send the pending security findings digest (e-mail and webhook)."

    def handle(self, *args: Any, **opts: Any) -> None:
        notified = services.send_digest()  # recorded like the task's run
        self.stdout.write(f"notified {notified} finding(s)")
