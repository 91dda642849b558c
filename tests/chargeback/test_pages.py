"""Chargeback pages: who sees which statements, a researcher's own usage, the admin actions
(terms, finalise, adjust, refresh, reconcile) and the exports."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from apps.chargeback import services
from apps.chargeback.models import BillingPeriod, Statement
from tests.chargeback.conftest import NOV, archive

DEC3 = datetime(2026, 12, 3, tzinfo=UTC)
HOME = reverse("chargeback-home") + "?month=2026-11"


@pytest.fixture
def drafts(world, rates):
    archive(world.jobs["bob"], 0.25, held_idle=0.75)
    services.refresh_statements(NOV, now=DEC3)
    return {s.team.slug: s for s in Statement.objects.select_related("team")}


@pytest.mark.parametrize(("persona", "teams"), [
    ("alice", {"nlp"}), ("dave", {"vision"}), ("bob", set()), ("carol", set()),
    ("staff", {"nlp", "vision"}),
])
def test_the_month_lists_exactly_the_statements_the_user_may_see(drafts, login, persona, teams):
    page = login(persona).get(HOME)
    assert {s.team.slug for s in page.context["statements"]} == teams
    exported = login(persona).get(reverse("chargeback-month-export", args=["2026-11", "json"]))
    assert {s["team"] for s in json.loads(exported.content)} == teams


def test_a_researcher_sees_their_usage_and_what_it_would_cost_at_useful_hours(drafts, login):
    page = login("bob").get(reverse("chargeback-my-usage") + "?month=2026-11")
    usage = page.context["usage"]
    assert (usage.totals.amount, usage.totals.useful_amount) == (Decimal("24.00"),
                                                                 Decimal("6.00"))
    text = page.content.decode()
    assert "18.00 EUR</strong> less this month" in text and "6.0 GPU-hours sat idle" in text


def test_a_bad_month_is_a_404(world, login):
    assert login("bob").get(reverse("chargeback-home") + "?month=2026-13").status_code == 404


def test_the_statement_page_and_its_exports(drafts, login):
    nlp = drafts["nlp"]
    page = login("alice").get(reverse("chargeback-statement", args=[nlp.pk]))
    assert [ln.user_name for ln in page.context["usage_lines"]] == ["alice", "bob", "tom"]
    response = login("alice").get(reverse("chargeback-statement-export", args=[nlp.pk, "csv"]))
    assert response["Content-Type"] == "text/csv"
    assert 'filename="chargeback-nlp-2026-11.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {r["user"] for r in rows} == {"alice", "bob", "tom"}


def test_admins_set_the_terms_and_the_drafts_follow(drafts, login):
    response = login("staff").post(reverse("chargeback-terms"), {
        "month": "2026-11", "policy": "useful_plus_fee", "waste_fee": "0"})
    assert response.status_code == 303
    assert BillingPeriod.objects.get(month=NOV).policy == "useful_plus_fee"
    # bob's 6 idle hours are free now: 2 useful + alice's and tom's 16 unmeasured = 18 h x 3
    assert Statement.objects.get(team__slug="nlp").amount == Decimal("54.00")


def test_bad_terms_come_back_as_a_message(drafts, login):
    client = login("staff")
    response = client.post(reverse("chargeback-terms"), {"month": "2026-11",
                                                         "policy": "useful_plus_fee",
                                                         "waste_fee": "3"}, follow=True)
    assert "between 0 and 1" in response.content.decode()
    assert BillingPeriod.objects.get(month=NOV).policy == "allocated"


def test_finalise_then_adjust_through_the_pages(drafts, login):
    nlp = drafts["nlp"]
    url = reverse("chargeback-finalise", args=[nlp.pk])
    # a new sign-in inside each time travel: a session idle for days has expired
    with time_machine.travel(datetime(2026, 11, 20, tzinfo=UTC)):
        page = login("staff").post(url, follow=True)
    assert "still open" in page.content.decode()
    with time_machine.travel(DEC3):
        assert login("staff").post(url).status_code == 303
    client = login("staff")
    nlp.refresh_from_db()
    assert nlp.is_final and nlp.finalised_by.username == "staff"
    client.post(reverse("chargeback-adjust", args=[nlp.pk]),
                {"amount": "-4.00", "description": "credit for the node outage"})
    client.post(reverse("chargeback-adjust", args=[nlp.pk]), {"amount": "1", "description": ""})
    nlp.refresh_from_db()
    assert (nlp.amount, nlp.total_due) == (Decimal("72.00"), Decimal("68.00"))
    page = client.get(reverse("chargeback-statement", args=[nlp.pk])).content.decode()
    assert "credit for the node outage" in page and "Finalise</button>" not in page


def test_leads_cannot_finalise_their_own_statement(drafts, login):
    nlp = drafts["nlp"]
    with time_machine.travel(DEC3):
        assert login("alice").post(reverse("chargeback-finalise", args=[nlp.pk])).status_code \
            == 403
    nlp.refresh_from_db()
    assert not nlp.is_final


def test_reconciling_a_cluster_without_slurm_says_why(drafts, login, world):
    page = login("staff").post(reverse("chargeback-reconcile"),
                               {"month": "2026-11", "cluster": world.cluster.name}, follow=True)
    assert "has no Slurm backend" in page.content.decode()


def test_the_statement_says_where_the_waste_came_from(drafts, login, world):
    archive(world.jobs["tom"], 0.9, waiting=0.1)  # efficient: not listed
    page = login("alice").get(reverse("chargeback-statement", args=[drafts["nlp"].pk]))
    [row] = page.context["wasteful"]
    assert (row.job.job_id, row.kind, round(row.share, 2)) == (101, "held_idle", 0.75)
    assert "idle with memory held" in page.content.decode()
    api_rows = login("alice").get(reverse("api:chargeback-statement-detail",
                                          args=[drafts["nlp"].pk])).json()["wasteful_jobs"]
    assert [(r["job_id"], r["kind"]) for r in api_rows] == [(101, "held_idle")]
