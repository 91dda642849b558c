"""The chargeback API: visible sets, strict parameters, statements' life cycle, terms, rates."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse
from rest_framework.test import APIClient

from apps.audit.models import AuditEvent
from apps.chargeback import services
from apps.chargeback.models import Rate, Statement
from tests.chargeback.conftest import NOV, archive

DEC3 = datetime(2026, 12, 3, tzinfo=UTC)


def api(world, persona: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(world.users[persona])
    return client


@pytest.fixture
def drafts(world, rates):
    archive(world.jobs["bob"], 0.25, held_idle=0.75)
    services.refresh_statements(NOV, now=DEC3)
    return {s.team.slug: s for s in Statement.objects.select_related("team")}


@pytest.mark.parametrize(("persona", "users"), [
    ("bob", {"bob"}), ("tom", {"tom"}), ("alice", {"alice", "bob", "tom"}),
    ("carol", {"carol"}), ("staff", {"alice", "bob", "tom", "carol", "ghost"}),
])
def test_usage_returns_exactly_the_visible_jobs_lines(world, rates, persona, users):
    data = api(world, persona).get(reverse("api:chargeback-usage-list"),
                                   {"month": "2026-11"}).json()
    assert {row["user"] for row in data["results"]} == users


def test_usage_filters_by_team_and_prices_each_line(world, rates):
    data = api(world, "staff").get(reverse("api:chargeback-usage-list"),
                                   {"month": "2026-11", "team": "vision"}).json()
    [line] = data["results"]
    assert (line["user"], line["allocated_hours"], line["price"], line["amount"]) == (
        "carol", "8.0000", "3.0000", "24.00")


@pytest.mark.parametrize("params", [{"month": "2026-13"}, {"month": " 2026-11"},
                                    {"mnth": "2026-11"}, {"month": ["2026-10", "2026-11"]}])
def test_bad_parameters_are_a_400(world, params):
    assert api(world, "bob").get(reverse("api:chargeback-usage-list"), params).status_code == 400


@pytest.mark.parametrize(("persona", "teams"), [
    ("alice", {"nlp"}), ("bob", set()), ("dave", {"vision"}), ("staff", {"nlp", "vision"}),
])
def test_statements_list_the_visible_set(drafts, world, persona, teams):
    data = api(world, persona).get(reverse("api:chargeback-statement-list")).json()
    assert {row["team"] for row in data["results"]} == teams


def test_a_statement_is_finalised_adjusted_and_exported_through_the_api(drafts, world):
    client, nlp = api(world, "staff"), drafts["nlp"]
    url = reverse("api:chargeback-statement-finalise", args=[nlp.pk])
    with time_machine.travel(datetime(2026, 11, 25, tzinfo=UTC)):
        refused = client.post(url)
    assert refused.status_code == 409 and "still open" in refused.json()["detail"]
    with time_machine.travel(DEC3):
        done = client.post(url).json()
    assert done["status"] == "final" and len(done["lines"]) == 3
    line = client.post(reverse("api:chargeback-statement-adjustments", args=[nlp.pk]),
                       {"amount": "-2.50", "description": "credit"}, format="json")
    assert line.status_code == 201 and line.json()["kind"] == "adjustment"
    detail = client.get(reverse("api:chargeback-statement-detail", args=[nlp.pk])).json()
    assert (detail["amount"], detail["adjustments"], detail["total_due"]) == (
        "72.00", "-2.50", "69.50")
    exported = client.get(reverse("api:chargeback-statement-csv", args=[nlp.pk]))
    assert exported["Content-Type"] == "text/csv; charset=utf-8"
    assert len(list(csv.DictReader(io.StringIO(exported.content.decode())))) == 4


def test_terms_are_set_per_month_and_fixed_once_final(drafts, world):
    client = api(world, "staff")
    url = reverse("api:chargeback-period-detail", args=["2026-11"])
    assert client.get(url).json() == {"month": "2026-11", "policy": "allocated",
                                      "waste_fee": "0.0000"}
    ok = client.put(url, {"policy": "useful_plus_fee", "waste_fee": "0.25"}, format="json")
    assert ok.status_code == 200 and ok.json()["waste_fee"] == "0.2500"
    assert client.put(url, {"policy": "useful_plus_fee", "waste_fee": "1.5"},
                      format="json").status_code == 400
    with time_machine.travel(DEC3):
        services.finalise(drafts["nlp"], world.users["staff"])
    assert client.put(url, {"policy": "allocated"}, format="json").status_code == 409


def test_rates_are_read_by_all_and_written_by_admins_with_an_audit_event(world):
    body = {"gpu_model": "h100", "price": "4.2000", "valid_from": "2026-12-01"}
    assert api(world, "alice").post(reverse("api:chargeback-rate-list"), body,
                                    format="json").status_code == 403
    created = api(world, "staff").post(reverse("api:chargeback-rate-list"), body, format="json")
    assert created.status_code == 201 and Rate.objects.get().price == Decimal("4.2")
    assert AuditEvent.objects.filter(action="chargeback").get().details == {
        "change": "rate added"}
    bad = {**body, "valid_until": "2026-11-01"}
    assert api(world, "staff").post(reverse("api:chargeback-rate-list"), bad,
                                    format="json").status_code == 409
    as_number = {**body, "price": 4.2}  # money is a decimal string, never a float
    assert api(world, "staff").post(reverse("api:chargeback-rate-list"), as_number,
                                    format="json").status_code == 400
    listed = api(world, "bob").get(reverse("api:chargeback-rate-list")).json()
    assert [r["price"] for r in listed["results"]] == ["4.2000"]
