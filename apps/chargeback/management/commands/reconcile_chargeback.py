"""``manage.py reconcile_chargeback CLUSTER --month YYYY-MM``: Beacon's GPU-hours against
Slurm's report (sreport) and jobs (sacct -T), per account and job by job. Exits 1 when an
account differs by more than the tolerance."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.chargeback import reconciliation, services
from apps.clusters.models import Cluster
from apps.core.errors import AdapterError


class Command(BaseCommand):
    help = "Reconcile a month's allocated GPU-hours with Slurm's own accounting."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster")
        parser.add_argument("--month", help="YYYY-MM (default: this month)")

    def handle(self, *args: Any, **opts: Any) -> None:
        cluster = Cluster.objects.filter(name=opts["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster {opts['cluster']!r}")
        try:
            month = (services.parse_month(opts["month"]) if opts["month"]
                     else services.current_month())
            row = reconciliation.reconcile_month(cluster, month)
        except (services.ChargebackError, reconciliation.ReconcileError, AdapterError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{cluster.name} {month:%Y-%m}, {row.window_start:%Y-%m-%d %H:%M} to "
                          f"{row.window_end:%Y-%m-%d %H:%M} UTC (GPU-minutes):")
        self.stdout.write(f"{'account':<16}{'beacon':>12}{'sreport':>12}{'sacct':>12}{'delta':>10}")
        for a in row.accounts:
            report = "-" if a["report_minutes"] is None else f"{a['report_minutes']:.0f}"
            self.stdout.write(f"{a['account']:<16}{a['beacon_minutes']:>12.1f}{report:>12}"
                              f"{a['jobs_minutes']:>12.1f}{a['delta_minutes']:>10.1f}"
                              f"{'' if a['ok'] else '  DIFFERS'}")
        for j in row.jobs:
            self.stdout.write(f"job {j['job_id']} ({j['account']}/{j['user']}): {j['kind']}, "
                              f"beacon {j['beacon_minutes']} vs slurm {j['slurm_minutes']} min")
        if not row.ok:
            raise CommandError("Beacon differs from Slurm beyond the tolerance")
