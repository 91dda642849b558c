"""``manage.py check_guardrails [--cluster NAME]``: the beat's guardrail check, now.

A simulated cluster whose stores answer (``make demo-full``) is checked at its simulated
"now", alerts kept marked simulated, nothing sent, no policy step
(``services.check_simulated``).

Refreshes each running GPU job's live snapshot, raises its alerts, takes the idle-job
policy's step (``GUARDRAILS_POLICY``) and sends what is pending; prints the run's figures
(JSON: ``sent.no_address`` and ``sent.no_address_users`` among them), and on stderr, in
words, the alerts nobody could be told of: for which Slurm users, and why.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters.models import Cluster
from apps.guardrails import services


class Command(BaseCommand):
    help = "Check running GPU jobs now: alerts to their owners and the idle-job policy."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", help="only this cluster's jobs")

    def handle(self, *args: Any, **opts: Any) -> None:
        simulated = [c for c in services.simulated_clusters() if c.name == opts["cluster"]]
        if simulated:  # make demo-full: its running jobs at its simulated "now", nothing sent
            self.stdout.write(json.dumps(services.check_simulated(simulated[0]), indent=2,
                                         sort_keys=True, default=str))
            return
        clusters = services.watched_clusters()
        if opts["cluster"]:
            clusters = [c for c in clusters if c.name == opts["cluster"]]
            if not clusters:
                known = Cluster.objects.filter(name=opts["cluster"]).exists()
                raise CommandError(f"cluster {opts['cluster']!r} " + (
                    "has no Prometheus or other telemetry store (a simulated one without: "
                    "use guardrail_report)" if known else "does not exist"))
        stats = services.run_checks(jobs=services.running_gpu_jobs(clusters))
        self.stdout.write(json.dumps(stats, indent=2, sort_keys=True, default=str))
        sent = stats["sent"]  # stdout stays one JSON document, for scripts
        if sent["no_address"]:
            # Say for whom and why: "messages 0" alone hid 20 undelivered alerts (issue 28).
            users = sent["no_address_users"]
            self.stderr.write(self.style.WARNING(
                f"{sent['no_address']} alert(s) had no address, for {len(users)} Slurm "
                f"user(s); they are kept as 'no address' and not sent again:"))
            for name, reason in sorted(users.items()):
                self.stderr.write(f"  {name}: {reason}")
            self.stderr.write("Give these users an e-mail address (their portal account, "
                              "or LDAP/OIDC at sign-in) or set BEACON_EMAIL_DOMAIN "
                              "(docs/diagnosis.md, 'Who hears').")
