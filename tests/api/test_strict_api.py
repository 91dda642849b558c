"""What fuzzing found, pinned as plain tests: strict query parameters, JSON 404s, UTC filters."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.core.api.schema import ERRORS
from portal.wsgi import application  # noqa: F401  the same app the fuzzer drives

JOBS = "/api/v1/jobs/"
TEAMS = "/api/v1/teams/"


@pytest.mark.parametrize(("url", "query", "field"), [
    (JOBS, {"stat": "RUNNING"}, "stat"),  # a typo must not return everything
    (JOBS, {"page_size": "0"}, "page_size"),
    (JOBS, {"page_size": "501"}, "page_size"),
    (JOBS, {"cluster": ["a", "b"]}, "cluster"),  # single-valued, given twice
    (JOBS, {"submitted_before": ""}, "submitted_before"),
    (JOBS, {"min_gpus": "lots"}, "min_gpus"),
    (JOBS, {"team": "a\x00b"}, "team"),
    (TEAMS, {"offset": "null"}, "offset"),
    (TEAMS, {"limit": "0"}, "limit"),
    (TEAMS, {"limit": "-5"}, "limit"),
])
def test_bad_query_parameters_are_a_400_naming_them(world, login, url, query, field):
    response = login("alice").get(url, query)
    assert response.status_code == 400
    assert field in response.json()


@pytest.mark.parametrize("query", [
    {"q": ""}, {"state": ["RUNNING", "COMPLETED"]}, {"min_gpus": "1.8e181"},
    {"submitted_after": "0352-03-26T16:01:08-23:22"},  # was a 500 on PostgreSQL
    {"submitted_before": "9999-12-31T23:59:59-23:59"},  # past the calendar's end in UTC
    {"page_size": "500"},
])
def test_valid_query_parameters_are_accepted(world, login, query):
    assert login("alice").get(JOBS, query).status_code == 200


def test_filters_compare_instants_not_wall_clocks(world, login):
    # Job 101 was submitted 2026-11-02 10:41 UTC, which is 11:41 at +01:00.
    rows = login("alice").get(JOBS, {"submitted_after": "2026-11-02T11:41:00+01:00",
                                     "submitted_before": "2026-11-02T11:42:00+01:00"}).json()
    assert [r["job_id"] for r in rows["results"]] == [101]


def test_an_unknown_api_url_is_a_json_404(world, login):
    response = login("alice").get("/api/v1/jobs/0.5/")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


def test_an_unknown_page_is_still_a_page(world, login):
    response = login("alice").get("/no-such-page/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")


def test_every_operation_declares_the_error_statuses(client):
    schema = client.get(reverse("api-schema"), HTTP_ACCEPT="application/json").json()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert set(ERRORS) <= set(operation["responses"]), f"{method} {path}"


def test_a_boolean_filter_refuses_anything_but_true_or_false(world, login):
    client = login("alice")
    bad = client.get("/api/v1/jobs/", {"has_findings": "AAA"})
    assert bad.status_code == 400 and "has_findings" in bad.json()
    assert client.get("/api/v1/jobs/", {"has_findings": "true"}).status_code == 200
