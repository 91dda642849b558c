"""``manage.py security_digest``: send the digest of non-critical findings now (the twin of
the ``send_digest`` beat task)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from apps.core.runs import tracked_run
from apps.security import notify


class Command(BaseCommand):
    help = "Send the pending security findings digest (e-mail and webhook)."

    def handle(self, *args: Any, **opts: Any) -> None:
        # recorded like the task's run: the next digest reports problems after this one
        with tracked_run("security.digest") as run:
            run.stats = {"notified": notify.send_digest()}
        self.stdout.write(f"notified {run.stats['notified']} finding(s)")
