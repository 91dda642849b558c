"""``manage.py detection_report GROUND_TRUTH_FILE [--cluster NAME] [--json]``: the stored
security findings against the simulator's ground truth, per rule: incidents injected,
found with the right entity, with the right severity, recall and precision.

Run it after a detection over the simulated period::

    manage.py simulate --nodes 8 --days 30 --seed 1 --telemetry-step 3600 --out /tmp/x
    (import /tmp/x's jobs; docs/security-rules.md shows the steps)
    manage.py detect --cluster demo --since ... --until ... --openmetrics /tmp/x/telemetry \\
        --scripts /tmp/x/slurm/scripts --sshd-log /tmp/x/logs --inventory /tmp/x/inventory \\
        --probes /tmp/x/collector/services.json
    manage.py detection_report /tmp/x/ground_truth.json --cluster demo

Exits 1 when an incident was missed or a finding was a false alarm.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters.models import Cluster
from apps.demo import findings as report


class Command(BaseCommand):
    help = "Compare stored security findings with the simulator's ground truth."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ground_truth", type=Path, help="the simulator's ground_truth.json")
        parser.add_argument("--cluster", help="cluster name (default: the file's meta.cluster)")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        truth = _read(opts["ground_truth"])
        name = opts["cluster"] or truth.get("meta", {}).get("cluster", "")
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            raise CommandError(f"no cluster named {name!r}")
        result = report.report(truth, cluster)
        if opts["json"]:
            self.stdout.write(json.dumps(report.as_json(result), indent=1))
        else:
            self.stdout.write(report.render(result))
        if not result.all_found or result.false_alarms:
            raise CommandError("missed incidents or false alarms (see above)", returncode=1)


def _read(path: Path) -> dict[str, Any]:
    try:
        truth = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CommandError(f"{path}: cannot read the ground truth ({exc})") from exc
    if not isinstance(truth, dict) or not isinstance(truth.get("findings"), list):
        raise CommandError(f"{path}: not a simulator ground truth (no findings list)")
    return truth
