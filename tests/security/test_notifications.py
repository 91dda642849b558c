"""Critical findings go out at once, the rest in one deduplicated digest; e-mail through
Django's mail, the webhook to a real local HTTP server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core import mail

from apps.core.errors import AdapterError, TransientAdapterError
from apps.core.webhooks import post_json
from apps.security import notify
from apps.security.findings import record_hits
from apps.security.models import Finding
from tests.security.conftest import T, hit

pytestmark = pytest.mark.django_db


class Hook:
    """A webhook receiver on 127.0.0.1 answering ``status`` and keeping what it got."""

    def __init__(self, status: int = 200) -> None:
        received: list[dict] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook(settings):
    settings.WEBHOOK_ALLOW = ["127.0.0.1"]  # a loopback receiver: allowed by name (issue 27)
    server = Hook()
    yield server
    server.close()


def test_a_critical_finding_is_sent_at_once(world, settings, hook,
                                            django_capture_on_commit_callbacks):
    from apps.security.detection import RunReport  # noqa: F401  (import check only)
    from apps.security.tasks import notify_findings

    settings.SECURITY_NOTIFY_EMAILS = ["soc@example.org"]
    settings.SECURITY_WEBHOOK_URL = hook.url
    result = record_hits(world.cluster, [hit(severity="critical", title="miner on gpu01")])
    with django_capture_on_commit_callbacks(execute=True):
        notify_findings.delay_on_commit(result.notify_now)
    [message] = mail.outbox
    assert "miner on gpu01" in message.subject and message.to == ["soc@example.org"]
    assert "/security/findings/" in message.body and "mean_util" not in message.body
    [payload] = hook.received
    assert payload["kind"] == "critical" and payload["findings"][0]["title"] == "miner on gpu01"
    finding = Finding.objects.get()
    assert finding.notified_at and finding.events.filter(action="notified").exists()


def test_the_digest_lists_each_pending_finding_once(world, settings, hook):
    settings.SECURITY_NOTIFY_EMAILS = ["soc@example.org"]
    settings.SECURITY_WEBHOOK_URL = hook.url
    record_hits(world.cluster, [hit(dedup="a", severity="medium", start=T, end=T + 900),
                                hit(dedup="b", severity="high")])
    record_hits(world.cluster, [hit(dedup="a", severity="medium", start=T + 9000,
                                    end=T + 9900)])  # seen again: still one entry
    assert notify.send_digest() == 2
    [message] = mail.outbox
    assert message.body.count("\n") == 1 and "[high]" in message.body.splitlines()[0]
    assert len(hook.received[0]["findings"]) == 2
    assert notify.send_digest() == 0 and len(mail.outbox) == 1


def test_nothing_is_sent_when_no_channel_is_configured(world, settings):
    settings.SECURITY_NOTIFY_EMAILS = []
    settings.SECURITY_WEBHOOK_URL = ""
    record_hits(world.cluster, [hit(severity="medium")])
    assert notify.send_digest() == 1 and mail.outbox == []
    assert Finding.objects.get().events.last().reason == "no channel configured"


@pytest.mark.parametrize(("status", "error"), [(500, TransientAdapterError),
                                               (429, TransientAdapterError),
                                               (404, AdapterError)])
def test_webhook_failures_say_whether_a_retry_can_help(status, error, settings):
    settings.WEBHOOK_ALLOW = ["127.0.0.1"]
    server = Hook(status)
    try:
        with pytest.raises(error) as caught:
            post_json(server.url, {"x": 1}, timeout=5)
        assert (type(caught.value) is error) and str(status) in str(caught.value)
    finally:
        server.close()


def test_an_unreachable_or_misconfigured_webhook(settings):
    settings.WEBHOOK_ALLOW = ["127.0.0.1"]
    with pytest.raises(TransientAdapterError):
        post_json("http://127.0.0.1:9/hook", {"x": 1}, timeout=2)
    with pytest.raises(AdapterError, match=r"not a valid http\(s\) URL"):
        post_json("file:///etc/passwd", {"x": 1}, timeout=2)


@pytest.mark.django_db(transaction=True)  # no outer transaction: the task runs at once
def test_a_mail_server_that_is_down_does_not_fail_the_detection(world, settings, tmp_path):
    from datetime import timedelta

    from apps.security.detection import Sources, detect
    from apps.security.ingest import ingest_probes

    settings.SECURITY_NOTIFY_EMAILS = ["soc@example.org"]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 9, 2
    ingest_probes(world.cluster, {"collected_at": T, "probes": [
        {"node": "gpu01", "port": 8265, "service": "ray-dashboard", "status": 200,
         "auth_required": False, "job_id": 101, "user": "bob"}]})
    since = Finding._meta.get_field("first_seen").to_python("2026-11-02T08:00:00Z")
    report = detect(world.cluster, since, since + timedelta(hours=2), Sources())
    assert any(s.startswith("notification failed, left for the digest") for s in
               report.skipped)
    finding = Finding.objects.get(rule_key="exposed_service")
    assert finding.severity == "critical" and finding.notify_pending
