"""Hostile input gets a clear 4xx, never a 500 (issue 27 item 3): tampered page cursors,
JSON bodies nested 100,000 deep, and trace uploads built to break the reader (nesting,
timestamps of 1e300, 5,000-digit integers, 300 files)."""

from __future__ import annotations

import base64
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import resolve, reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.parsers import JSONParser

from apps.core.api.parsers import MAX_DEPTH, BoundedJSONParser, nesting_depth
from apps.core.api.root import endpoints
from apps.core.api.strict import StrictCursorPagination
from apps.jobs.models import TraceRun
from portal import api_urls
from tests.conftest import make_job
from tests.jobs.test_job_page_detail import RECORDED, _trace_files
from tests.trace_builder import Step, simulate, to_chrome

DEEP = 100_000


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _api_views() -> list[tuple[str, type]]:
    """(path, view class) of every API route without path parameters."""
    views = []
    for endpoint in endpoints(api_urls.urlpatterns):
        if "{" not in endpoint["path"]:
            views.append((endpoint["path"], resolve(endpoint["path"]).func.cls))
    return views


CURSOR_LISTS = sorted(path for path, cls in _api_views()
                      if issubclass(getattr(cls, "pagination_class", None) or object,
                                     StrictCursorPagination))


def test_the_cursor_lists_are_found():
    assert {"/api/v1/jobs/", "/api/v1/traces/", "/api/v1/security/findings/"} <= \
        set(CURSOR_LISTS)


# Each was a 404, or a 500 once the position reached the database.
TAMPERED = [
    "garbage!!", "%FF", "\x00",
    _b64("r=abc"),  # not a number
    _b64("p=notadate"),  # a position that is no value of the ordering field
    _b64("p=2026-01-01 00:00:00"),  # a naive time (this API writes offsets)
    _b64("p=9999-12-31 23:59:59-23:59"),  # past the calendar's end in UTC
    _b64("p=2026-01-01\x00"),
    _b64("p=" + "9" * 5000),
    _b64("p=1e300"),
]


@pytest.mark.parametrize("cursor", TAMPERED)
@pytest.mark.parametrize("url", CURSOR_LISTS)
def test_a_tampered_cursor_is_a_400_saying_so(world, login, url, cursor):
    response = login("staff").get(url, {"cursor": cursor})
    assert response.status_code == 400
    assert "not a cursor this API wrote" in response.json()["cursor"][0]


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=60), st.binary(max_size=60).map(
    lambda raw: base64.b64encode(raw).decode()), st.text(max_size=40).map(
    lambda text: _b64("p=" + text))))
def test_no_cursor_at_all_makes_a_500(world, login, cursor):
    for url in CURSOR_LISTS:
        assert login("staff").get(url, {"cursor": cursor}).status_code in (200, 400)


def test_the_cursors_the_api_writes_still_page(world, login):
    client, url, seen = login("staff"), "/api/v1/jobs/?page_size=2", []
    while url:
        page = client.get(url).json()
        seen += [job["id"] for job in page["results"]]
        url = page["next"]
    assert len(seen) == len(set(seen)) == len(world.jobs)


@pytest.mark.parametrize("after", [
    _b64("9999-12-31T23:59:59-23:59|1"),  # was a 500 (overflow converting to UTC)
    _b64("2026-01-01T00:00:00|1"),  # naive
    _b64("2026-01-01T00:00:00+00:00|" + "9" * 30),  # past 64 bits
    "!!",
])
def test_a_bad_page_link_on_the_job_list_shows_the_first_page_and_says_so(world, login,
                                                                          after):
    response = login("bob").get(reverse("jobs-list"), {"after": after})
    assert response.status_code == 200
    assert [j.job_id for j in response.context["page"].rows] == [101]
    assert "showing the first page" in response.content.decode()


def test_a_good_page_link_says_nothing(world, login):
    for i in range(60):
        make_job(world.cluster, 30_000 + i, world.users["bob"], world.team_a)
    bob = login("bob")
    after = bob.get(reverse("jobs-list")).context["page"].next_cursor
    assert "showing the first page" not in bob.get(reverse("jobs-list"),
                                                   {"after": after}).content.decode()


# --- JSON request bodies -------------------------------------------------------------------


def _ingest(client, body: str):
    return client.post(reverse("api:security-ingest-sshd"), body,
                       content_type="application/json")


@pytest.mark.parametrize("body", [
    "[" * DEEP + "]" * DEEP,  # was a RecursionError: a 500
    '{"cluster": "testcluster", "lines": ' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "}",
])
def test_a_json_body_nested_too_deep_is_a_400(world, login, body):
    response = _ingest(login("staff"), body)
    assert response.status_code == 400
    assert f"nested deeper than {MAX_DEPTH} levels" in response.json()["detail"]


def test_a_json_body_within_the_depth_is_parsed_as_before(world, login):
    body = {"cluster": "testcluster", "lines": ["x"], "reference": "2026-11-03T00:00:00Z"}
    assert _ingest(login("staff"), json.dumps(body)).status_code == 201


@pytest.mark.parametrize(("text", "depth"), [
    ("1", 0), ("{}", 1), ('[[1], {"a": [2]}]', 3), ('"[[["', 0), ('{"a": "x\\"[["}', 1),
    ('"' + '\\"' * 1000, 0), ("[" * DEEP, DEEP),
])
def test_nesting_depth_skips_brackets_in_strings(text, depth):
    assert nesting_depth(text) == depth


def test_no_api_view_parses_json_without_the_depth_limit():
    for path, cls in _api_views():
        for parser in cls.parser_classes:
            assert not issubclass(parser, JSONParser) or issubclass(parser, BoundedJSONParser), \
                f"{path}: {parser.__name__}"


# --- Trace uploads -------------------------------------------------------------------------


@pytest.fixture
def traced_job(world):
    from datetime import timedelta

    return make_job(world.cluster, 555, world.users["bob"], world.team_a,
                    start_time=RECORDED - timedelta(minutes=30),
                    end_time=RECORDED + timedelta(minutes=30))


def _doc() -> dict:
    [trace] = simulate([[Step()] * 4])
    return to_chrome(trace)


def _with_times(shift: float | None = None, value: float | None = None) -> str:
    doc = _doc()
    for event in doc["traceEvents"]:
        if "ts" in event:
            event["ts"] = value if value is not None else event["ts"] + shift
    return json.dumps(doc)


def _with_member(text: str) -> str:
    return json.dumps(_doc())[:-1] + ', "extra": ' + text + "}"


HOSTILE_TRACES = [
    (_with_member("[" * DEEP + "]" * DEEP), "nested too deeply"),
    ('{"traceEvents": [' + "[" * DEEP + "]" * DEEP + "]}", "nested too deeply"),
    (_with_times(value=1e300), "has a time of 1e+300 µs, past the 1e+16 µs"),
    (_with_times(shift=2e16), "past the 1e+16 µs"),
    (json.dumps(_doc())[:-1] + ', "baseTimeNanoseconds": ' + str(10**30) + "}",
     "has a baseTimeNanoseconds of 1e+30"),
    (_with_member("9" * 5000), "a number too long to read (4300 digits at most)"),
    (_with_member('{"n": -' + "1" * 5000 + "}"), "a number too long to read"),
]


@pytest.mark.parametrize(("body", "words"), HOSTILE_TRACES)
def test_a_hostile_trace_is_a_400_through_the_api(traced_job, login, body, words):
    response = login("bob").post(reverse("api:job-traces", args=[traced_job.pk]),
                                 {"files": [SimpleUploadedFile("rank0.json", body.encode())]})
    assert response.status_code == 400
    assert words in response.json()["detail"] and "rank0.json" in response.json()["detail"]
    assert not TraceRun.objects.exists()


@pytest.mark.parametrize(("body", "words"), HOSTILE_TRACES[:3])
def test_a_hostile_trace_is_refused_on_the_page(traced_job, login, body, words):
    url = reverse("jobs-traces", args=[traced_job.cluster.name, traced_job.job_id])
    response = login("bob").post(url, {"files": [SimpleUploadedFile("r.json", body.encode())]},
                                 follow=True)
    assert response.status_code == 200 and words in response.content.decode()


def test_times_just_inside_the_range_are_still_read(traced_job, login):
    body = _with_times(shift=9e15 - 5_000_000_000.0)  # relative times near the limit
    response = login("bob").post(reverse("api:job-traces", args=[traced_job.pk]),
                                 {"files": [SimpleUploadedFile("rank0.json", body.encode())]})
    assert response.status_code == 201, response.content


def _many(count: int) -> list[SimpleUploadedFile]:
    return [SimpleUploadedFile(f"rank{i}.json", b"{}") for i in range(count)]


def test_too_many_files_in_the_api_is_a_400_saying_how_many(traced_job, login, settings):
    response = login("bob").post(reverse("api:job-traces", args=[traced_job.pk]),
                                 {"files": _many(300)})
    assert response.status_code == 400
    assert response.json()["detail"].startswith(
        f"more than {settings.TRACE_UPLOAD_MAX_FILES} files in one upload")


def test_too_many_files_on_the_page_is_a_page_saying_how_many(traced_job, login, settings):
    url = reverse("jobs-traces", args=[traced_job.cluster.name, traced_job.job_id])
    response = login("bob").post(url, {"files": _many(300)})
    assert response.status_code == 400
    html = response.content.decode()
    assert "Trace upload refused" in html
    assert f"at most {settings.TRACE_UPLOAD_MAX_FILES} (one per rank)" in html


def test_an_upload_within_the_file_count_still_works(traced_job, login):
    response = login("bob").post(reverse("api:job-traces", args=[traced_job.pk]),
                                 {"files": _trace_files()})
    assert response.status_code == 201
