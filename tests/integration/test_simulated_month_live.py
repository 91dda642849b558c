"""The simulator's month read live from a real Prometheus (issue 17) and a real
VictoriaMetrics (issue 29): the detection figures must be those read from the same telemetry
as files (tests/security/test_simulator_month.py): every injected incident found with the
right entity and severity, no false alarm.

8 nodes x 30 days of hourly dcgm-exporter and node_exporter series (seed 1), backfilled with
promtool into a private Prometheus, or imported into a private VictoriaMetrics; jobs,
scripts, sshd logs, probes and inventories as in the files test. Before issue 17 the live
path found 13 of 14 with 4 false alarms here: a bare selector for memory missed hourly
samples (the 5-minute lookback), and a 4-scrape rate window spread multi-node jobs'
InfiniBand traffic hours past their end (docs/security-rules.md).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from apps.demo import findings as report
from apps.security.models import AllowListEntry, Finding
from apps.simulator import SimConfig, simulate
from tests.integration.exporters import backfill, private_store
from tests.jobs.sim_jobs import load_cluster, load_jobs

pytestmark = [pytest.mark.integration("exporters"), pytest.mark.slow, pytest.mark.django_db]
NOW = 1795996800  # 2026-11-30T00:00:00Z


@pytest.mark.parametrize("kind", ["prometheus", "victoriametrics"])
def test_the_month_read_live_finds_every_incident_and_nothing_else(tmp_path: Path,
                                                                   kind: str) -> None:
    out = tmp_path / "month"
    simulate(SimConfig(nodes=8, days=30, seed=1, now=NOW, telemetry_step=3600), out)
    truth = json.loads((out / "ground_truth.json").read_text())
    with private_store(tmp_path, kind) as (url, env):
        backfill(env, sorted((out / "telemetry").glob("*.om")))
        cluster = load_cluster(out)
        load_jobs(cluster, out)
        cluster.prometheus_url = url  # no --openmetrics: telemetry comes from the store
        cluster.metric_labels = {**(cluster.metric_labels or {}), "store": kind}
        cluster.save()
        AllowListEntry.objects.create(kind="admin_user", value="slurmadm", reason="site admin")
        stdout = io.StringIO()
        call_command("detect", "--cluster", "demo", "--since", "2026-10-31T00:00:00Z",
                     "--until", "2026-11-30T00:00:00Z", "--json",
                     "--scripts", str(out / "slurm/scripts"), "--sshd-log", str(out / "logs"),
                     "--probes", str(out / "collector/services.json"),
                     "--inventory", str(out / "inventory"), stdout=stdout,
                     stderr=io.StringIO())
    result = report.report(truth, cluster)
    incidents = [f for f in truth["findings"] if f["category"] == "incident"]
    assert sum(r.injected for r in result.rows) == len(incidents) >= 12
    for row in result.rows:
        assert row.found == row.injected == row.right_severity, (row.rule, row.missed)
        assert row.false_alarms == [], (row.rule, row.false_alarms)
    printed = json.loads(stdout.getvalue())
    assert {f["rule"] for f in printed} == {i["kind"] for i in incidents}
    assert len(printed) == Finding.objects.count()
