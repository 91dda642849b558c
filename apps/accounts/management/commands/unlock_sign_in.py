"""``manage.py unlock_sign_in USER``: lift a sign-in lockout now, from every address.

For the admin who cannot wait for the lockout to end, or who is locked out themselves (the
admin action in Users needs a signed-in admin). Audited as "Sign-in lock lifted".
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.accounts.lockout import unlock


class Command(BaseCommand):
    help = "Lift the sign-in lockout of a user name (every address); audited."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", help="the user name as typed at sign-in")

    def handle(self, *args: Any, **opts: Any) -> None:
        name = opts["user"].strip()
        if not name:
            raise CommandError("give the user name to unlock")
        removed = unlock(name, via="manage.py unlock_sign_in")
        known = get_user_model().objects.filter(username=name).exists()
        note = "" if known else f" (no portal user is named {name!r}; failures are kept by name)"
        self.stdout.write(f"sign-in unlocked for {name}: {removed} failed-attempt record"
                          f"{'s' if removed != 1 else ''} removed{note}; audited")
