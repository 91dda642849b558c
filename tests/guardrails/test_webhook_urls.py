"""Webhook URLs a user or a lead saves (issue 27): internal addresses are refused when saved,
with words that say why; an allow-listed one is saved and audited; and what "My alerts" shows
for a failed send does not tell a closed port from an address the policy refused."""

from __future__ import annotations

import ipaddress
import socket
from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError

from apps.analysis.egress import UNDELIVERED
from apps.audit.models import AuditEvent
from apps.core.adapters import webhook
from apps.guardrails.forms import PreferenceForm, TeamSettingForm
from apps.guardrails.models import AlertPreference, Message, TeamAlertSetting
from apps.guardrails.notify import send_notice

pytestmark = pytest.mark.django_db

REFUSED = [
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254: it is a cloud metadata"),
    ("http://localhost:6379/hook", "localhost: it points at a loopback address"),
    ("http://[::1]/hook", "::1: it is a loopback address"),
    ("http://127.0.0.1:8080/", "127.0.0.1: it is a loopback address"),
    ("http://[::ffff:169.254.169.254]/", "it is a cloud metadata address"),
    ("https://10.1.2.3/hook", "10.1.2.3: it is a private address"),
    ("https://100.64.0.7/", "it is a shared (CGNAT) address"),
    ("http://[fd00:ec2::254]/", "it is a cloud metadata address"),
]


def _forms(world, url):
    pref, _ = AlertPreference.objects.get_or_create(user=world.users["bob"])
    team = TeamAlertSetting(team=world.team_a)
    return [
        PreferenceForm({"me-webhook_url": url, "me-webhook_format": "slack"}, instance=pref,
                       prefix="me"),
        TeamSettingForm({"t-webhook_url": url, "t-webhook_format": "slack"}, instance=team,
                        prefix="t"),
    ]


@pytest.mark.parametrize(("url", "words"), REFUSED)
def test_each_form_refuses_an_internal_address_with_a_clear_message(world, url, words):
    for form in _forms(world, url):
        assert not form.is_valid()
        [message] = form.errors["webhook_url"]
        assert words in message and "Beacon does not post to" in message
        assert "BEACON_WEBHOOK_ALLOW" in message


@pytest.mark.parametrize(("url", "words"), REFUSED[:3])
def test_the_model_refuses_it_too_so_the_admin_site_does(world, url, words):
    with pytest.raises(ValidationError, match="Beacon does not post to"):
        AlertPreference(user=world.users["carol"], webhook_url=url).full_clean()
    with pytest.raises(ValidationError, match="Beacon does not post to"):
        TeamAlertSetting(team=world.team_b, webhook_url=url).full_clean()


def test_a_name_that_resolves_inside_the_network_is_refused(world, monkeypatch):
    monkeypatch.setattr(webhook, "resolve",
                        lambda host, port: [ipaddress.ip_address("10.0.0.5")])
    [form, _] = _forms(world, "https://chat.evil.example/hook")
    assert not form.is_valid()
    assert "chat.evil.example: it points at a private address" in form.errors["webhook_url"][0]


def test_a_public_or_not_yet_resolvable_url_is_saved(world):
    for url in ("https://hooks.slack.com/services/T0/B0/x", "https://chat.example/hook"):
        assert all(form.is_valid() for form in _forms(world, url)), url


def test_the_page_says_why_and_saves_nothing(world, login):
    answer = login("bob").post("/guardrails/preferences/", {
        "form": "me", "me-webhook_url": "http://169.254.169.254/latest/meta-data/",
        "me-webhook_format": "slack", "me-digest": "on"})
    page = answer.content.decode()
    assert answer.status_code == 200 and "Saved." not in page
    assert "Beacon does not post to 169.254.169.254" in page
    assert AlertPreference.objects.get(user=world.users["bob"]).webhook_url == ""


def test_an_allow_listed_internal_url_is_saved_and_audited(world, login, settings):
    settings.WEBHOOK_ALLOW = ["10.20.0.0/16"]
    form = f"team-{world.team_a.pk}"
    answer = login("alice").post("/guardrails/preferences/", {
        "form": form, f"{form}-webhook_url": "https://10.20.1.2/hooks/s3cret",
        f"{form}-webhook_format": "mattermost", f"{form}-lead_digest": "on"})
    assert answer.status_code == 303
    assert TeamAlertSetting.objects.get(team=world.team_a).webhook_url.startswith("https://10.20")
    event = AuditEvent.objects.get(action=AuditEvent.Action.WEBHOOK)
    assert event.username == "alice" and event.target == "team NLP"
    assert event.details == {"host": "10.20.1.2", "allowed_by": "10.20.0.0/16"}
    assert "s3cret" not in str(event.details)


def test_my_alerts_shows_the_same_words_for_a_closed_port_and_a_refusal(world, login,
                                                                         settings, caplog):
    """bob's webhook was saved when it pointed outside; now the send fails. Whether nothing
    listens there (allowed address) or the policy refuses it, he reads the same words."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # released on leaving: a closed port
    bob = world.users["bob"]
    AlertPreference.objects.create(user=bob, webhook_url=f"http://127.0.0.1:{port}/hook")
    now = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
    settings.WEBHOOK_ALLOW = ["127.0.0.1"]
    closed = send_notice(Message.Kind.ALERT, bob, "closed port", "body", now)
    settings.WEBHOOK_ALLOW = []
    refused = send_notice(Message.Kind.ALERT, bob, "refused", "body", now)
    assert closed.error == refused.error == f"slack: {UNDELIVERED}"
    # the log (admins) tells them apart
    assert "Connection refused" in caplog.text and "refused by the egress policy" in caplog.text
    page = login("bob").get("/guardrails/").content.decode()
    assert page.count(f"(slack: {UNDELIVERED})") == 2
    assert "refused the message" not in page and "cannot reach" not in page
