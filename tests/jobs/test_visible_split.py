"""``visible_to`` split into parts (own jobs, each led team's) for paging: the same jobs in
the same order as the rule read whole, on the page's ``scope=all`` and the API's cursor."""

from __future__ import annotations

from datetime import timedelta
from functools import reduce
from operator import or_

import pytest
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.accounts.models import Membership
from apps.core.paging import SplitSlices, split_slice
from apps.jobs.models import Job
from tests.conftest import PERSONAS, T0, make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def mixed(world):
    """Alice leads team A and team B and runs jobs in a team she does not lead (her own
    only), in team A (own and her team's both), beside team A's and B's other jobs (her
    teams' only) and an orphan (neither). Many share a submit time, so the API's cursor,
    which pages on the time alone, needs its offset."""
    from apps.accounts.models import Team

    other = Team.objects.create(slug="other", name="Other")
    Membership.objects.create(user=world.users["alice"], team=world.team_b, role="lead")
    owners = [("alice", other), ("alice", world.team_a), ("tom", world.team_a),
              ("carol", world.team_b), ("bob", other), (None, None)]
    for i in range(60):
        name, team = owners[i % len(owners)]
        make_job(world.cluster, 50_000 + i, world.users[name] if name else None, team,
                 submit_time=T0 + timedelta(minutes=i // 4),
                 state="RUNNING" if i % 5 == 0 else "COMPLETED")
    return world


def _led(user):
    return list(Membership.objects.filter(user=user, role="lead").values_list("team_id",
                                                                               flat=True))


@pytest.mark.parametrize("persona", [p for p in PERSONAS if p != "anon"])
def test_the_parts_hold_exactly_the_jobs_visible_to_holds(mixed, persona):
    user = mixed.users[persona]
    parts = Job.objects.visible_parts(user, _led(user))
    visible = set(Job.objects.visible_to(user).values_list("pk", flat=True))
    if parts is None:  # admin: every job; inactive: none; nothing to split
        assert persona in ("staff", "eve")
        assert visible == (set(Job.objects.values_list("pk", flat=True))
                           if persona == "staff" else set())
        return
    union = set(Job.objects.filter(reduce(or_, parts)).values_list("pk", flat=True))
    assert union == visible


def test_own_teams_both_and_neither_are_where_the_rule_puts_them(mixed):
    alice = mixed.users["alice"]
    parts = Job.objects.visible_parts(alice, _led(alice))
    assert len(parts) == 3  # her own, team A, team B

    def seen(job_id):
        return any(Job.objects.filter(part, job_id=job_id).exists() for part in parts)

    assert seen(50_000)  # own, in a team she does not lead
    assert seen(50_001)  # own, in team A
    assert seen(50_002) and seen(50_003)  # tom's in team A, carol's in team B
    assert not seen(50_004) and not seen(50_005)  # bob's in the other team, the orphan


@pytest.mark.parametrize("stop", [1, 7, 23, 40, 200])
def test_a_split_slice_is_the_plain_slice(mixed, stop):
    alice = mixed.users["alice"]
    qs = Job.objects.visible_to(alice).order_by("-submit_time", "-pk")
    parts = Job.objects.visible_parts(alice, _led(alice))
    for start in (0, 3, 30):
        expected = list(qs[start:stop])
        assert split_slice(qs, start, stop, parts) == expected
        assert SplitSlices(qs, parts).filter(state="RUNNING")[start:stop] == \
            list(qs.filter(state="RUNNING")[start:stop])


def test_the_split_reads_rows_through_the_queryset_not_the_parts(mixed):
    """The parts only name candidates: a part wider than the queryset widens nothing."""
    bob = mixed.users["bob"]
    qs = Job.objects.visible_to(bob).order_by("-submit_time", "-pk")
    rows = split_slice(qs, 0, 100, [Q(user=bob), Q(team_id=mixed.team_b.pk)])
    assert {j.user_id for j in rows} == {bob.pk}


def _api_walk(client, params):
    """The ids of every page forward from the first, then of every page back from the last
    (DRF's reversed cursors, with their offsets among equal submit times)."""
    url, pages = reverse("api:job-list"), []
    body = client.get(url, {**params, "page_size": 7}).json()
    for follow in ("next", "previous"):
        while True:
            pages.append((follow, [row["id"] for row in body["results"]]))
            if not body[follow]:
                break
            body = client.get(body[follow]).json()
    return pages


@pytest.mark.parametrize("persona", ["alice", "bob", "dave", "staff"])
@pytest.mark.parametrize("params", [{}, {"state": "RUNNING"}])
def test_the_api_pages_as_the_whole_rule_does(mixed, login, monkeypatch, persona, params):
    """Every page, forward and back, against the same walk with the split turned off."""
    from apps.jobs.models.jobs import JobQuerySet

    client = login(persona)
    split = _api_walk(client, params)
    expected = list(Job.objects.visible_to(mixed.users[persona]).filter(**params)
                    .order_by("-submit_time", "-pk").values_list("pk", flat=True))
    assert [pk for follow, page in split if follow == "next" for pk in page] == expected
    monkeypatch.setattr(JobQuerySet, "visible_parts", lambda self, user, led: None)
    assert split == _api_walk(client, params)


@pytest.mark.parametrize("sort", ["-submitted", "-gpus", "name"])
def test_a_researchers_and_a_leads_all_scope_pages_as_the_rule_does(mixed, login, sort):
    for persona in ("alice", "bob"):
        client, user = login(persona), mixed.users[persona]
        got, params = [], {"scope": "all", "sort": sort, "page": 1, "after": ""}
        while True:
            page = client.get(reverse("jobs-list"), params).context["page"]
            got += [j.pk for j in page.rows]
            if sort == "-submitted":
                if not page.next_cursor:
                    break
                params["after"] = page.next_cursor
            else:
                if not page.has_next:
                    break
                params["page"] += 1
        order = {"-submitted": ("-submit_time", "-pk"), "-gpus": ("-gpu_equivalent", "-pk"),
                 "name": ("name", "pk")}[sort]
        assert got == list(Job.objects.visible_to(user).order_by(*order)
                           .values_list("pk", flat=True))


def test_on_postgresql_a_lead_is_one_scan_per_part_and_a_researcher_one_index(mixed, login):
    with CaptureQueriesContext(connection) as ctx:
        assert login("alice").get(reverse("api:job-list")).status_code == 200
    unions = [q["sql"] for q in ctx.captured_queries if "UNION ALL" in q["sql"]]
    if connection.features.supports_slicing_ordering_in_compound:  # PostgreSQL (CI)
        assert len(unions) == 1 and unions[0].count('"team_id" = ') == 2
        assert unions[0].count("LIMIT 51") == 3  # her own jobs, team A's, team B's
    else:  # SQLite cannot limit each part of a UNION: the plain query serves
        assert unions == []
    with CaptureQueriesContext(connection) as ctx:
        assert login("bob").get(reverse("api:job-list"), {"state": "RUNNING"}).status_code \
            == 200
    page = [q["sql"] for q in ctx.captured_queries if "LIMIT 51" in q["sql"]]
    # one part: the rule's OR, and the equality the (user, state, -submit_time) index serves
    assert len(page) == 1 and "UNION" not in page[0]
    assert page[0].endswith(f'AND "jobs_job"."user_id" = {mixed.users["bob"].pk}) '
                            'ORDER BY "jobs_job"."submit_time" DESC, "jobs_job"."id" DESC '
                            'LIMIT 51')
