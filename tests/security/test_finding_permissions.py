"""Who may do what to a finding (issue 27 item 6), and what each action leaves behind
(issue 26): the assignee kept, comments, every action in the audit log.

Statuses as the house rules say: a finding the persona cannot see is a 404; a visible one
whose action the persona may not take is a 403; an allowed action answers 303 (the page).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.security.findings import record_hits, transition
from apps.security.models import Finding
from tests.security.conftest import hit

pytestmark = pytest.mark.django_db
UNTIL = (timezone.now() + timedelta(days=7)).date().isoformat()
BODY = {"comment": {"reason": "looking into it"}, "acknowledge": {},
        "resolve": {"reason": "process killed"},
        "suppress": {"reason": "red-team drill", "until": UNTIL},
        "reopen": {"reason": "again"}, "assign": {"assignee": "staff"}}
# the statuses each action starts from in these tests
START = {"reopen": "resolved"}


def _findings(world):
    """A critical and a medium finding about bob's job 101 (team A), and a critical one
    about alice's own job 103 (alice leads team A)."""
    record_hits(world.cluster, [
        hit("miner_in_job", "job:101", job_id=101, user="bob", team="nlp", severity="critical"),
        hit("secret_in_job_script", "101:x", job_id=101, user="bob", team="nlp",
            severity="medium"),
        hit("miner_in_job", "job:103", job_id=103, user="alice", team="nlp",
            severity="critical"),
    ])
    return {(f.job_id_raw, f.severity): f for f in Finding.objects.all()}


def _post(login, persona, finding, action):
    Finding.objects.filter(pk=finding.pk).update(status=START.get(action, "open"))
    url = reverse("security-transition", args=[finding.pk])
    return login(persona).post(url, {"action": action, **BODY[action]}).status_code


ACTIONS = ("comment", "acknowledge", "resolve", "suppress", "reopen", "assign")
# persona -> action -> status, on bob's critical finding (site default: admins close)
CRITICAL = {
    "bob": {"comment": 303, "acknowledge": 303, "resolve": 403, "suppress": 403,
            "reopen": 403, "assign": 403},
    "alice": {"comment": 303, "acknowledge": 303, "resolve": 403, "suppress": 403,
              "reopen": 403, "assign": 403},
    "staff": dict.fromkeys(ACTIONS, 303),
    "tom": dict.fromkeys(ACTIONS, 404),
    "carol": dict.fromkeys(ACTIONS, 404),
    "dave": dict.fromkeys(ACTIONS, 404),
}


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("persona", list(CRITICAL))
def test_who_may_act_on_a_critical_finding(world, login, persona, action):
    finding = _findings(world)[(101, "critical")]
    assert _post(login, persona, finding, action) == CRITICAL[persona][action]


@pytest.mark.parametrize(("persona", "action", "status"), [
    ("bob", "resolve", 303),  # a medium finding: whoever sees it may resolve it
    ("alice", "resolve", 303),
    ("bob", "suppress", 403),  # suppressing stays with admins
    ("bob", "reopen", 403),
    ("tom", "resolve", 404),
])
def test_a_medium_finding_may_be_resolved_by_whoever_sees_it(world, login, persona, action,
                                                             status):
    finding = _findings(world)[(101, "medium")]
    assert _post(login, persona, finding, action) == status


@pytest.mark.parametrize(("persona", "job", "action", "status"), [
    ("alice", 101, "resolve", 303),  # the lead of the finding's team, about bob's job
    ("alice", 101, "suppress", 303),
    ("alice", 101, "reopen", 403),  # reopening and assigning stay with admins
    ("alice", 101, "assign", 403),
    ("alice", 103, "resolve", 403),  # never about her own job
    ("alice", 103, "suppress", 403),
    ("bob", 101, "resolve", 403),  # the role is "lead": a researcher still may not
    ("dave", 101, "resolve", 404),  # a lead of another team does not see it
])
def test_a_site_may_let_leads_close_serious_findings(world, login, settings, persona, job,
                                                     action, status):
    settings.SECURITY_CLOSE_ROLE = "lead"
    finding = _findings(world)[(job, "critical")]
    assert _post(login, persona, finding, action) == status


def test_the_api_refuses_the_same_way(world, login):
    finding = _findings(world)[(101, "critical")]
    url = reverse("api:finding-transition", args=[finding.pk])
    post = lambda who, body: login(who).post(url, body, content_type="application/json")  # noqa: E731
    assert post("bob", {"action": "resolve", "reason": "mine"}).status_code == 403
    assert post("bob", {"action": "comment", "reason": "it was a test"}).status_code == 200
    assert post("tom", {"action": "comment", "reason": "x"}).status_code == 404


def test_the_page_offers_only_the_actions_allowed(world, login):
    found = _findings(world)
    critical = reverse("security-detail", args=[found[(101, "critical")].pk])
    medium = reverse("security-detail", args=[found[(101, "medium")].pk])
    assert login("bob").get(critical).context["actions"] == ["comment", "acknowledge"]
    assert login("bob").get(medium).context["actions"] == ["comment", "acknowledge", "resolve"]
    html = login("bob").get(critical).content.decode()
    assert 'name="until"' not in html and 'name="assignee"' not in html


# --- What the actions leave behind ------------------------------------------------------------


def test_acknowledging_with_an_assignee_keeps_the_assignee(world, login):
    finding = _findings(world)[(101, "critical")]
    url = reverse("security-transition", args=[finding.pk])
    login("staff").post(url, {"action": "acknowledge", "assignee": "staff"})
    finding.refresh_from_db()
    assert finding.status == "acknowledged" and finding.assignee.username == "staff"
    event = finding.events.last()
    assert (event.action, event.assignee.username) == ("acknowledged", "staff")


def test_an_assignee_given_by_a_researcher_is_refused(world, login):
    finding = _findings(world)[(101, "critical")]
    url = reverse("security-transition", args=[finding.pk])
    assert login("bob").post(url, {"action": "acknowledge", "assignee": "staff"}) \
        .status_code == 403
    finding.refresh_from_db()
    assert finding.status == "open" and finding.assignee is None


def test_a_comment_is_an_event_that_keeps_the_status(world, login):
    finding = _findings(world)[(101, "critical")]
    url = reverse("security-transition", args=[finding.pk])
    page = login("bob").post(url, {"action": "comment", "reason": "I ran a benchmark"},
                             follow=True)
    assert "Comment added." in page.content.decode()
    finding.refresh_from_db()
    assert finding.status == "open"
    assert finding.events.last().action == "commented"
    assert "I ran a benchmark" in page.content.decode()  # on the timeline


def test_every_finding_action_is_in_the_audit_log(world, login):
    finding = _findings(world)[(101, "critical")]
    staff, bob = world.users["staff"], world.users["bob"]
    transition(finding, bob, "comment", reason="hm")
    transition(finding, staff, "assign", assignee=staff)
    transition(finding, bob, "acknowledge")
    transition(finding, staff, "resolve", reason="killed")
    transition(finding, staff, "reopen", reason="back")
    transition(finding, staff, "suppress", reason="drill",
               until=timezone.now() + timedelta(days=1))
    events = AuditEvent.objects.filter(action="finding").order_by("at", "id")
    assert [e.details["action"] for e in events] == [
        "commented", "assigned", "acknowledged", "resolved", "reopened", "suppressed"]
    assert [e.username for e in events] == ["bob", "staff", "bob", "staff", "staff", "staff"]
    resolved = events[3]
    assert resolved.details["reason"] == "killed" and resolved.details["severity"] == "critical"
    html = login("staff").get(reverse("audit-list"), {"action": "finding"}).content.decode()
    assert html.count("Security finding") >= 6 and f"finding {finding.pk}:" in html


def test_a_page_action_is_audited_with_the_request(world, login):
    finding = _findings(world)[(101, "critical")]
    login("staff").post(reverse("security-transition", args=[finding.pk]),
                        {"action": "resolve", "reason": "done"})
    event = AuditEvent.objects.get(action="finding")
    assert event.path == reverse("security-transition", args=[finding.pk])
    assert event.method == "POST"


# --- The list and the evidence ----------------------------------------------------------------


def test_the_list_puts_severity_first_then_the_latest_seen(world, login):
    from tests.security.conftest import T

    record_hits(world.cluster, [
        hit("gpu_activity_without_job", "gpu01:1", start=T + 9000, severity="medium"),
        hit("gpu_activity_without_job", "gpu01:2", start=T, severity="critical"),
        hit("gpu_activity_without_job", "gpu01:3", start=T + 3000, severity="critical"),
        hit("gpu_activity_without_job", "gpu01:4", start=T + 6000, severity="high"),
        hit("gpu_activity_without_job", "gpu01:5", start=T + 8000, severity="low"),
    ])
    shown = login("staff").get(reverse("security-list")).context["findings"]
    assert [f.dedup_key.rsplit(":", 1)[1] for f in shown] == ["3", "2", "4", "1", "5"]


def test_evidence_is_a_readable_table_not_json(world, login):
    record_hits(world.cluster, [hit(evidence={
        "window": {"start": "2026-11-02T09:00:00Z", "end": "2026-11-02T09:15:00Z"},
        "signals": {"egress": {"met": True, "ratio": 4.25}, "power": {"met": False}},
        "gpus": [{"host": "gpu01", "gpu": 0, "util": 0.97}, {"host": "gpu02", "gpu": 1}],
        "cves": ["CVE-2024-1", "CVE-2024-2"], "note": "<b>bold</b>"})])
    finding = Finding.objects.get()
    html = login("staff").get(reverse("security-detail", args=[finding.pk])).content.decode()
    section = html[html.index('id="evidence"'):html.index('id="timeline"')]
    assert "{" not in section and "&quot;" not in section  # no JSON anywhere
    assert "2026-11-02T09:00:00Z → 2026-11-02T09:15:00Z" in section
    # a list of objects: a column per key (PostgreSQL's jsonb keeps keys in its own order)
    assert all(f"<th>{key}</th>" in section for key in ("Host", "Gpu", "Util"))
    assert '<th scope="row">Egress</th><td><table' in section  # nested: a nested table
    assert "CVE-2024-1, CVE-2024-2" in section
    assert "&lt;b&gt;bold&lt;/b&gt;" in section and "<b>bold" not in section
