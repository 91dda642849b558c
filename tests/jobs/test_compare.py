"""Jobs side by side: the service's queries, the page and the API for each persona, the entry
points on the job list and the job page."""

from __future__ import annotations

from datetime import timedelta
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.analysis.timeseries import GpuKey
from apps.jobs import archive
from apps.jobs import compare as service
from apps.jobs.models import TraceRankPhases, TraceRun
from tests.conftest import T0, make_job
from tests.jobs.fake_telemetry import FakeSource

PAGE = "/jobs/compare/"
API = "/api/v1/jobs/compare/"
BUSY = {"gpu_util": 0.9, "sm_active": 0.6, "tensor_active": 0.3, "fb_used": 60000.0,
        "power": 500.0}


def _ids(*jobs):
    return [("ids", f"{j.cluster.name}/{j.job_id}") for j in jobs]


def _get(client, url, *jobs, extra=()):
    query = "&".join(f"{k}={v}" for k, v in [*_ids(*jobs), *extra])
    return client.get(f"{url}?{query}")


def _trace(job, communication=560.0, straggler=None):
    run = TraceRun.objects.create(job=job, fingerprint=f"f{job.pk}", world_size=2, steps=6,
                                  straggler_rank=straggler,
                                  straggler_phase="backward" if straggler is not None else "")
    for rank in range(2):
        TraceRankPhases.objects.create(
            trace_run=run, rank=rank, step_ms=1040.0 + communication, data_loading_ms=40.0,
            forward_ms=300.0, backward_ms=600.0, communication_ms=communication,
            optimizer_ms=60.0, other_ms=40.0, device_host="gpu01", device_index=rank)
    return run


def _telemetry(job, values=BUSY, gpus=8):
    archive.archive_job(job, FakeSource({GpuKey("gpu01", i): dict(values) for i in range(gpus)}))


@pytest.fixture
def rerun(world):
    """bob's job 101 run again a day later (job 111, same name): slower in AllReduce, and it
    hit its time limit."""
    first = world.jobs["bob"]
    again = make_job(world.cluster, 111, world.users["bob"], world.team_a, name=first.name,
                     submit_time=first.submit_time + timedelta(days=1),
                     start_time=first.start_time + timedelta(days=1),
                     end_time=first.end_time + timedelta(days=1, minutes=30),
                     state="TIMEOUT", exit_code=0, exit_signal=15)
    for job, comm in ((first, 560.0), (again, 900.0)):
        _trace(job, comm)
        _telemetry(job)
    return first, again


# --- The page --------------------------------------------------------------------------------


def test_the_page_names_the_differences_between_two_runs(world, login, rerun):
    first, again = rerun
    response = _get(login("bob"), PAGE, again, first)  # any order: run 1 is the older
    assert response.status_code == 200
    html = unescape(response.content.decode())
    assert ("run 2's step time is 21% longer (1,940 ms against 1,600 ms in run 1); the time "
            "lost is in communication (AllReduce and other collectives) (+340 ms/step).") in html
    assert "run 1 ended COMPLETED, run 2 TIMEOUT (stopped at its time limit)." in html
    assert "run 2 ran 50% longer (1 h 30 min against 1 h 00 min)" in html
    for fig in ("fig-compare-busy", "fig-compare-phases"):
        assert f'data-figure="{fig}"' in html and f'id="{fig}"' in html
    assert 'id="row-step" class="row-differs"' in html


def test_the_page_states_gpu_hours_as_the_job_page_does(world, login, rerun):
    first, again = rerun
    client = login("bob")
    compared = _get(client, PAGE, first, again).content.decode()
    fact = ('data-fact="job-gpu-hours" data-subject="job:testcluster/111" '
            'data-value="12.0 GPU-h"')
    page = client.get(reverse("jobs-detail", args=["testcluster", 111])).content.decode()
    assert fact in compared and fact in page


def test_a_job_without_telemetry_or_trace_says_so_per_column(world, login, rerun):
    first, _ = rerun
    bare = make_job(world.cluster, 112, world.users["bob"], world.team_a, name=first.name,
                    submit_time=first.submit_time + timedelta(days=2))
    html = unescape(_get(login("bob"), PAGE, first, bare).content.decode())
    row = html.split('id="row-useful"', 1)[1].split("</tr>", 1)[0]
    assert "no telemetry stored" in row and "0%" not in row.split("</td>", 1)[1]
    step = html.split('id="row-step"', 1)[1].split("</tr>", 1)[0]
    assert "no trace analysed" in step
    assert "run 2 · testcluster/112" in html.split('id="timelines"', 1)[1]
    assert "run 2 has no trace analysis" in html


@pytest.mark.parametrize(("persona", "jobs", "status"), [
    ("bob", ("bob", "rerun"), 200),  # a researcher: their own jobs
    ("bob", ("bob", "tom"), 404),  # not a teammate's
    ("tom", ("bob", "rerun"), 404),
    ("alice", ("bob", "tom", "alice"), 200),  # a lead: the team's jobs
    ("alice", ("bob", "carol"), 404),  # not another team's
    ("dave", ("carol", "bob"), 404),
    ("carol", ("carol", "orphan"), 404),
    ("staff", ("bob", "carol", "orphan"), 200),  # an admin: all of them
])
def test_each_persona_compares_exactly_the_jobs_it_sees(world, login, rerun, persona, jobs,
                                                        status):
    picked = [rerun[1] if name == "rerun" else world.jobs[name] for name in jobs]
    client = login(persona)
    page, api = _get(client, PAGE, *picked), _get(client, API, *picked)
    assert (page.status_code, api.status_code) == (status, status)
    if status == 404:
        assert "that you may see" in api.json()["detail"]
    else:
        assert [r["ref"] for r in api.json()["runs"]] == sorted(
            (f"testcluster/{j.job_id}" for j in picked),
            key=lambda ref: next(j.submit_time for j in picked if ref.endswith(f"/{j.job_id}")))


def test_an_unknown_job_is_a_404_naming_it(world, login):
    response = login("staff")
    page = response.get(PAGE + "?ids=testcluster/101&ids=testcluster/999")
    assert page.status_code == 404
    api = response.get(API + "?ids=testcluster/101&ids=nowhere/101")
    assert api.status_code == 404 and "nowhere/101" in api.json()["detail"]


@pytest.mark.parametrize(("query", "words"), [
    ("ids=101&ids=102", "name each job as <cluster>/<job id>"),
    ("ids=testcluster/101&ids=testcluster/1%3B1", "name each job as"),
    ("ids=testcluster/101&ids=testcluster/0101", "name each job as"),  # one job, two names
    ("ids=testcluster/101&ids=testcluster/%D9%A3", "name each job as"),  # an Arabic 3
    ("&".join(f"ids=testcluster/{n}" for n in range(101, 108)), "compare at most 6"),
])
def test_bad_input_is_a_400_saying_what_to_change(world, login, query, words):
    client = login("staff")
    page = client.get(f"{PAGE}?{query}")
    assert page.status_code == 400 and words in unescape(page.content.decode())
    api = client.get(f"{API}?{query}")
    assert api.status_code == 400 and words in api.json()["ids"][0]


def test_one_job_asks_for_another_on_the_page_and_is_a_400_in_the_api(world, login):
    client = login("bob")
    page = client.get(PAGE + "?ids=testcluster/101&ids=testcluster/101")  # a repeat is one
    assert page.status_code == 200 and "pick at least one more" in page.content.decode()
    api = client.get(API + "?ids=testcluster/101")
    assert api.status_code == 400 and "pick 2 jobs or more" in api.json()["ids"][0]


def test_the_api_refuses_unknown_parameters(world, login):
    response = login("bob").get(API + "?ids=testcluster/101&id=testcluster/111")
    assert response.status_code == 400 and "id" in response.json()


def test_the_api_gives_the_table_and_the_differences(world, login, rerun):
    data = _get(login("alice"), API, *rerun).json()
    assert data["differences"][0]["topic"] == "step"
    assert data["differences"][0]["rows"] == ["step", "phase_communication"]
    rows = {r["key"]: r for r in data["rows"]}
    assert [c["value"] for c in rows["step"]["cells"]] == [1600.0, 1940.0]
    assert data["runs"][1]["trace"]["phases_ms"]["communication"] == 900.0
    assert len(data["runs"][0]["telemetry"]["timeline"]) > 0


def test_the_comparison_is_in_the_openapi_schema(client):
    schema = client.get(reverse("api-schema"), HTTP_ACCEPT="application/json").json()
    operation = schema["paths"]["/api/v1/jobs/compare/"]["get"]
    assert [p["name"] for p in operation["parameters"]] == ["ids"]
    assert {"200", "400", "404"} <= set(operation["responses"])


# --- The service -----------------------------------------------------------------------------


def _queries(user, refs):
    with CaptureQueriesContext(connection) as captured:
        service.compare_jobs(user, refs)
    return len(captured.captured_queries)


@pytest.mark.parametrize("persona", ["alice", "staff"])
def test_the_service_costs_the_same_few_queries_for_two_jobs_or_six(world, persona):
    jobs = [make_job(world.cluster, 400 + n, world.users["bob"], world.team_a, name="train",
                     submit_time=T0 + timedelta(hours=n)) for n in range(6)]
    for job in jobs:
        _telemetry(job, gpus=2)
        _trace(job)
    refs = [service.Ref("testcluster", j.job_id) for j in jobs]
    two, six = _queries(world.users[persona], refs[:2]), _queries(world.users[persona], refs)
    assert two == six == 5, (two, six)


def test_the_previous_run_is_the_users_last_of_the_same_name(world, rerun):
    first, again = rerun
    bob = world.users["bob"]
    assert service.previous_run(bob, again) == first
    assert service.previous_run(bob, first) is None
    # the same name by a teammate is not bob's previous run
    make_job(world.cluster, 110, world.users["tom"], world.team_a, name=first.name,
             submit_time=again.submit_time - timedelta(hours=1))
    assert service.previous_run(world.users["alice"], again) == first


# --- The entry points ------------------------------------------------------------------------


def test_the_job_list_ticks_jobs_into_the_comparison(world, login):
    html = login("bob").get(reverse("jobs-list")).content.decode()
    form = html.split('id="compare-form"', 1)[1].split("</form>", 1)[0]
    assert 'action="/jobs/compare/"' in html.split('id="compare-form"', 1)[0].rsplit("<form", 1)[1]
    assert '<input type="checkbox" name="ids" value="testcluster/101"' in form
    assert "<button type=\"submit\">Compare</button>" in form


def test_the_job_page_links_the_previous_run_when_there_is_one(world, login, rerun):
    client = login("bob")
    page = client.get(reverse("jobs-detail", args=["testcluster", 111])).content.decode()
    link = "/jobs/compare/?ids=testcluster%2F101&amp;ids=testcluster%2F111"
    assert f'<a href="{link}" id="compare-previous">' in page
    assert client.get(unescape(link)).status_code == 200
    older = client.get(reverse("jobs-detail", args=["testcluster", 101])).content.decode()
    assert "compare-previous" not in older
