"""``manage.py security_defaults``: add the rules, advisories and allow-list entries a new
release ships that this site does not have yet (edits to existing rows are kept)."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand

from apps.security.defaults import seed


class Command(BaseCommand):
    help = "Add missing security rules, advisories and allow-list defaults."

    def handle(self, *args: Any, **opts: Any) -> None:
        added = seed(apps)
        self.stdout.write(f"added {added['rules']} rule(s), {added['advisories']} "
                          f"advisory(ies), {added['allow']} allow-list entry(ies)")
