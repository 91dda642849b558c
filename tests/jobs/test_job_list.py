"""The job list: scopes, filters, keyset paging, and a query count that does not grow."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.core.paging import decode_cursor, encode_cursor
from tests.conftest import make_job

pytestmark = pytest.mark.django_db


def _queries(client, url, params):
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url, params).status_code == 200
    return len(ctx.captured_queries)


def test_query_count_is_the_same_for_5_and_120_jobs(world, login):
    bob = login("bob")
    url = reverse("jobs-list")
    few = _queries(bob, url, {"scope": "mine"})
    for i in range(120):
        make_job(world.cluster, 10_000 + i, world.users["bob"], world.team_a)
    assert _queries(bob, url, {"scope": "mine"}) == few
    cursor = bob.get(url, {"scope": "mine"}).context["page"].next_cursor
    assert _queries(bob, url, {"scope": "mine", "after": cursor}) == few


def test_keyset_pages_cover_every_job_once_in_order(world, login):
    for i in range(130):
        make_job(world.cluster, 20_000 + i, world.users["bob"], world.team_a)
    bob, seen, cursor = login("bob"), [], ""
    while True:
        page = bob.get(reverse("jobs-list"), {"scope": "mine", "after": cursor}).context["page"]
        seen += [(j.submit_time, j.pk) for j in page.rows]
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert len(seen) == 131 and len(set(seen)) == 131
    assert seen == sorted(seen, reverse=True)


@pytest.mark.parametrize(("params", "expected"), [
    ({"q": "101"}, {101}),
    ({"q": "job-10"}, {101, 102, 103}),
    ({"state": "FAILED"}, {102}),
    ({"min_gpus": "4"}, {101, 103}),
    ({"partition": "debug"}, {103}),
])
def test_filters_narrow_the_team_view(world, login, params, expected):
    from apps.jobs.models import Job

    Job.objects.filter(job_id=102).update(state="FAILED", gpu_equivalent=1)
    Job.objects.filter(job_id=103).update(partition="debug")
    page = login("alice").get(reverse("jobs-list"), {"scope": "team", **params}).context["page"]
    assert {j.job_id for j in page.rows} == expected


def test_a_researcher_asking_for_the_team_scope_gets_nothing_extra(world, login):
    page = login("bob").get(reverse("jobs-list"), {"scope": "team"}).context["page"]
    assert page.rows == []


@pytest.mark.parametrize("cursor", ["", "garbage", "!!!", encode_cursor.__name__])
def test_a_malformed_cursor_starts_from_the_top(world, login, cursor):
    assert decode_cursor(cursor) is None
    page = login("bob").get(reverse("jobs-list"), {"after": cursor}).context["page"]
    assert [j.job_id for j in page.rows] == [101]


def test_hostile_job_names_are_escaped_on_the_page(world, login):
    from apps.jobs.models import Job

    Job.objects.filter(job_id=101).update(name='<script>alert("x")</script>')
    html = login("bob").get(reverse("jobs-list")).content.decode()
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html


# --- Arrays, efficiency bands, findings --------------------------------------------------------


def _array(world, array_id, states, user="bob", hours=5):
    """Tasks of one array; the last takes the array's raw id (Slurm's head record)."""
    from datetime import timedelta

    from tests.conftest import T0

    team = world.team_a if user in ("bob", "alice", "tom") else world.team_b
    ids = [array_id + 1 + i for i in range(len(states) - 1)] + [array_id]
    for task, (job_id, state) in enumerate(zip(ids, states, strict=True)):
        make_job(world.cluster, job_id, world.users[user], team, array_job_id=array_id,
                 array_task_id=task, display_id=f"{array_id}_{task}", state=state, gpus=1,
                 gpu_equivalent=1.0, submit_time=T0 + timedelta(hours=hours),
                 start_time=T0 + timedelta(hours=hours),
                 end_time=T0 + timedelta(hours=hours + 2))


def test_an_array_is_one_row_with_counts_by_state_and_gpu_hours(world, login):
    _array(world, 7000, ["COMPLETED", "COMPLETED", "FAILED", "COMPLETED"])
    response = login("bob").get(reverse("jobs-list"))
    rows = [j.job_id for j in response.context["page"].rows]
    assert rows == [7000, 101]
    summary = response.context["arrays"][(world.cluster.pk, 7000)]
    assert summary["tasks"] == 4 and summary["states"] == [("COMPLETED", 3), ("FAILED", 1)]
    assert summary["gpu_hours"] == pytest.approx(8.0)  # 4 tasks x 1 GPU x 2 h
    html = response.content.decode()
    assert "array of 4 tasks" in html and "3 completed · 1 failed · 8.0 GPU-h" in html


def test_searching_an_array_or_asking_for_tasks_lists_every_task(world, login):
    _array(world, 7000, ["COMPLETED", "FAILED", "COMPLETED"])
    bob = login("bob")
    searched = bob.get(reverse("jobs-list"), {"q": "7000"}).context["page"].rows
    assert sorted(j.job_id for j in searched) == [7000, 7001, 7002]
    tasks = bob.get(reverse("jobs-list"), {"group": "tasks"}).context["page"].rows
    assert len(tasks) == 4


def test_the_query_count_stays_constant_with_arrays_metrics_and_findings(world, login):
    from apps.jobs.models import JobFinding, JobMetrics

    bob = login("bob")
    url = reverse("jobs-list")
    _array(world, 7000, ["COMPLETED", "FAILED"], hours=24 * 30)  # first on every page 1
    few = _queries(bob, url, {"scope": "mine"})
    filtered = {"scope": "mine", "efficiency": "medium", "has_findings": "true"}
    few_filtered = _queries(bob, url, filtered)
    for i in range(60):
        job = make_job(world.cluster, 10_000 + i, world.users["bob"], world.team_a)
        JobMetrics.objects.create(job=job, status="complete", useful_fraction=0.3)
        JobFinding.objects.create(job=job, key="k", area="code", severity="warning",
                                  title="t", text="t")
    for n in range(5):
        _array(world, 20_000 + 100 * n, ["COMPLETED", "FAILED", "COMPLETED"])
    assert _queries(bob, url, {"scope": "mine"}) == few
    assert _queries(bob, url, filtered) == few_filtered


@pytest.mark.parametrize(("params", "expected"), [
    ({"efficiency": "idle"}, {101}),
    ({"efficiency": "low"}, {102}),
    ({"efficiency": "medium"}, set()),
    ({"efficiency": "high"}, {103}),
    ({"efficiency": "unknown"}, set()),
    ({"has_findings": "true"}, {102}),
    ({"has_findings": "false"}, {101, 103}),
    ({"efficiency": "low", "has_findings": "true"}, {102}),
])
def test_efficiency_band_and_findings_filters(world, login, params, expected):
    from apps.jobs.models import JobFinding, JobMetrics

    for job_id, useful in ((101, 0.01), (102, 0.2), (103, 0.9)):
        JobMetrics.objects.create(job=world.jobs[{101: "bob", 102: "tom", 103: "alice"}[job_id]],
                                  status="complete", useful_fraction=useful)
    JobFinding.objects.create(job=world.jobs["tom"], key="input-stall", area="data",
                              severity="warning", title="Input pipeline stall", text="t")
    page = login("alice").get(reverse("jobs-list"), {"scope": "team", **params})
    assert {j.job_id for j in page.context["page"].rows} == expected
    api = login("alice").get(reverse("api:job-list"), params).json()
    assert {row["job_id"] for row in api["results"]} == expected


def test_the_list_shows_efficiency_and_a_findings_badge(world, login):
    from apps.jobs.models import JobFinding, JobMetrics

    JobMetrics.objects.create(job=world.jobs["bob"], status="complete", useful_fraction=0.19)
    JobFinding.objects.create(job=world.jobs["bob"], key="k", area="data", severity="warning",
                              title="t", text="t")
    html = login("bob").get(reverse("jobs-list")).content.decode()
    assert '<span class="band band-low">19%</span>' in html
    assert "1 diagnosis</a>" in html and "#diagnosis" in html and " finding</a>" not in html


# --- The team scope, the indexes and the plans behind the 1M-job target (docs/joblist.md) ------


def _lead_of_two_teams(world):
    """Alice leads team A and team B (dave still leads B); both teams get jobs."""
    from apps.accounts.models import Membership

    Membership.objects.create(user=world.users["alice"], team=world.team_b, role="lead")
    return world.users["alice"]


def test_the_team_scopes_query_count_is_the_same_for_5_and_120_jobs(world, login):
    alice = login("alice")
    url = reverse("jobs-list")
    few = _queries(alice, url, {"scope": "team"})
    for i in range(120):
        make_job(world.cluster, 10_000 + i, world.users["tom"], world.team_a)
    assert _queries(alice, url, {"scope": "team"}) == few
    cursor = alice.get(url, {"scope": "team"}).context["page"].next_cursor
    assert _queries(alice, url, {"scope": "team", "after": cursor}) == few


def test_a_lead_of_two_teams_has_a_constant_query_count_too(world, login):
    _lead_of_two_teams(world)
    alice = login("alice")
    url = reverse("jobs-list")
    few = _queries(alice, url, {"scope": "team"})
    for i in range(120):
        team, user = (world.team_a, "tom") if i % 3 else (world.team_b, "carol")
        make_job(world.cluster, 10_000 + i, world.users[user], team)
    assert _queries(alice, url, {"scope": "team"}) == few
    cursor = alice.get(url, {"scope": "team"}).context["page"].next_cursor
    assert _queries(alice, url, {"scope": "team", "after": cursor}) == few


def test_a_lead_of_two_teams_pages_through_both_in_order_once(world, login):
    """The split page (one ordered scan per team, merged) against the plain rule."""
    from apps.jobs.models import Job

    _lead_of_two_teams(world)
    for i in range(140):
        # team B's jobs are fewer and older: a merge that took a page from each team in
        # turn, or dropped a team's tail, would show here
        team, user, minute = ((world.team_b, "carol", i) if i % 4 == 0
                              else (world.team_a, "tom", 200 + i))
        make_job(world.cluster, 30_000 + i, world.users[user], team,
                 submit_time=_at(minute), state="FAILED" if i % 2 else "COMPLETED")
    for params in ({"scope": "team"}, {"scope": "team", "state": "FAILED"}):
        alice, seen, cursor = login("alice"), [], ""
        while True:
            page = alice.get(reverse("jobs-list"), {**params, "after": cursor}).context["page"]
            seen += [(j.submit_time, j.pk) for j in page.rows]
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        expected = Job.objects.visible_to(world.users["alice"]).filter(
            team__in=[world.team_a, world.team_b])
        if "state" in params:
            expected = expected.filter(state="FAILED")
        assert seen == [(j.submit_time, j.pk) for j in expected.order_by("-submit_time", "-pk")]


def _at(minutes):
    from datetime import timedelta

    from tests.conftest import T0

    return T0 + timedelta(minutes=minutes)


def test_the_team_split_still_reads_through_visible_to(world, login):
    """The per-team ids are only candidates: rows come from the visible_to queryset, so
    a team the user no longer leads drops out even if its id is passed to the split."""
    from apps.core.paging import keyset_page
    from apps.jobs.models import Job

    bob = world.users["bob"]
    make_job(world.cluster, 40_001, world.users["carol"], world.team_b)
    qs = Job.objects.visible_to(bob)
    page = keyset_page(qs, "", 50, "submit_time",
                       [Q(team_id=world.team_a.pk), Q(team_id=world.team_b.pk)])
    assert {j.job_id for j in page.rows} == {101}  # bob's own job only


def test_a_lead_of_two_teams_is_served_by_one_scan_per_team_on_postgresql(world, login):
    from django.db import connection

    _lead_of_two_teams(world)
    with CaptureQueriesContext(connection) as ctx:
        assert login("alice").get(reverse("jobs-list"), {"scope": "team"}).status_code == 200
    unions = [q["sql"] for q in ctx.captured_queries if "UNION ALL" in q["sql"]]
    if connection.features.supports_slicing_ordering_in_compound:  # PostgreSQL (CI)
        assert len(unions) == 1 and unions[0].count('"team_id" = ') == 2
    else:  # SQLite cannot limit each part of a UNION: the plain query serves
        assert unions == []


def test_the_state_filter_keeps_the_index_order_no_distinct():
    """SELECT DISTINCT made PostgreSQL sort every matching job before the page's LIMIT
    (566 ms over 1M jobs); a filter on the job's own column cannot duplicate rows."""
    from apps.jobs.filters import JobFilterSet
    from apps.jobs.models import Job

    sql = str(JobFilterSet({"state": ["FAILED", "TIMEOUT"]}, queryset=Job.objects.all()).qs.query)
    assert "DISTINCT" not in sql.upper() and '"state" = FAILED' in sql


def test_has_findings_is_one_exists_over_both_tables(world, login):
    """One EXISTS over a UNION ALL (an index probe per row) rather than EXISTS OR EXISTS,
    which PostgreSQL ran as a hash of every finding on each request."""
    from apps.jobs.filters import JobFilterSet
    from apps.jobs.models import Job

    for value in ("true", "false"):
        sql = str(JobFilterSet({"has_findings": value}, queryset=Job.objects.all()).qs.query)
        assert sql.count("EXISTS") == 1 and "UNION ALL" in sql
        assert "jobs_jobfinding" in sql and "security_finding" in sql


def test_the_name_search_has_a_trigram_index_on_postgresql_only(world):
    from django.db import connection

    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'job_name_trgm'")
            (definition,) = cur.fetchone()
            assert "gin" in definition and "upper" in definition.lower() and \
                "gin_trgm_ops" in definition
        else:
            names = [row[1] for row in cur.execute("PRAGMA index_list('jobs_job')").fetchall()]
            assert "job_name_trgm" not in names and "job_team_state_submit" in names


def test_a_name_search_finds_a_substring_in_any_case(world, login):
    from apps.jobs.models import Job

    Job.objects.filter(job_id=101).update(name="Sweep-LR3e-4-0042")
    page = login("bob").get(reverse("jobs-list"), {"q": "lr3E-4-00"}).context["page"]
    assert [j.job_id for j in page.rows] == [101]
    page = login("bob").get(reverse("jobs-list"), {"q": "lr3e-5"}).context["page"]
    assert page.rows == []


def test_the_form_offers_every_range_filter_and_keeps_the_values(world, login):
    """The filter set has both ends of the date and GPU ranges; so has the page's form, and
    a filtered page shows what was asked (the date inputs send YYYY-MM-DD)."""
    from apps.jobs.models import Job

    Job.objects.filter(job_id=102).update(gpu_equivalent=1)  # tom's; 101 and 103 keep 8 GPUs
    Job.objects.filter(job_id=103).update(submit_time="2026-11-05T09:00:00Z")
    params = {"scope": "team", "submitted_before": "2026-11-03", "max_gpus": "4"}
    response = login("alice").get(reverse("jobs-list"), params)
    assert {j.job_id for j in response.context["page"].rows} == {102}
    html = response.content.decode()
    for name in ("submitted_after", "submitted_before", "min_gpus", "max_gpus"):
        assert f'name="{name}"' in html
    assert 'name="submitted_before" value="2026-11-03"' in html
    assert 'name="max_gpus" min="0" step="any" value="4"' in html
