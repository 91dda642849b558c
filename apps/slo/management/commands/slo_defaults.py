"""``manage.py slo_defaults``: add the default ending rules and SLOs that are missing (the
data migration does it once; admins' edits are kept)."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand

from apps.slo.defaults import seed


class Command(BaseCommand):
    help = "Add missing default ending rules and SLOs (existing rows are left alone)."

    def handle(self, *args: Any, **opts: Any) -> None:
        added = seed(apps)
        self.stdout.write(f"added {added['rules']} ending rule(s), "
                          f"{added['objectives']} SLO(s)")
