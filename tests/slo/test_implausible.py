"""SLOs leave out implausible records until an admin accepts them (issue 25), and their
pages say how many and link to them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from apps.slo import services
from apps.slo.models import Scorecard
from tests.conftest import make_job
from tests.slo.conftest import NOW

pytestmark = pytest.mark.django_db
FLAG = ["ends before it starts (end 2026-11-28 10:00, start 2026-11-28 11:00 UTC)"]


def _totals(world) -> dict[str, float]:
    services.compute_scorecards(NOW)
    return {c.objective.name: c.total for c in Scorecard.objects.filter(team=world.team_a)
            .select_related("objective")}


@pytest.fixture
def flagged(world):
    """bob's failed job of a day ago, flagged at import."""
    start = NOW - timedelta(days=1)
    return make_job(world.cluster, 701, world.users["bob"], world.team_a, state="FAILED",
                    submit_time=start - timedelta(minutes=5), start_time=start,
                    end_time=start + timedelta(hours=1), implausible=FLAG)


def test_scorecards_leave_a_held_back_record_out_until_it_is_accepted(world, flagged):
    held = _totals(world)
    assert (held["Queue wait"], held["Job success"]) == (0, 0)  # the world's jobs: too old
    flagged.implausible_accepted_at = NOW
    flagged.save()
    accepted = _totals(world)
    assert (accepted["Queue wait"], accepted["Job success"]) == (1, 1)


def test_the_sql_and_the_pure_reference_leave_out_the_same_records(world, flagged):
    facts = services.job_facts(world.cluster.jobs.all())
    assert flagged.job_id not in {f.job_id for f in facts} and len(facts) == 5


def test_the_scorecard_pages_say_how_many_records_they_left_out(world, flagged, login):
    services.compute_scorecards(NOW)
    team = login("alice").get(reverse("slo-team", args=["nlp"])).content.decode()
    assert "1 implausible job record\n  left out of these SLOs until an admin accepts it" in team
    assert "?implausible=1&amp;scope=team&amp;team=nlp" in team
    overview = login("staff").get(reverse("slo-list")).content.decode()
    assert "1 implausible job record" in overview and "?implausible=1&amp;scope=all" in overview
    assert b"implausible" not in login("carol").get(reverse("slo-list")).content
