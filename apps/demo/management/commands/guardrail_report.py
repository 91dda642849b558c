"""``manage.py guardrail_report GROUND_TRUTH --telemetry DIR [--cluster NAME] [--every S]``.

Replays the guardrails' beat over the simulated cluster's telemetry files (every ``--every``
seconds of each job's run, default the telemetry step) and prints, per alert kind, the
planted jobs found, precision and recall against the ground truth, the delay, and any alert
on a healthy job (``apps/demo/alerts.py`` says how each is matched). Read-only, unless
``--store`` keeps the alerts (simulated clusters only; marked simulated, never sent). After
``manage.py demo --out DIR`` (or ``simulate`` + ``load_demo``)::

    manage.py guardrail_report DIR/ground_truth.json --telemetry DIR/telemetry
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apps.clusters.models import Cluster
from apps.demo import alerts as report
from apps.guardrails import replay
from apps.guardrails.alerts import store_replayed
from apps.guardrails.live import alert_config
from apps.guardrails.policy import policy_config
from apps.jobs.models import Job


class Command(BaseCommand):
    help = "Replay the guardrails over simulated telemetry and score them against the truth."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ground_truth", type=Path, help="the simulator's ground_truth.json")
        parser.add_argument("--telemetry", type=Path, required=True,
                            help="the simulator's telemetry folder (OpenMetrics files)")
        parser.add_argument("--cluster", help="cluster name (default: the file's meta.cluster)")
        parser.add_argument("--every", type=float,
                            help="seconds between the beat's looks (default: the telemetry step)")
        parser.add_argument("--store", action="store_true",
                            help="keep the replayed alerts (marked simulated, never sent) so "
                                 "the demo's pages show them")

    def handle(self, *args: Any, **opts: Any) -> None:
        truth = _read(opts["ground_truth"])
        meta = truth.get("meta", {})
        name = opts["cluster"] or meta.get("cluster", "")
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            raise CommandError(f"no cluster named {name!r}")
        if not opts["telemetry"].is_dir():
            raise CommandError(f"{opts['telemetry']}: not a folder of telemetry files")
        every = opts["every"] or float(meta.get("telemetry_step") or 600)
        now = datetime.fromtimestamp(int(meta["now"]), tz=UTC) if "now" in meta \
            else datetime.now(tz=UTC)
        seen = replay.replay(cluster, opts["telemetry"], now, every, alert_config(),
                             policy_config(), progress=_progress)
        if opts["store"]:
            if not cluster.is_simulated:
                raise CommandError(f"{name} is not a simulated cluster: --store refused")
            seen = _stored(cluster, seen)
        result = report.score(truth, seen)
        sys.stderr.write("\n")
        self.stdout.write(report.render(result))


def _stored(cluster: Cluster, seen: Iterable[replay.Replayed]) -> Iterator[replay.Replayed]:
    """Pass each job's replay on, keeping its alerts on the way."""
    for r in seen:
        if r.alerts:
            job = Job.objects.select_related("cluster").get(cluster=cluster, job_id=r.job_id)
            store_replayed(job, list(r.alerts.values()))
        yield r


def _progress(done: int, total: int) -> None:
    if done % 200 == 0 or done == total:
        sys.stderr.write(f"\rreplayed {done} / {total} jobs")
        sys.stderr.flush()


def _read(path: Path) -> dict[str, Any]:
    try:
        truth = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CommandError(f"{path}: cannot read the ground truth ({exc})") from exc
    if not isinstance(truth, dict) or not {"findings", "jobs"} <= set(truth):
        raise CommandError(f"{path}: not a simulator ground truth (no findings and jobs)")
    return truth
