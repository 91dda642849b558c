"""Who sees which finding: admins all, leads their teams', researchers their own jobs'.
Another team's finding is a 404 on the page and in the API; evidence is redacted for
non-admins."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.security.models import Finding

pytestmark = pytest.mark.django_db

EXPECTED = {
    "bob": {"miner_in_job"},
    "tom": set(),
    "alice": {"miner_in_job", "ssh_without_allocation"},
    "carol": {"secret_in_job_script"},
    "dave": {"secret_in_job_script"},
    "staff": {"miner_in_job", "secret_in_job_script", "ssh_without_allocation",
              "gpu_activity_without_job"},
}


@pytest.mark.parametrize("persona", sorted(EXPECTED))
def test_visible_to_is_exactly_the_expected_set(findings_world, world, persona):
    rules = set(Finding.objects.visible_to(world.users[persona]).values_list("rule_key",
                                                                              flat=True))
    assert rules == EXPECTED[persona]


def test_disabled_and_anonymous_users_see_nothing(findings_world, world):
    from django.contrib.auth.models import AnonymousUser

    assert not Finding.objects.visible_to(world.users["eve"]).exists()
    assert not Finding.objects.visible_to(AnonymousUser()).exists()


@pytest.mark.parametrize("persona", sorted(EXPECTED))
def test_api_list_and_page_return_exactly_the_visible_set(findings_world, login, persona):
    client = login(persona)
    api = client.get(reverse("api:finding-list")).json()
    assert {row["rule"] for row in api["results"]} == EXPECTED[persona]
    page = client.get(reverse("security-list"), {"active": "true"})
    assert {f.rule_key for f in page.context["findings"]} == EXPECTED[persona]


def test_another_teams_finding_is_a_404(findings_world, login):
    carols = findings_world["secret_in_job_script"]
    for persona in ("bob", "alice", "tom"):
        assert login(persona).get(reverse("security-detail", args=[carols.pk])).status_code \
            == 404
        assert login(persona).get(reverse("api:finding-detail", args=[carols.pk])) \
            .status_code == 404


def test_evidence_is_redacted_for_everyone_but_admins(findings_world, login):
    miner = findings_world["miner_in_job"]
    for persona in ("bob", "alice"):
        evidence = login(persona).get(reverse("api:finding-detail", args=[miner.pk])) \
            .json()["evidence"]
        assert "signals" in evidence and "other_jobs" not in evidence \
            and "candidates" not in evidence
        page = login(persona).get(reverse("security-detail", args=[miner.pk])).content.decode()
        assert "shown to platform admins only" in page and "tom" not in page
    full = login("staff").get(reverse("api:finding-detail", args=[miner.pk])).json()
    assert full["evidence"]["other_jobs"] == [{"job_id": 102, "user": "tom"}]
    ssh = findings_world["ssh_without_allocation"]
    shown = login("alice").get(reverse("api:finding-detail", args=[ssh.pk])).json()
    assert "source_ip" not in shown["evidence"] and shown["evidence"]["method"] == "publickey"


def test_links_point_to_the_job_page_only_for_those_who_see_the_job(findings_world, login):
    miner = findings_world["miner_in_job"]
    links = login("bob").get(reverse("api:finding-detail", args=[miner.pk])).json()["links"]
    assert links["job"] == "/jobs/testcluster/101/" and links["cluster"] == \
        "/clusters/testcluster/"
