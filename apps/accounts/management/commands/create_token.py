"""``manage.py create_token USER --name NAME [--days N] [--replace]``: a named API token for a
service account (the node collectors'), printed once on stdout.

The page "My API tokens" makes them for people; this is for accounts nobody signs in as.
``--replace`` first revokes the user's tokens of that name (rotation).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.accounts import tokens


class Command(BaseCommand):
    help = "Make a named API token for a user and print its key (shown this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", required=True, help="what the token is for")
        parser.add_argument("--days", type=int, default=None,
                            help="days until it expires (default: until revoked)")
        parser.add_argument("--replace", action="store_true",
                            help="revoke the user's tokens of this name first (rotation)")

    def handle(self, *args: Any, **opts: Any) -> None:
        user = get_user_model().objects.filter(username=opts["username"]).first()
        if user is None:
            raise CommandError(f"no user named {opts['username']!r}")
        if opts["replace"]:
            revoked = tokens.revoke_named(user, opts["name"])
            self.stderr.write(f"revoked {revoked} token(s) named {opts['name']!r}")
        try:
            token, key = tokens.create(user, opts["name"], days=opts["days"])
        except tokens.TokenError as exc:
            raise CommandError(str(exc)) from None
        when = f"{token.expires_at:%Y-%m-%d}" if token.expires_at else "never (until revoked)"
        self.stderr.write(f"token {token} for {user}: expires {when}")
        self.stdout.write(key)
