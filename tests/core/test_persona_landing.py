"""Each persona lands on what they came for (issue 26 item 2): the admin's home is the
platform, not "You have no jobs yet"; /jobs/ opens on every job for an admin, on the team's
jobs for a lead, on one's own for a researcher (each through ``visible_to``)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.clusters.models import SlurmAssociation
from apps.core.models import TaskRun
from apps.security.findings import record_hits
from tests.security.conftest import hit

pytestmark = pytest.mark.django_db


def test_the_admins_home_is_the_platform(world, login):
    TaskRun.objects.create(kind="sync", cluster=world.cluster, status="failed", error="boom")
    record_hits(world.cluster, [hit("miner_in_job", "job:101", job_id=101, severity="critical")])
    response = login("staff").get(reverse("core-home"))
    html = response.content.decode()
    assert "You have no jobs yet" not in html
    assert "Platform overview" in html and world.cluster.title in html  # clusters and syncs
    assert 'id="security"' in html and "Open and acknowledged findings" in html
    assert "Recent background runs" in html and "boom" in html
    assert 'id="quotas-at-risk"' in html and 'id="slo"' in html


def test_the_admins_home_lists_the_quotas_at_risk_only(world, login):
    # nlp: 90% of a 100 GPU-hour GrpTRESMins; vision: 10%
    for account, used in (("nlp", 90 * 60), ("vision", 10 * 60)):
        SlurmAssociation.objects.create(cluster=world.cluster, account=account,
                                        grp_tres_mins={"gres/gpu": 100 * 60},
                                        usage_tres_mins={"gres/gpu": used})
    rows = login("staff").get(reverse("core-home")).context["quotas_at_risk"]
    assert [r.account.name for r in rows] == ["nlp"]
    assert rows[0].status.percent == 90.0


@pytest.mark.parametrize(("persona", "template"), [
    ("bob", "core/home.html"), ("alice", "core/home.html"), ("staff", "core/home_admin.html")])
def test_each_persona_gets_their_home(world, login, persona, template):
    response = login(persona).get(reverse("core-home"))
    assert template in [t.name for t in response.templates]


def test_a_leads_home_links_the_teams_they_lead(world, login):
    html = login("alice").get(reverse("core-home")).content.decode()
    assert reverse("accounts-team-detail", args=["nlp"]) in html
    assert "?scope=team&amp;team=nlp" in html
    assert 'id="my-teams"' not in login("bob").get(reverse("core-home")).content.decode()


@pytest.mark.parametrize(("persona", "scope", "expected"), [
    ("staff", "all", {101, 102, 103, 201, 301}),
    ("alice", "team", {101, 102, 103}),
    ("dave", "team", {201}),
    ("bob", "mine", {101}),
    ("carol", "mine", {201}),
])
def test_the_job_list_opens_on_what_each_persona_came_for(world, login, persona, scope,
                                                          expected):
    response = login(persona).get(reverse("jobs-list"))
    assert response.context["scope"] == scope
    assert {j.job_id for j in response.context["page"].rows} == expected
    assert f'href="?scope={scope}" aria-current="page"' in response.content.decode()


def test_asking_for_a_scope_still_works_and_never_widens(world, login):
    staff = login("staff").get(reverse("jobs-list"), {"scope": "mine"})
    assert staff.context["page"].rows == []  # the admin has no jobs of their own
    bob = login("bob").get(reverse("jobs-list"), {"scope": "all"})
    assert {j.job_id for j in bob.context["page"].rows} == {101}
