"""The demo's last stage evaluates the SLOs at the simulated "now": every team has its
scorecards and the month's snapshots, and loading again writes the same rows."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command

from apps.accounts.models import Team
from apps.demo import loader as demo
from apps.slo.models import Scorecard, Snapshot

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("slodemo")
    call_command("simulate", out=str(out), nodes=4, days=2, seed=5, now="2026-11-02T06:00:00Z",
                 telemetry_step=3600, cluster="slodemo", stdout=io.StringIO())
    return out


def _rows() -> list[tuple]:
    return sorted(Scorecard.objects.values_list("objective__name", "subject", "good", "total",
                                                "budget_remaining", "status", "trend"))


def test_the_demo_has_scorecards_and_snapshots_and_loading_again_changes_nothing(folder):
    loaded = demo.load(folder)
    stage = loaded.stages["slo"]
    teams = Team.objects.count()
    assert stage["scorecards"] == Scorecard.objects.count() == 3 * teams == 15
    assert Scorecard.objects.filter(total__gt=0).count() >= 10
    # 2 November: the open month and October, where the simulation began
    assert set(Snapshot.objects.values_list("month__month", "final").distinct()) == {
        (11, False), (10, True)}
    before = _rows()
    demo.load(folder)
    assert _rows() == before
