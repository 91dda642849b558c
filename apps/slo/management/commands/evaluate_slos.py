"""``manage.py evaluate_slos``: the periodic SLO evaluation, now (twin of the beat task).

Computes every enabled objective's scorecards, the monthly snapshots and, unless
``--no-notify``, sends breach and fast-burn notifications (each episode once). ``--now``
evaluates at another instant (a backfill, a replayed month); ``--backfill-months N`` also
writes final snapshots of the N months before the current one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.slo import services
from apps.slo.models import Scorecard


def _instant(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(f"--now {text!r} is not an ISO 8601 time "
                           "(e.g. 2026-11-30T00:00:00Z)") from None
    if moment.tzinfo is None:
        raise CommandError("--now needs a time zone (e.g. Z or +01:00)")
    return moment


class Command(BaseCommand):
    help = "Evaluate every enabled SLO now: scorecards, snapshots and notifications."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--now", help="evaluate at this instant (ISO 8601 with a zone)")
        parser.add_argument("--no-notify", action="store_true",
                            help="compute and store, send nothing")
        parser.add_argument("--backfill-months", type=int, default=0,
                            help="also write final snapshots of this many past months")

    def handle(self, *args: Any, **opts: Any) -> None:
        now = _instant(opts["now"]) if opts["now"] else None
        if opts["backfill_months"] < 0:
            raise CommandError("--backfill-months must be 0 or more")
        result = services.run_evaluation(now, notify=not opts["no_notify"],
                                         force_snapshots=True)
        backfilled = services.backfill_snapshots(opts["backfill_months"], now) \
            if opts["backfill_months"] else 0
        for card in (Scorecard.objects.select_related("objective", "team")
                     .order_by("budget_remaining", "objective__order", "subject")):
            sli = "-" if card.sli is None else f"{card.sli * 100:.1f}%"
            self.stdout.write(f"{card.subject_label:24} {card.objective.name:28} "
                              f"{card.status:10} SLI {sli:>7}  budget "
                              f"{card.budget_remaining * 100:7.1f}%")
        self.stderr.write(f"evaluate_slos: {result.stats()}"
                          + (f", {backfilled} backfilled snapshots" if backfilled else ""))
