"""The SLO API: scorecards and history through visible_to (exact sets), worst jobs the caller
may see, objectives admins write (validated), the ending classification."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.slo import services
from apps.slo.models import Objective
from tests.slo.conftest import NOW

pytestmark = pytest.mark.django_db


@pytest.fixture
def evaluated(world, jobs):
    services.run_evaluation(NOW, notify=False)
    Objective.objects.create(name="Platform wait", sli="queue_wait", target=0.9,
                             wait_minutes=60, scope="platform")
    services.compute_scorecards(NOW)


@pytest.mark.parametrize(("persona", "subjects"), [
    ("bob", {"nlp"}), ("alice", {"nlp"}), ("carol", {"vision"}), ("dave", {"vision"}),
    ("staff", {"nlp", "vision", "platform"}),
])
def test_scorecards_are_exactly_the_visible_ones(evaluated, login, persona, subjects):
    data = login(persona).get(reverse("api:slo-scorecard-list"), {"limit": 100}).json()
    assert {r["team"] or r["subject"] for r in data["results"]} == subjects
    budgets = [r["budget_remaining"] for r in data["results"]]
    assert budgets == sorted(budgets)


def test_a_scorecard_carries_the_sli_its_budget_burn_rates_and_breakdown(evaluated, login):
    data = login("alice").get(reverse("api:slo-scorecard-list"),
                              {"team": "nlp", "limit": 10}).json()["results"]
    wait = next(r for r in data if r["sli_kind"] == "queue_wait")
    assert 0 <= wait["sli"] <= 1 and wait["good"] <= wait["total"]
    assert set(wait["burn_rates"]) == {"5m", "30m", "1h", "2h", "6h", "1d", "3d"}
    assert wait["details"]["breakdown"] and "p90" in wait["details"]
    assert len(wait["trend"]) == 28
    one = login("alice").get(reverse("api:slo-scorecard-detail", args=[wait["id"]])).json()
    assert one["worst_jobs"] == wait["worst_jobs"]


def test_researchers_get_only_their_own_worst_jobs(evaluated, login):
    mine = login("bob").get(reverse("api:slo-scorecard-list"), {"limit": 10}).json()
    lead = login("alice").get(reverse("api:slo-scorecard-list"), {"limit": 10}).json()
    assert {w["user_name"] for r in mine["results"] for w in r["worst_jobs"]} <= {"bob"}
    assert len({w["user_name"] for r in lead["results"] for w in r["worst_jobs"]}) > 1


def test_another_teams_scorecard_is_not_found(evaluated, login):
    staff = login("staff").get(reverse("api:slo-scorecard-list"),
                               {"team": "vision", "limit": 1}).json()
    pk = staff["results"][0]["id"]
    assert login("alice").get(reverse("api:slo-scorecard-detail", args=[pk])).status_code == 404


def test_history_by_month_and_its_filters(evaluated, login):
    rows = login("alice").get(reverse("api:slo-snapshot-list"),
                              {"month": "2026-11", "limit": 50}).json()["results"]
    assert {r["month"] for r in rows} == {"2026-11"} and {r["team"] for r in rows} == {"nlp"}
    assert login("alice").get(reverse("api:slo-snapshot-list"),
                              {"month": "2026-13"}).status_code == 400
    assert login("alice").get(reverse("api:slo-snapshot-list"),
                              {"stat": "x"}).status_code == 400


def test_objectives_are_read_by_all_and_written_by_admins(world, login):
    url = reverse("api:slo-objective-list")
    assert {o["name"] for o in login("bob").get(url).json()["results"]} == {
        "Queue wait", "Job success", "GPU efficiency"}
    body = {"name": "Interactive wait", "sli": "queue_wait", "target": 0.95,
            "wait_minutes": 5, "window": "rolling_7d", "scope": "partition",
            "partition": "interactive"}
    assert login("alice").post(url, body, content_type="application/json").status_code == 403
    created = login("staff").post(url, body, content_type="application/json")
    assert created.status_code == 201, created.json()
    assert created.json()["target_text"] == "95% within 5 min"
    team = login("staff").post(url, {**body, "name": "Vision wait", "scope": "team",
                                     "team": "vision"}, content_type="application/json")
    assert team.status_code == 201 and team.json()["team"] == "vision"
    pk = created.json()["id"]
    detail = reverse("api:slo-objective-detail", args=[pk])
    changed = login("staff").patch(detail, {"target": 0.9}, content_type="application/json")
    assert changed.status_code == 200 and Objective.objects.get(pk=pk).target == 0.9
    assert login("bob").delete(detail).status_code == 403
    assert login("staff").delete(detail).status_code == 204


@pytest.mark.parametrize(("body", "field", "status"), [
    # the schema says these are invalid: 400
    ({"sli": "job_success", "target": 1.0}, "target", 400),
    ({"sli": "job_success", "target": 0}, "target", 400),
    ({"sli": "latency", "target": 0.9}, "sli", 400),
    ({"sli": "job_success", "target": 0.9, "window": "rolling_1y"}, "window", 400),
    # well-formed, refused by a rule or the current state: 409
    ({"sli": "queue_wait", "target": 0.9}, "wait_minutes", 409),
    ({"sli": "job_success", "target": 0.9, "scope": "platform", "team": "nlp"}, "team", 409),
    ({"sli": "job_success", "target": 0.9, "team": "nosuchteam"}, "team", 409),
    ({"sli": "job_success", "target": 0.9, "name": "Queue wait"}, "name", 409),
])
def test_bad_objectives_are_refused_with_the_field_and_nothing_is_saved(world, login, body,
                                                                        field, status):
    before = Objective.objects.count()
    response = login("staff").post(reverse("api:slo-objective-list"), {"name": "x", **body},
                                   content_type="application/json")
    assert response.status_code == status and field in response.json()
    assert Objective.objects.count() == before


def test_the_ending_rules_are_published(world, login):
    rows = login("carol").get(reverse("api:slo-ending-rule-list"), {"limit": 50}).json()
    keys = [r["key"] for r in rows["results"]]
    assert keys[:3] == ["never_started", "gpu_fault", "node_fail"]
    rule = login("carol").get(reverse("api:slo-ending-rule-detail", args=["node_fail"])).json()
    assert rule["cause"] == "platform" and rule["states"] == ["NODE_FAIL"]
