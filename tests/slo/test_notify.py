"""Breach and fast-burn notifications: once per episode, to the leads and the admins, by
e-mail and a Slack or Mattermost webhook, each linking to the scorecard; a failed channel is
retried alone; a worker holding the claim keeps others from sending."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from django.core import mail
from django.urls import reverse
from django.utils import timezone

from apps.slo import notify, services
from apps.slo.models import Alert, Objective, Scorecard
from tests.conftest import make_job
from tests.slo.conftest import NOW

pytestmark = pytest.mark.django_db


class Hook(BaseHTTPRequestHandler):
    """A webhook endpoint on loopback: records bodies, answers ``status``."""

    bodies: list[dict[str, Any]] = []
    status = 200

    def do_POST(self) -> None:  # http.server calls it by this name
        length = int(self.headers["Content-Length"])
        type(self).bodies.append(json.loads(self.rfile.read(length)))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook(settings):
    Hook.bodies, Hook.status = [], 200
    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.SLO_WEBHOOK_URL = f"http://127.0.0.1:{server.server_port}/hook"
    settings.WEBHOOK_ALLOW = ["127.0.0.1"]  # a loopback receiver: allowed by name (issue 27)
    yield Hook
    server.shutdown()
    server.server_close()


def breaching(world: Any, failures: int = 3) -> None:
    """Team A's jobs of the last two hours fail on broken nodes: the 99 % success SLO is
    breached and its budget burns fast."""
    start = NOW - timedelta(hours=2)
    for i in range(failures):
        make_job(world.cluster, 7000 + i, world.users["bob"], world.team_a,
                 submit_time=start - timedelta(minutes=1), start_time=start,
                 end_time=NOW - timedelta(minutes=2 + 10 * i), state="NODE_FAIL")
    for i in range(20):
        make_job(world.cluster, 7100 + i, world.users["carol"], world.team_b,
                 submit_time=start - timedelta(minutes=1), start_time=start,
                 end_time=NOW - timedelta(minutes=30))


@pytest.fixture
def people(world):
    for name in ("alice", "dave", "staff", "bob"):
        user = world.users[name]
        user.email = f"{name}@example.org"
        user.save()
    return world


def test_a_breach_is_told_once_to_the_lead_and_the_admins_with_a_link(people, hook):
    breaching(people)
    services.run_evaluation(NOW)
    card = Scorecard.objects.get(objective__name="Job success", team=people.team_a)
    assert card.status == "breached" and "page-1h" in card.alerts
    kinds = set(Alert.objects.values_list("kind", flat=True))
    assert kinds == {"breach", "fast_burn"}
    assert len(mail.outbox) == 2 and len(hook.bodies) == 2
    link = "http://127.0.0.1:8000" + reverse("slo-team", args=["nlp"])
    for message in mail.outbox:
        assert set(message.to) == {"alice@example.org", "staff@example.org"}  # not bob
        assert link in message.body and "NLP" in message.subject
    assert all(f"<{link}|scorecard>" in body["text"] for body in hook.bodies)
    # the next runs (the breach goes on) send nothing more
    services.run_evaluation(NOW + timedelta(minutes=15))
    services.run_evaluation(NOW + timedelta(minutes=30))
    assert len(mail.outbox) == 2 and len(hook.bodies) == 2
    assert Alert.objects.count() == 2 and not Alert.objects.filter(sent_at=None).exists()


def test_mattermost_gets_its_own_link_syntax_and_a_user_name(people, hook, settings):
    settings.SLO_WEBHOOK_FORMAT = "mattermost"
    breaching(people)
    services.run_evaluation(NOW)
    link = "http://127.0.0.1:8000" + reverse("slo-team", args=["nlp"])
    assert hook.bodies and all(f"[scorecard]({link})" in b["text"] and b["username"] == "Beacon"
                               for b in hook.bodies)


def test_a_failed_webhook_is_retried_alone_and_the_mail_is_not_sent_twice(people, hook):
    hook.status = 503
    breaching(people)
    services.run_evaluation(NOW)
    alert = Alert.objects.get(kind="breach")
    assert alert.sent_at is None and alert.channels == ["email"] and "webhook" in alert.error
    assert len(mail.outbox) == 2
    hook.status = 200
    services.run_evaluation(NOW + timedelta(minutes=15))
    alert.refresh_from_db()
    assert alert.sent_at is not None and alert.channels == ["email", "webhook"]
    assert len(mail.outbox) == 2 and len(hook.bodies) == 4  # 2 refused, then 2 delivered


def test_a_breach_that_ends_resolves_and_a_new_one_is_a_new_alert(people):
    breaching(people)
    services.run_evaluation(NOW)
    assert len(mail.outbox) == 2
    later = NOW + timedelta(days=29)  # the failures left the 28-day window
    for i in range(30):
        make_job(people.cluster, 7300 + i, people.users["bob"], people.team_a,
                 submit_time=later - timedelta(hours=2), start_time=later - timedelta(hours=2),
                 end_time=later - timedelta(hours=1))
    services.run_evaluation(later)
    assert not Alert.objects.filter(resolved_at=None).exists()
    assert len(mail.outbox) == 2  # a resolution is not announced
    for i in range(3):
        make_job(people.cluster, 7400 + i, people.users["bob"], people.team_a,
                 submit_time=later, start_time=later + timedelta(minutes=1),
                 end_time=later + timedelta(minutes=50 + i), state="NODE_FAIL")
    services.run_evaluation(later + timedelta(hours=1))
    assert Alert.objects.filter(kind="breach").count() == 2
    assert len(mail.outbox) == 4


def test_a_breach_hovering_at_its_target_does_not_page_again(people):
    card_filter = {"objective__name": "Job success", "team": people.team_a}
    breaching(people, failures=1)
    services.run_evaluation(NOW)
    assert Alert.objects.filter(kind="breach").count() == 1
    # the budget comes back a little (inside SLO_RESOLVE_MARGIN): still the same episode
    Scorecard.objects.filter(**card_filter).update(budget_remaining=0.02)
    notify.raise_alerts(NOW + timedelta(minutes=5))
    assert Alert.objects.filter(kind="breach", resolved_at=None).count() == 1
    services.run_evaluation(NOW + timedelta(minutes=10))
    assert Alert.objects.filter(kind="breach").count() == 1


def test_a_claimed_alert_is_left_to_the_worker_sending_it(people):
    breaching(people)
    services.run_evaluation(NOW, notify=False)
    notify.raise_alerts(NOW)
    sent = len(mail.outbox)
    alert = Alert.objects.get(kind="breach")
    Alert.objects.filter(pk=alert.pk).update(sent_at=None, channels=[],
                                             claimed_until=timezone.now() + timedelta(hours=1))
    assert notify.deliver(alert, timezone.now()) == 0
    assert len(mail.outbox) == sent


def test_a_second_open_alert_of_the_same_episode_cannot_exist(people):
    from django.db import IntegrityError, transaction

    breaching(people)
    services.run_evaluation(NOW)
    alert = Alert.objects.get(kind="breach")
    with pytest.raises(IntegrityError), transaction.atomic():
        Alert.objects.create(objective=alert.objective, subject=alert.subject, kind="breach",
                             opened_at=NOW, budget_remaining=-1)


def test_slos_that_do_not_notify_send_nothing(people):
    Objective.objects.update(notify=False)
    breaching(people)
    services.run_evaluation(NOW)
    assert not Alert.objects.exists() and mail.outbox == []


def test_with_no_channel_the_alert_is_recorded_as_sent_nowhere(world):
    breaching(world)
    services.run_evaluation(NOW)
    alert = Alert.objects.get(kind="breach")
    assert alert.sent_at is not None and alert.channels == [] and mail.outbox == []
