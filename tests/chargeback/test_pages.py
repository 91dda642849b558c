"""Chargeback pages: who sees which statements, a researcher's own usage, the admin actions
(terms, finalise, adjust, refresh, reconcile) and the exports."""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, date, datetime
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
    assert "18.00 EUR</strong> less this month" in text and "6.0 GPU-h sat idle" in text


@pytest.mark.parametrize("url_name", ["chargeback-home", "chargeback-my-usage"])
@pytest.mark.parametrize("typed", ["2026-13", "11-2026", "nope", "2026-1", " 2026-11"])
def test_a_month_typo_is_a_400_with_the_form_keeping_the_input(world, login, url_name, typed):
    """Not a 404 page that loses what was typed (issue 26)."""
    response = login("bob").get(reverse(url_name), {"month": typed})
    assert response.status_code == 400
    html = response.content.decode()
    assert 'class="error" id="month-error"' in html and "is not YYYY-MM" in html
    assert f'name="month" value="{typed}"' in html and 'aria-invalid="true"' in html
    assert "chargeback/month_refused.html" in [t.name for t in response.templates]


@pytest.mark.parametrize("url_name", ["chargeback-home", "chargeback-my-usage"])
def test_the_month_pages_offer_the_month_form_with_the_month_shown(world, login, url_name):
    html = login("bob").get(reverse(url_name), {"month": "2026-10"}).content.decode()
    assert 'id="month-form"' in html and 'name="month" value="2026-10"' in html
    assert 'class="error" id="month-error"' not in html


def test_a_month_typo_in_an_export_link_is_a_400_saying_why(world, login):
    response = login("bob").get("/chargeback/2026-13/export.csv")
    assert response.status_code == 400 and b"is not YYYY-MM" in response.content


def test_the_statement_page_and_its_exports(drafts, login):
    nlp = drafts["nlp"]
    page = login("alice").get(reverse("chargeback-statement", args=[nlp.pk]))
    assert [ln.user_name for ln in page.context["usage_lines"]] == ["alice", "bob", "tom"]
    response = login("alice").get(reverse("chargeback-statement-export", args=[nlp.pk, "csv"]))
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert "no-store" in response["Cache-Control"]  # an export is private (issue 27)
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


@pytest.mark.parametrize("name", ["no-such-cluster", ""])
def test_reconciling_an_unknown_cluster_says_so(drafts, login, world, name):
    page = login("staff").post(reverse("chargeback-reconcile"),
                               {"month": "2026-11", "cluster": name}, follow=True)
    assert "no such cluster" in page.content.decode()


def test_a_bad_month_is_a_400_on_the_chargeback_pages(drafts, login, world):
    assert login("staff").get(reverse("chargeback-home"), {"month": "2026-13"}).status_code == 400


def test_the_statement_says_where_the_waste_came_from(drafts, login, world):
    archive(world.jobs["tom"], 0.9, waiting=0.1)  # efficient: not listed
    page = login("alice").get(reverse("chargeback-statement", args=[drafts["nlp"].pk]))
    [row] = page.context["wasteful"]
    assert (row.job.job_id, row.kind, round(row.share, 2)) == (101, "held_idle", 0.75)
    assert "idle with memory held" in page.content.decode()
    api_rows = login("alice").get(reverse("api:chargeback-statement-detail",
                                          args=[drafts["nlp"].pk])).json()["wasteful_jobs"]
    assert [(r["job_id"], r["kind"]) for r in api_rows] == [(101, "held_idle")]


# --- Drafts that refresh by themselves, the rates they used, the rate card ------------------


# Autocommit, as in a web request: the embedded default runs the task before the page reads.
@pytest.mark.django_db(transaction=True)
def test_opening_a_month_with_usage_makes_its_drafts_without_anyone_pressing_refresh(
        world, rates, login):
    from apps.core.models import TaskRun

    archive(world.jobs["bob"], 0.25, held_idle=0.75)
    assert not Statement.objects.exists()
    page = login("staff").get(HOME)
    assert {s.team.slug for s in page.context["statements"]} == {"nlp", "vision"}
    assert Statement.objects.get(team__slug="nlp").amount == Decimal("72.00")
    login("alice").get(HOME)  # fresh drafts: nothing is asked again
    assert not services.request_refresh(NOV)
    assert TaskRun.objects.filter(kind="chargeback.refresh").count() == 1


def test_stale_drafts_are_refreshed_once_and_final_months_never(
        drafts, login, settings, django_capture_on_commit_callbacks):
    Statement.objects.update(computed_at=DEC3.replace(year=2025))  # a year old
    with django_capture_on_commit_callbacks(execute=True):
        assert services.request_refresh(NOV)
        assert not services.request_refresh(NOV)  # claimed: asked once per period
    assert Statement.objects.filter(computed_at__year=2025).count() == 0
    with time_machine.travel(DEC3):
        for statement in Statement.objects.all():
            services.finalise(statement, None)
    BillingPeriod.objects.update(refresh_requested_at=None)
    assert not services.refresh_due(NOV, datetime(2027, 6, 1, tzinfo=UTC))
    assert not services.refresh_due(date(2027, 1, 1), DEC3)  # a month not begun


def test_statements_show_the_rate_used_and_admins_get_a_link_to_the_rate_card(drafts, login):
    url = reverse("chargeback-statement", args=[drafts["nlp"].pk])
    lead = login("alice").get(url).content.decode()
    rates = lead.split('id="rates"')[1].split("</section>")[0]
    assert "3.0000 EUR" in rates and "2.0000 EUR" in rates and "h100" in rates
    assert reverse("chargeback-rates") not in lead  # leads read the card, admins edit it
    usage = lead.split("<h2>Usage</h2>")[1].split("</section>")[0]
    assert "Rate (EUR/GPU-h)" in usage and ">3.0000<" in usage
    admin = login("staff").get(url).content.decode()
    assert f'href="{reverse("chargeback-rates")}"' in admin
    assert f'href="{reverse("chargeback-rates")}"' in login("staff").get(HOME).content.decode()


def test_without_a_rate_the_statement_says_so_and_where_rates_are_set(world, login):
    archive(world.jobs["bob"], 1.0)
    services.refresh_statements(NOV, now=DEC3)
    page = login("staff").get(reverse("chargeback-statement", args=[
        Statement.objects.get(team__slug="nlp").pk])).content.decode()
    assert "no rate</span>" in page and "No rate is in force" in page
    assert "Add a rate</a>" in page


def test_admins_add_and_edit_rates_on_the_rate_card_and_drafts_follow(
        drafts, login, django_capture_on_commit_callbacks):
    from apps.audit.models import AuditEvent
    from apps.chargeback.models import Rate

    client = login("staff")
    assert client.get(reverse("chargeback-rates")).status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("chargeback-rates"), {
            "partition": "", "gpu_model": "h100", "price": "5.0000",
            "valid_from": "2026-11-01", "valid_until": "", "note": "new GPUs"})
    assert response.status_code == 303
    rate = Rate.objects.get(note="new GPUs")

    def nlp_prices() -> set[Decimal]:
        nlp = Statement.objects.get(team__slug="nlp")
        return set(nlp.lines.values_list("price", flat=True))

    assert nlp_prices() == {Decimal("5.0000")}  # the latest h100 rate wins; drafts followed
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("chargeback-rate-edit", args=[rate.pk]), {
            "partition": "", "gpu_model": "h100", "price": "6.5000",
            "valid_from": "2026-11-01", "valid_until": "", "note": "new GPUs"})
    assert response.status_code == 303
    assert nlp_prices() == {Decimal("6.5000")}
    assert AuditEvent.objects.filter(target__startswith="rate: h100").count() == 2
    bad = client.post(reverse("chargeback-rate-edit", args=[rate.pk]), {
        "price": "-1", "valid_from": "2026-11-15", "valid_until": "2026-11-01"})
    assert bad.status_code == 400
    assert "must be after valid_from" in bad.content.decode()
    assert login("alice").get(reverse("chargeback-rates")).status_code == 403


@pytest.mark.parametrize(("amount", "message"), [
    ("abc", "the amount is not a number"), ("", "an adjustment needs an amount"),
    ("1.005", "more than two decimals"),
])
def test_a_bad_adjustment_through_the_page_is_refused_with_words(drafts, login, amount, message):
    nlp = drafts["nlp"]
    page = login("staff").post(reverse("chargeback-adjust", args=[nlp.pk]),
                               {"amount": amount, "description": "x"}, follow=True)
    assert message in page.content.decode()
    assert not nlp.lines.filter(kind="adjustment").exists()


@pytest.mark.parametrize(("policy", "fee", "message"), [
    ("bogus", "0", "unknown policy bogus"),
    ("useful_plus_fee", "x", "the waste fee is not a number"),
])
def test_terms_the_form_cannot_read_come_back_as_a_message(drafts, login, policy, fee, message):
    response = login("staff").post(reverse("chargeback-terms"), {
        "month": "2026-11", "policy": policy, "waste_fee": fee}, follow=True)
    assert message in response.content.decode()
    assert BillingPeriod.objects.get(month=NOV).policy == "allocated"


def test_every_amount_carries_its_currency_and_a_draft_says_when_it_was_computed(drafts, login):
    """Issue 26: amounts without their currency beside amounts with it; a statement's
    figures are a snapshot and say so."""
    nlp = drafts["nlp"]
    statement = login("alice").get(reverse("chargeback-statement", args=[nlp.pk]))
    home = login("alice").get(HOME).content.decode()
    text = statement.content.decode()
    for amount in (nlp.amount, nlp.useful_amount, nlp.total_due):
        assert f"{amount:,.2f} {nlp.currency}" in text
        assert f"{amount:,.2f} {nlp.currency}" in home
    tiles = text.split('class="tiles"')[1].split("</div>\n</div>")[0]
    assert tiles.count(nlp.currency) == 3  # usage, at useful hours, total due
    computed = f"as of {nlp.computed_at:%Y-%m-%d %H:%M}"
    assert computed in text and computed in home
