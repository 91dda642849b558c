"""``manage.py diagnosis_rules``: list the diagnosis rules, or put the shipped ones back.

    manage.py diagnosis_rules                 # list them
    manage.py diagnosis_rules --reset         # every shipped rule back to its defaults
    manage.py diagnosis_rules --reset KEY ... # these only
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from apps.jobs.diagnosis_defaults import DEFAULT_RULES
from apps.jobs.models import DiagnosisCondition, DiagnosisRule


class Command(BaseCommand):
    help = "List the diagnosis rules, or reset shipped rules to their defaults."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("keys", nargs="*", help="rule keys (with --reset)")
        parser.add_argument("--reset", action="store_true", help="restore shipped defaults")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["reset"]:
            self.stdout.write(f"{reset(opts['keys'])} rule(s) reset")
        for rule in DiagnosisRule.objects.prefetch_related("conditions"):
            state = "" if rule.enabled else " (disabled)"
            conditions = " and ".join(str(c) for c in rule.conditions.all())
            self.stdout.write(f"{rule.key:<28} {rule.area:<9} {conditions}{state}")


@transaction.atomic
def reset(keys: list[str]) -> int:
    """Recreate the shipped rules named (all when none), keeping nothing of the edits."""
    specs = [s for s in DEFAULT_RULES if not keys or s["key"] in keys]
    unknown = set(keys) - {s["key"] for s in specs}
    if unknown:
        raise CommandError(f"no shipped rule named {', '.join(sorted(unknown))}")
    for spec in specs:
        fields = {k: v for k, v in spec.items() if k not in ("key", "conditions")}
        rule, _ = DiagnosisRule.objects.update_or_create(
            key=spec["key"], defaults={**fields, "contact": None, "enabled": True})
        rule.conditions.all().delete()
        DiagnosisCondition.objects.bulk_create([
            DiagnosisCondition(rule=rule, fact=fact, op=op, value=value)
            for fact, op, value in spec["conditions"]])
    return len(specs)
