"""``manage.py verdict_report GROUND_TRUTH_FILE --cluster NAME``: verdicts against the truth.

Prints, per planted pathology kind, the share found by the stored straggler verdicts and
diagnoses, and the false alarms on healthy jobs (``apps/demo/verdicts.py`` says how each is
matched). Run it after archiving the simulated cluster's jobs::

    manage.py simulate --nodes 8 --days 3 --seed 1 --out /tmp/x --telemetry-step 300
    manage.py load_demo /tmp/x            # or any import of /tmp/x's jobs
    manage.py archive_jobs --cluster demo --all --openmetrics /tmp/x/telemetry
    manage.py verdict_report /tmp/x/ground_truth.json --cluster demo
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters.models import Cluster
from apps.demo import verdicts


class Command(BaseCommand):
    help = "Compare stored verdicts and diagnoses with the simulator's ground truth."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ground_truth", type=Path, help="the simulator's ground_truth.json")
        parser.add_argument("--cluster", help="cluster name (default: the file's meta.cluster)")

    def handle(self, *args: Any, **opts: Any) -> None:
        truth = _read(opts["ground_truth"])
        name = opts["cluster"] or truth.get("meta", {}).get("cluster", "")
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            raise CommandError(f"no cluster named {name!r}")
        self.stdout.write(verdicts.render(verdicts.report(truth, cluster)))


def _read(path: Path) -> dict[str, Any]:
    try:
        truth = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CommandError(f"{path}: cannot read the ground truth ({exc})") from exc
    if not isinstance(truth, dict) or not {"findings", "jobs"} <= set(truth):
        raise CommandError(f"{path}: not a simulator ground truth (no findings and jobs)")
    return truth
