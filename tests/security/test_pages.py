"""The findings pages, the platform summary and the job page's findings."""

from __future__ import annotations

import pytest
from django.urls import reverse

from apps.security.findings import transition

pytestmark = pytest.mark.django_db


def test_the_list_filters_by_severity_rule_status_and_text(findings_world, login):
    client = login("staff")
    url = reverse("security-list")
    rules = lambda **q: {f.rule_key for f in client.get(url, q).context["findings"]}  # noqa: E731
    assert rules(severity="critical") == {"miner_in_job"}
    assert rules(rule="ssh_without_allocation") == {"ssh_without_allocation"}
    assert rules(q="gpu01:3") == {"gpu_activity_without_job"}
    assert rules(user="carol") == {"secret_in_job_script"}
    assert rules(job="101") == {"miner_in_job"}
    transition(findings_world["miner_in_job"], _staff(), "resolve", reason="done")
    assert "miner_in_job" not in rules()  # active ones by default
    assert rules(status="resolved") == {"miner_in_job"}
    assert rules(active="false") == {"miner_in_job"}
    assert client.get(url, {"severity": "nonsense"}).context["findings"].count() == 0


def _staff():
    from django.contrib.auth.models import User

    return User.objects.get(username="staff")


def test_the_filter_form_as_a_browser_sends_it_works(findings_world, login):
    """Every field is sent; "any" is an empty value, which must not void the filter."""
    form = {"q": "", "status": "", "active": "", "severity": "critical", "rule": "",
            "cluster": "", "node": "", "user": "", "job": ""}
    response = login("staff").get(reverse("security-list"), form)
    assert {f.rule_key for f in response.context["findings"]} == {"miner_in_job"}
    assert b"Select a valid choice" not in response.content
    form["severity"] = ""  # "any" everywhere: every finding, closed ones too
    everything = login("staff").get(reverse("security-list"), form).context["findings"]
    assert everything.count() == 4


def test_the_finding_page_shows_evidence_timeline_and_the_actions_allowed(findings_world,
                                                                        login):
    finding = findings_world["miner_in_job"]
    page = login("staff").get(reverse("security-detail", args=[finding.pk]))
    html = page.content.decode()
    assert "T1496.001" in html and "Compute Hijacking" in html
    assert "Other jobs" in html and "Timeline" in html
    assert reverse("jobs-detail", args=[finding.cluster.name, 101]) in html
    assert set(page.context["actions"]) == {"comment", "acknowledge", "resolve", "suppress",
                                            "assign"}
    own = login("bob").get(reverse("security-detail", args=[finding.pk]))
    assert set(own.context["actions"]) == {"comment", "acknowledge"}  # critical: not resolve


def test_hostile_evidence_is_escaped(world, login):
    from apps.security.findings import record_hits
    from tests.security.conftest import hit

    record_hits(world.cluster, [hit(evidence={"preview": "<script>alert(1)</script>"})])
    finding = world.cluster.security_findings.get()
    html = login("staff").get(reverse("security-detail", args=[finding.pk])).content.decode()
    assert "<script>alert(1)" not in html and "&lt;script&gt;" in html


def test_the_platform_page_summarises_each_cluster(findings_world, login):
    html = login("staff").get(reverse("core-platform")).content.decode()
    assert 'id="security"' in html and "Open and acknowledged findings" in html
    summary = login("staff").get(reverse("core-platform")).context["security_summary"]
    [row] = summary
    assert row["counts"] == [1, 3, 0, 0, 0]  # critical, high, medium, low, info


def test_the_job_page_lists_the_findings_about_the_job(findings_world, login):
    url = reverse("jobs-detail", args=["testcluster", 101])
    html = login("bob").get(url).content.decode()
    assert "Security findings about this job" in html and "miner_in_job job:101" in html
    other = login("carol").get(reverse("jobs-detail", args=["testcluster", 201])).content
    assert b"Security findings about this job" in other
    quiet = login("tom").get(reverse("jobs-detail", args=["testcluster", 102])).content
    assert b"Security findings about this job" not in quiet


def test_the_navigation_links_to_the_findings(login, world):
    assert reverse("security-list") in login("bob").get(reverse("core-home")).content.decode()


def test_the_job_lists_has_findings_filter_counts_security_findings(findings_world, login):
    page = login("alice").get(reverse("jobs-list"), {"scope": "team", "has_findings": "true"})
    assert {j.job_id for j in page.context["page"].rows} == {101}


def test_the_defaults_command_adds_only_what_is_missing(db):
    import io

    from django.core.management import call_command

    from apps.security.models import SecurityRule

    SecurityRule.objects.filter(key="exposed_service").delete()
    out = io.StringIO()
    call_command("security_defaults", stdout=out)
    assert out.getvalue().startswith("added 1 rule(s), 0 advisory(ies)")
