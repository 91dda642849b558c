"""The report page, its CSV and its API for each persona: each reads only what
``Job.objects.visible_to`` lets it (another team's jobs never show), and bad parameters are
a 400 that says why, never a 500."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.urls import reverse

from apps.jobs.models import Job
from tests.conftest import T0, make_job

RANGE = {"date_from": f"{T0:%Y-%m-%d}", "date_to": f"{T0 + timedelta(days=2):%Y-%m-%d}"}
PAGE, EXPORT, API = "reports-usage", "reports-usage-export", "api:reports-api-usage-list"


def _api(login, persona, **params):
    return login(persona).get(reverse(API), {**RANGE, **params})


def _users(body):
    return {r["group"]["user"] for r in body["rows"]}


@pytest.mark.parametrize(("persona", "users"), [
    ("bob", {"bob"}),                          # a researcher: own jobs only
    ("carol", {"carol"}),
    ("alice", {"alice", "bob", "tom"}),        # a lead: the team led (team A)
    ("dave", {"carol"}),                       # team B's lead
    ("staff", {"alice", "bob", "tom", "carol", "ghost"}),
])
def test_each_persona_reads_only_the_jobs_it_may_see(world, login, persona, users):
    response = _api(login, persona, group="user")
    assert response.status_code == 200, response.content
    assert _users(response.json()) == users
    hours = sum(r["gpu_hours"] for r in response.json()["rows"])
    assert hours == pytest.approx(8.0 * len(users))  # each world job: 8 GPUs for an hour


def test_a_lead_does_not_get_another_teams_jobs_by_naming_it(world, login):
    response = _api(login, "alice", team="vision")
    assert response.status_code == 400
    assert "team" in response.json()


@pytest.mark.parametrize("persona", ["bob", "alice", "dave", "staff"])
def test_the_page_renders_for_each_persona_with_its_own_figures(world, login, persona):
    response = login(persona).get(reverse(PAGE), {**RANGE, "group": ["team", "user"],
                                                  "period": "day"})
    assert response.status_code == 200
    text = response.content.decode()
    assert "report-hours" in text
    assert ("vision" in text) == (persona in ("dave", "staff"))
    assert (">tom<" in text) == (persona in ("alice", "staff"))


def test_the_csv_has_one_line_per_group_and_period(world, login):
    response = login("alice").get(reverse(EXPORT), {**RANGE, "group": "user", "period": "day"})
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert {r["user"] for r in rows} == {"alice", "bob", "tom"}
    assert sum(float(r["gpu_hours"]) for r in rows) == pytest.approx(24.0)


def test_an_implausible_record_counts_nowhere(world, login):
    Job.objects.filter(pk=world.jobs["bob"].pk).update(implausible=["gpus_over_cluster"])
    assert _api(login, "bob", group="user").json()["rows"] == []


def test_a_job_across_two_days_counts_in_each_by_its_time_there(world, login):
    make_job(world.cluster, 900, world.users["bob"], world.team_a,
             start_time=T0.replace(hour=23), end_time=T0.replace(hour=23) + timedelta(hours=3),
             gpus=1, gpu_equivalent=1.0, gpu_types={"a100": 1})
    body = _api(login, "bob", group="gpu_model", period="day").json()
    a100 = {r["period"]: r["gpu_hours"] for r in body["rows"] if r["group"]["gpu_model"] == "a100"}
    assert a100 == {f"{T0:%Y-%m-%d}": pytest.approx(1.0),
                    f"{T0 + timedelta(days=1):%Y-%m-%d}": pytest.approx(2.0)}


BAD = [
    ({"group": "colour"}, "group"),
    ({"date_from": "2026-11-30", "date_to": "2026-11-01"}, "before it starts"),
    ({"date_from": "2020-01-01", "date_to": "2026-11-30", "period": "day"}, "periods"),
    ({"date_from": "2026-13-01"}, "date_from"),
    ({"period": "fortnight"}, "period"),
    ({"group": ["user", "team", "account", "partition"]}, "at most 3"),
    ({"team": "nosuchteam"}, "team"),
]


@pytest.mark.parametrize(("params", "words"), BAD)
def test_bad_parameters_are_a_400_that_says_why(world, login, params, words):
    query = {**RANGE, **params}
    api = login("alice").get(reverse(API), query)
    assert api.status_code == 400 and words in api.content.decode()
    page = login("alice").get(reverse(PAGE), query)
    assert page.status_code == 400 and words in page.content.decode()
    assert 'name="date_from"' in page.content.decode()  # the form is back, to correct
    assert login("alice").get(reverse(EXPORT), query).status_code == 400


def test_an_unknown_api_parameter_is_a_400(world, login):
    assert _api(login, "bob", colour="red").status_code == 400


def test_signed_out_the_page_asks_to_sign_in(world, client):
    assert client.get(reverse(PAGE)).status_code == 302
    assert client.get(reverse(API)).status_code == 401
