"""The audit log: sign-ins, sign-outs, failures, API writes and admin edits, for admins only."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import Client
from django.urls import reverse

from apps.accounts import tokens
from apps.audit import services
from apps.audit.models import AuditEvent


def test_a_sign_in_and_sign_out_are_recorded_with_the_address(world):
    client = Client(REMOTE_ADDR="127.0.0.9")
    client.post(reverse("login"), {"username": "bob", "password": "pw"})
    client.post(reverse("logout"))
    rows = list(AuditEvent.objects.order_by("id").values_list("action", "username", "ip"))
    assert rows == [("login", "bob", "127.0.0.9"), ("logout", "bob", "127.0.0.9")]
    assert AuditEvent.objects.get(action="login").details == {"backend": "ModelBackend"}


def test_a_failed_sign_in_keeps_the_name_and_never_the_password(world):
    Client().post(reverse("login"), {"username": "mallory", "password": "s3cret-guess"})
    event = AuditEvent.objects.get(action="login_failed")
    assert event.username == "mallory" and event.actor is None
    stored = json.dumps([event.details, event.target, event.path])
    assert "s3cret" not in stored


@pytest.mark.parametrize(("method", "persona", "status"), [
    ("post", "bob", 403), ("delete", "staff", 405), ("patch", "anon", 401),
])
def test_every_api_write_is_recorded_even_when_refused(world, method, persona, status):
    headers = {}
    if persona != "anon":
        _, key = tokens.create(world.users[persona], "audit test")
        headers["HTTP_AUTHORIZATION"] = f"Token {key}"
    url = reverse("api:job-detail", kwargs={"pk": world.jobs["bob"].pk})
    assert getattr(Client(), method)(url, **headers).status_code == status
    event = AuditEvent.objects.get(action="api_write")
    assert (event.method, event.path, event.status) == (method.upper(), url, status)
    assert event.username == ("" if persona == "anon" else persona)


def test_api_reads_are_not_recorded(world, login):
    login("bob").get(reverse("api:job-list"))
    assert not AuditEvent.objects.filter(action="api_write").exists()


@pytest.fixture
def superuser(world):
    world.users["staff"].is_superuser = True
    world.users["staff"].save()


def test_an_admin_edit_is_recorded_with_what_changed(world, login, superuser):
    team = world.team_a
    response = login("staff").post(
        reverse("admin:accounts_team_change", args=[team.pk]),
        {"slug": team.slug, "name": "NLP research", "description": "",
         "memberships-TOTAL_FORMS": "0", "memberships-INITIAL_FORMS": "0",
         "slurm_accounts-TOTAL_FORMS": "0", "slurm_accounts-INITIAL_FORMS": "0"})
    assert response.status_code == 302, response.content[:2000]
    event = AuditEvent.objects.get(action="admin")
    assert (event.username, event.target) == ("staff", "team: NLP research")
    assert (event.ip, event.method) == ("127.0.0.1", "POST")  # from the request being served
    assert event.details["change"] == "changed" and "Name" in event.details["message"]


def test_each_event_is_also_one_json_log_line(world, caplog):
    caplog.set_level(logging.INFO, logger="beacon.audit")
    services.record("login_failed", username='x"}\n{"forged": 1')
    (line,) = [r.getMessage() for r in caplog.records if r.name == "beacon.audit"]
    assert "\n" not in line
    assert json.loads(line)["user"] == 'x"}\n{"forged": 1'


def test_only_admins_see_audit_events(world):
    services.record("login", user=world.users["bob"])
    assert AuditEvent.objects.visible_to(world.users["staff"]).count() == 1
    for persona in ("alice", "bob", "eve"):
        assert AuditEvent.objects.visible_to(world.users[persona]).count() == 0


def test_the_audit_page_filters_by_event_and_user(world, login):
    services.record("login", user=world.users["bob"])
    services.record("login_failed", username="carol")
    services.record("login", user=world.users["alice"])
    page = login("staff")
    seen = page.get(reverse("audit-list"), {"action": "login"}).context["events"]
    assert {e.username for e in seen} == {"bob", "alice", "staff"}  # staff's own sign-in too
    seen = page.get(reverse("audit-list"), {"user": "carol"}).context["events"]
    assert [e.action for e in seen] == ["login_failed"]
    bogus = page.get(reverse("audit-list"), {"action": "nonsense"}).context["events"]
    assert len(bogus) == 4  # an unknown action filters nothing out (3 + staff's own login)


def test_the_audit_admin_is_read_only(world, login, superuser):
    event = services.record("login", user=world.users["bob"])
    client = login("staff")
    assert client.get(reverse("admin:audit_auditevent_changelist")).status_code == 200
    assert client.get(reverse("admin:audit_auditevent_add")).status_code == 403
    assert client.post(reverse("admin:audit_auditevent_delete", args=[event.pk]),
                       {"post": "yes"}).status_code == 403
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_a_bulk_admin_delete_records_every_object(world, login, superuser):
    from apps.accounts.models import Team

    doomed = [Team.objects.create(slug=f"tmp{i}", name=f"Temporary {i}") for i in range(3)]
    response = login("staff").post(reverse("admin:accounts_team_changelist"), {
        "action": "delete_selected", "_selected_action": [t.pk for t in doomed], "post": "yes"})
    assert response.status_code == 302, response.content[:2000]
    assert not Team.objects.filter(slug__startswith="tmp").exists()
    events = AuditEvent.objects.filter(action="admin").order_by("target")
    assert [e.target for e in events] == [f"team: Temporary {i}" for i in range(3)]
    assert all(e.details["change"] == "deleted" and e.username == "staff" for e in events)
    assert {e.details["object_id"] for e in events} == {str(t.pk) for t in doomed}


def test_a_single_admin_delete_is_recorded_once(world, login, superuser):
    from apps.accounts.models import Team

    team = Team.objects.create(slug="tmp", name="Temporary")
    response = login("staff").post(reverse("admin:accounts_team_changelist"), {
        "action": "delete_selected", "_selected_action": [team.pk], "post": "yes"})
    assert response.status_code == 302
    assert AuditEvent.objects.filter(action="admin", target="team: Temporary").count() == 1
