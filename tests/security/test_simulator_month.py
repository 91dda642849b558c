"""The simulator's month, the way Falco and Sigma test rules: every injected incident is
found with the right entity and severity, and healthy data raises nothing.

The clean baseline is a whole healthy month: the same simulator with its incidents off
(``SimConfig(incidents=False)``, ``simulate --no-incidents``): patched versions in the node
inventories, and every input detected over every day of the month. The planted pathologies
(a job with no tensor work, idle notebooks, a slow InfiniBand link, an input-bound job)
stay in as near misses.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from apps.demo import findings as report
from apps.security.models import AllowListEntry, Finding
from apps.simulator import SimConfig, simulate
from tests.jobs.sim_jobs import load_cluster, load_jobs

pytestmark = [pytest.mark.django_db, pytest.mark.slow]
NOW = 1795996800  # 2026-11-30T00:00:00Z


@pytest.fixture(scope="module")
def month(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("month")
    simulate(SimConfig(nodes=8, days=30, seed=1, now=NOW, telemetry_step=3600), out)
    return out


def _load(out: Path) -> Any:
    cluster = load_cluster(out)
    load_jobs(cluster, out)
    # The simulated site's admin account logs in to every node (site data, as admins add it).
    AllowListEntry.objects.create(kind="admin_user", value="slurmadm", reason="site admin")
    return cluster


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def _detect(out: Path, since: float, until: float) -> list[dict]:
    args = ["--cluster", "demo", "--since", _iso(since), "--until", _iso(until), "--json",
            "--openmetrics", str(out / "telemetry"), "--scripts", str(out / "slurm/scripts"),
            "--sshd-log", str(out / "logs"), "--probes", str(out / "collector/services.json"),
            "--inventory", str(out / "inventory")]
    stdout = io.StringIO()
    call_command("detect", *args, stdout=stdout, stderr=io.StringIO())
    return json.loads(stdout.getvalue())


def test_every_injected_incident_is_found_with_the_right_entity_and_severity(month):
    cluster = _load(month)
    truth = json.loads((month / "ground_truth.json").read_text())
    printed = _detect(month, truth["meta"]["start"], NOW)
    result = report.report(truth, cluster)
    incidents = [f for f in truth["findings"] if f["category"] == "incident"]
    assert sum(r.injected for r in result.rows) == len(incidents) >= 12
    for row in result.rows:
        assert row.found == row.injected == row.right_severity, (row.rule, row.missed)
        assert row.false_alarms == [], (row.rule, row.false_alarms)
    assert {f["rule"] for f in printed} == {i["kind"] for i in incidents}
    assert len(printed) == Finding.objects.count()

    out = io.StringIO()
    call_command("detection_report", str(month / "ground_truth.json"), "--cluster", "demo",
                 stdout=out)
    text = out.getvalue()
    assert "false alarms: 0" in text and "all rules" in text and "100%" in text


@pytest.fixture(scope="module")
def healthy_month(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """30 days on 4 nodes (one per exporter group), hourly telemetry, no incidents."""
    out = tmp_path_factory.mktemp("healthy")
    simulate(SimConfig(nodes=4, days=30, seed=1, now=NOW, telemetry_step=3600,
                       incidents=False), out)
    return out


def test_a_healthy_month_raises_no_findings(healthy_month):
    _load(healthy_month)
    truth = json.loads((healthy_month / "ground_truth.json").read_text())
    assert truth["meta"]["incidents"] is False
    assert [f for f in truth["findings"] if f["category"] == "incident"] == []
    # the near misses are in: pathologies that look odd but are not security incidents
    assert {"no_tensor_cores", "idle_notebook", "slow_ib_link"} <= {
        f["kind"] for f in truth["findings"]}
    inventory = json.loads(next((healthy_month / "inventory").glob("*.json")).read_text())
    assert (inventory["software"]["slurm"], inventory["software"]["munge"]) == (
        "22.05.11", "0.5.18")
    since = truth["meta"]["start"]
    assert NOW - since == 30 * 86400 and truth["meta"]["telemetry_start"] <= since
    found = _detect(healthy_month, since, NOW)
    assert found == [], [f["title"] for f in found]
    assert Finding.objects.count() == 0
