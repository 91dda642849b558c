"""The demo loads the simulator's folder through the real paths, security included: its
findings are the injected incidents, with nothing else."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command

from apps.clusters.models import Cluster
from apps.demo import findings as report
from apps.demo import loader as demo
from apps.security.models import Finding

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("secdemo")
    call_command("simulate", out=str(out), nodes=4, days=3, seed=7, now="2026-10-20T00:00:00Z",
                 telemetry_step=900, cluster="secdemo", stdout=io.StringIO())
    return out


def test_the_demo_finds_the_injected_incidents_and_nothing_else(folder):
    loaded = demo.load(folder)
    stage = loaded.stages["security"]
    assert stage["findings"] == Finding.objects.count() > 0
    truth = json.loads((folder / "ground_truth.json").read_text())
    result = report.report(truth, Cluster.objects.get(name="secdemo"))
    assert result.all_found and result.false_alarms == 0, report.render(result)
    again = demo.load(folder)
    assert again.stages["security"]["created"] == 0  # loading again changes nothing
    assert Finding.objects.count() == stage["findings"]


def test_the_demo_shows_one_example_of_each_site_setting_and_they_run(folder):
    from apps.security.models import (
        ComponentAlias,
        IbStorageBaseline,
        QuietSchedule,
        SshAllowedSource,
    )

    loaded = demo.load(folder)
    assert loaded.stages["security"]["findings"] > 0
    assert set(SshAllowedSource.objects.values_list("who", flat=True)) == {"everyone", "admins"}
    assert QuietSchedule.objects.get().when() == "daily at 04:00 for 5 min (UTC)"
    assert IbStorageBaseline.objects.count() == ComponentAlias.objects.count() == 1
    # the login-source rule now runs on the demo: every simulated login is from the login
    # nodes, so it stays silent (and the test above shows nothing else changed)
    assert not Finding.objects.filter(rule_key="ssh_unexpected_source").exists()
