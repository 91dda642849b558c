"""The idle-job policy: off by default; dry-run records only; enforce warns, waits out the
grace period and cancels through the Slurm backend; exemptions; every step audited."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.core import mail

from apps.audit.models import AuditEvent
from apps.clusters.adapters.slurm import Action
from apps.core.errors import AdapterError
from apps.guardrails import services
from apps.guardrails.models import Exemption, PolicyAction
from tests.fake import FakeSlurm
from tests.guardrails.conftest import BUSY, IDLE, START, TimedSource, after, gpus

IDLE_FROM_30 = TimedSource(gpus(4), lambda key, t: after(30, IDLE)(key, t))


@pytest.fixture
def slurm():
    fake = FakeSlurm()
    with mock.patch("apps.clusters.services.client_for", return_value=fake):
        yield fake


@pytest.fixture
def enforce(settings):
    settings.GUARDRAILS_POLICY = "enforce"
    settings.GUARDRAILS_POLICY_IDLE_MINUTES = 120
    settings.GUARDRAILS_POLICY_GRACE_MINUTES = 60


def check(job, hours: float, source=IDLE_FROM_30):
    return services.run_checks(now=START + timedelta(hours=hours), source=source,
                               jobs=type(job).objects.filter(pk=job.pk))


def steps(job) -> list[tuple[str, bool]]:
    return list(PolicyAction.objects.filter(job=job).order_by("at", "pk")
                .values_list("action", "dry_run"))


def test_it_is_off_by_default(running, slurm):
    for hours in (3, 4, 5):
        check(running, hours)
    assert steps(running) == [] and "cancel_job" not in slurm.call_names()


def test_an_idle_job_is_warned_then_cancelled_after_the_grace_period(running, slurm, enforce):
    check(running, 2)  # idle 1.5 h: under the 2 h
    assert steps(running) == []
    check(running, 2.6)  # idle 2.1 h: warned, cancelled at 3.6 h unless busy again
    assert steps(running) == [("warned", False)]
    warning = PolicyAction.objects.get(job=running)
    assert warning.cancel_at == START + timedelta(hours=3.6)
    notice = next(m for m in mail.outbox if "will be cancelled" in m.subject)
    assert "2026-11-20 09:36 UTC" in notice.subject and "scancel 555" in notice.body
    check(running, 3.2)  # within the grace period
    assert steps(running) == [("warned", False)]
    check(running, 3.7)
    assert steps(running) == [("warned", False), ("cancelled", False)]
    assert slurm.calls[-1] == ("cancel_job", 555)
    assert any("was cancelled" in m.subject for m in mail.outbox)
    audited = list(AuditEvent.objects.filter(action="guardrail").order_by("at", "pk")
                   .values_list("details__action", flat=True))
    assert audited == ["warned", "cancelled"]
    check(running, 4.5)  # already cancelled: nothing more
    assert len(steps(running)) == 2 and slurm.call_names().count("cancel_job") == 1


def test_a_busy_job_is_never_warned(running, slurm, enforce):
    busy = TimedSource(gpus(4), lambda key, t: BUSY)
    for hours in (3, 5, 8):
        check(running, hours, busy)
    assert steps(running) == []


def test_a_job_with_one_busy_gpu_is_not_idle(running, slurm, enforce):
    source = TimedSource(gpus(4), lambda key, t: BUSY if key.gpu == 0 else
                         after(30, IDLE)(key, t))
    check(running, 5, source)
    assert steps(running) == []


def test_work_again_withdraws_the_warning(running, slurm, enforce):
    check(running, 2.6)
    back = TimedSource(gpus(4), lambda key, t: BUSY if t > (START + timedelta(hours=2.8))
                       .timestamp() else after(30, IDLE)(key, t))
    check(running, 3.7, back)
    assert steps(running) == [("warned", False), ("cleared", False)]
    assert "cancel_job" not in slurm.call_names()


@pytest.mark.parametrize("kind, value", [("user", "bob"), ("partition", "gpu"),
                                         ("account", "nlp"), ("job", "555")])
def test_an_exempt_job_is_left_alone(running, slurm, enforce, kind, value):
    Exemption.objects.create(kind=kind, value=value, reason="service")
    for hours in (3, 5):
        check(running, hours)
    assert steps(running) == [("exempt", False)]  # said once
    assert "cancel_job" not in slurm.call_names()


def test_dry_run_records_what_it_would_do_and_does_nothing(running, slurm, settings):
    settings.GUARDRAILS_POLICY = "dry-run"
    for hours in (2.6, 3.7, 5):
        check(running, hours)
    assert steps(running) == [("warned", True), ("cancelled", True)]
    assert "cancel_job" not in slurm.call_names()
    assert not [m for m in mail.outbox if "cancel" in m.subject]
    assert AuditEvent.objects.filter(action="guardrail", details__dry_run=True).count() == 2


def test_a_backend_that_cannot_cancel_is_a_recorded_failure(running, slurm, enforce):
    slurm.unable[Action.CANCEL] = "the files backend reads saved Slurm output: it cannot cancel"
    check(running, 2.6)
    check(running, 3.7)
    failed = PolicyAction.objects.get(job=running, action="cancel_failed")
    assert "cannot cancel" in failed.detail["error"]


def test_a_refused_cancel_is_retried_next_time(running, slurm, enforce):
    slurm.cancel_fail = AdapterError("scancel failed: permission denied", service="slurm")
    check(running, 2.6)
    check(running, 3.7)
    slurm.cancel_fail = None
    check(running, 3.9)
    assert [a for a, _ in steps(running)] == ["warned", "cancel_failed", "cancelled"]


def test_the_job_page_shows_the_steps_and_lets_an_admin_grant_an_opt_out(running, slurm, enforce,
                                                                         login, world):
    check(running, 2.6)
    page = login("bob").get("/jobs/testcluster/555/")
    assert b"Idle-job policy: enforce" in page.content and b"Warned" in page.content
    assert b"Grant" not in page.content
    staff = login("staff")
    assert b"Grant" in staff.get("/jobs/testcluster/555/").content
    answer = staff.post("/guardrails/jobs/testcluster/555/exempt/", {"reason": "demo at 3pm"})
    assert answer.status_code == 303
    assert Exemption.objects.get(kind="job", value="555").granted_by == world.users["staff"]
    assert AuditEvent.objects.filter(action="guardrail", details__action="exemption granted") \
        .exists()
    check(running, 3.7)
    assert [a for a, _ in steps(running)] == ["warned", "exempt"]


def test_on_an_interactive_partition_the_policy_waits_for_the_alert_first(running, slurm,
                                                                         enforce):
    running.partition = "interactive"
    running.save()
    check(running, 2.6)  # idle 2.1 h: over the policy's 2 h, under the notebooks' 4 h
    assert steps(running) == []
    check(running, 4.6)  # idle 4.1 h: the alert and the warning together
    assert steps(running) == [("warned", False)]
