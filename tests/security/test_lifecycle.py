"""Open -> acknowledged -> resolved, or suppressed with a reason and an expiry; who may do
what; every change an event with its actor and assignee, and an audit log line."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse
from django.utils import timezone

from apps.security.findings import LifecycleError, expire_suppressions, transition
from apps.security.models import Finding

pytestmark = pytest.mark.django_db


def test_the_full_lifecycle_is_recorded(findings_world, world, caplog):
    finding = findings_world["miner_in_job"]
    staff = world.users["staff"]
    caplog.set_level(logging.INFO, logger="beacon.audit")
    transition(finding, staff, "assign", assignee=staff)
    transition(finding, world.users["bob"], "acknowledge", reason="looking")
    transition(finding, world.users["alice"], "comment", reason="the job was killed")
    transition(finding, staff, "resolve", reason="the job was killed")
    transition(finding, staff, "reopen", reason="not convinced")
    transition(finding, staff, "suppress", reason="red-team exercise",
               until=timezone.now() + timedelta(days=3))
    events = list(finding.events.values_list("action", "actor__username", "assignee__username",
                                             "from_status", "to_status"))
    assert events == [
        ("opened", None, None, "", "open"),
        ("assigned", "staff", "staff", "open", "open"),
        ("acknowledged", "bob", "staff", "open", "acknowledged"),
        ("commented", "alice", "staff", "acknowledged", "acknowledged"),
        ("resolved", "staff", "staff", "acknowledged", "resolved"),
        ("reopened", "staff", "staff", "resolved", "open"),
        ("suppressed", "staff", "staff", "open", "suppressed"),
    ]
    finding.refresh_from_db()
    assert finding.status == "suppressed" and finding.status_reason == "red-team exercise"
    assert sum('"action": "finding"' in r.getMessage() for r in caplog.records) == 6


@pytest.mark.parametrize(("action", "kwargs", "message"), [
    ("resolve", {}, "a reason is required"),
    ("suppress", {"reason": "x"}, "an expiry"),
    ("suppress", {"reason": "x", "until": timezone.now() - timedelta(hours=1)}, "an expiry"),
    ("suppress", {"reason": "x", "until": timezone.now() + timedelta(days=400)}, "an expiry"),
    ("assign", {}, "assignee must be an active platform admin"),
    ("reopen", {}, "cannot reopen a finding that is open"),
    ("delete", {}, "unknown action"),
])
def test_bad_transitions_are_refused_with_a_reason(findings_world, world, action, kwargs,
                                                   message):
    with pytest.raises(LifecycleError, match=message):
        transition(findings_world["miner_in_job"], world.users["staff"], action, **kwargs)


@pytest.mark.parametrize("action", ["suppress", "reopen", "assign"])
def test_owners_and_leads_may_not_suppress_reopen_or_assign(findings_world, world, action):
    for persona in ("bob", "alice"):
        with pytest.raises(PermissionDenied):
            transition(findings_world["miner_in_job"], world.users[persona], action,
                       reason="x", until=timezone.now() + timedelta(days=1),
                       assignee=world.users["staff"])


def test_a_researcher_cannot_assign_to_a_non_admin(findings_world, world):
    with pytest.raises(LifecycleError):
        transition(findings_world["miner_in_job"], world.users["staff"], "assign",
                   assignee=world.users["bob"])


def test_expired_suppressions_end(findings_world, world):
    finding = findings_world["gpu_activity_without_job"]
    transition(finding, world.users["staff"], "suppress", reason="burn-in",
               until=timezone.now() + timedelta(hours=1))
    assert expire_suppressions(world.cluster) == 0
    assert expire_suppressions(world.cluster, timezone.now() + timedelta(hours=2)) == 1
    finding.refresh_from_db()
    assert finding.status == "open" and finding.suppressed_until is None
    assert finding.events.last().action == "unsuppressed"


def test_the_page_form_applies_an_action_and_reports_refusals(findings_world, login):
    finding = findings_world["miner_in_job"]
    url = reverse("security-transition", args=[finding.pk])
    page = login("bob").post(url, {"action": "acknowledge"}, follow=True)
    assert "Finding acknowledged." in page.content.decode()
    page = login("bob").post(url, {"action": "comment"}, follow=True)
    assert "write the comment" in page.content.decode()
    assert login("bob").post(url, {"action": "resolve", "reason": "x"}).status_code == 403
    assert login("bob").post(url, {"action": "suppress", "reason": "x",
                                   "until": "2099-01-01"}).status_code == 403
    page = login("staff").post(url, {"action": "suppress", "reason": "drill",
                                     "until": (timezone.now() + timedelta(days=2)).date()
                                     .isoformat()}, follow=True)
    assert Finding.objects.get(pk=finding.pk).status == "suppressed"


def test_the_api_applies_an_action_and_declares_refusals(findings_world, login):
    finding = findings_world["miner_in_job"]
    url = reverse("api:finding-transition", args=[finding.pk])
    assert login("alice").post(url, {"action": "resolve", "reason": "token revoked"},
                               content_type="application/json").status_code == 403
    ok = login("staff").post(url, {"action": "resolve", "reason": "token revoked"},
                             content_type="application/json")
    assert ok.status_code == 200 and ok.json()["status"] == "resolved"
    assert ok.json()["events"][-1]["actor"] == "staff"
    again = login("staff").post(url, {"action": "resolve", "reason": "x"},
                                content_type="application/json")
    assert again.status_code == 400 and "cannot resolve" in again.json()["detail"]
    assert login("alice").post(url, {"action": "reopen"}, content_type="application/json") \
        .status_code == 403
    assert login("carol").post(url, {"action": "acknowledge"}, content_type="application/json") \
        .status_code == 404
    bad = login("staff").post(url, {"action": "explode"}, content_type="application/json")
    assert bad.status_code == 400 and "action" in bad.json()
