"""After ``load_demo``, researchers see what the guardrails would have told them during the
simulated month: their own alerts on "My alerts" (not another team's), the job page's
guardrails section, the idle-job policy's dry-run steps and the right-sizing digest, each
marked simulated; loading again stores nothing new."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse
from django.utils.html import escape

from apps.audit.models import AuditEvent
from apps.demo import loader as demo
from apps.guardrails.models import Alert, Digest, Message, PolicyAction

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 nodes x 2 days ending on a Monday: the digest covers the simulated week."""
    out = tmp_path_factory.mktemp("gdemo")
    call_command("simulate", out=str(out), nodes=4, days=2, seed=1, now="2026-11-30T00:00:00Z",
                 telemetry_step=900, cluster="gdemo", stdout=io.StringIO())
    return out


@pytest.fixture
def loaded(folder: Path) -> demo.LoadResult:
    return demo.load(folder)


def _rows() -> tuple[int, ...]:
    return (Alert.objects.count(), PolicyAction.objects.count(), Digest.objects.count(),
            Message.objects.count(), AuditEvent.objects.filter(action="guardrail").count())


def _job_url(alert: Alert) -> str:
    return reverse("jobs-detail", args=[alert.job.cluster.name, alert.job.job_id])


def test_a_researcher_sees_their_own_simulated_alerts_and_not_another_teams(loaded, client):
    stage = loaded.stages["guardrails"]
    assert stage["alerts"] == Alert.objects.count() > 0
    assert set(Alert.objects.values_list("status", flat=True)) == {Alert.Status.SIMULATED}
    alert = Alert.objects.select_related("job__user", "job__cluster").filter(
        job__user__is_staff=False).first()
    assert alert is not None
    owner = alert.job.user
    other = Alert.objects.select_related("job__cluster").exclude(job__team=alert.job.team).first()
    assert other is not None, "the small month has alerts on two teams' jobs"
    client.force_login(owner)
    page = client.get(reverse("guardrails-alerts"))
    assert page.status_code == 200
    html = page.content.decode()
    assert _job_url(alert) in html and alert.get_kind_display() in html
    assert "simulated" in html and "Nothing was sent" in html
    assert _job_url(other) not in html
    job_page = client.get(_job_url(alert))
    assert job_page.status_code == 200
    assert 'id="guardrails"' in job_page.content.decode()
    assert escape(alert.text) in job_page.content.decode()


def test_the_policy_dry_run_and_the_digest_are_shown_marked_simulated(loaded, client):
    steps = PolicyAction.objects.select_related("job__user", "job__cluster")
    assert loaded.stages["guardrails"]["policy_steps"] == steps.count() > 0
    assert all(s.dry_run and s.detail.get("simulated") for s in steps)
    events = AuditEvent.objects.filter(action="guardrail")
    assert events.count() == steps.count()
    assert all(e.details["simulated"] and e.details["dry_run"] for e in events)
    step = steps.first()
    assert step is not None and step.job.user is not None
    client.force_login(step.job.user)
    html = client.get(reverse("jobs-detail", args=[step.job.cluster.name, step.job.job_id])) \
        .content.decode()
    assert step.get_action_display() in html and "dry run" in html
    assert "replayed as a dry run on the simulated cluster: nothing was cancelled" in html
    digest = Message.objects.filter(kind=Message.Kind.DIGEST).select_related("user").first()
    assert digest is not None and digest.simulated and digest.channels == []
    assert Digest.objects.filter(user=digest.user, message=digest).exists()
    client.force_login(digest.user)
    page = client.get(reverse("guardrails-alerts")).content.decode()
    assert "Latest right-sizing digest" in page and "#SBATCH" in page
    assert "written for the demo's simulated cluster, not sent" in page


def test_a_lead_and_an_admin_see_the_pages(loaded, client):
    for name, scope in (("admin", "team"), ("alice", "team"), ("alice", "mine")):
        client.force_login(User.objects.get(username=name))
        assert client.get(reverse("guardrails-alerts"), {"scope": scope}).status_code == 200


def test_loading_again_stores_nothing_new(loaded, folder):
    before = _rows()
    again = demo.load(folder)
    assert again.stages["guardrails"]["alerts"] == 0
    assert again.stages["guardrails"]["policy_steps"] == 0
    assert _rows() == before
    # jobs with everything they were picked for stored are not replayed again
    assert again.stages["guardrails"]["jobs"] < loaded.stages["guardrails"]["jobs"]
