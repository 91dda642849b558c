"""Every alert has an address or a reason (issue 28): the Slurm user -> person mapping,
what ``check_guardrails`` says about alerts nobody received, and the Platform page's list."""

from __future__ import annotations

import io
import json
from datetime import timedelta

import pytest
from django.core import mail
from django.core.management import call_command
from django.utils import timezone

from apps.guardrails.models import Alert, Message
from apps.guardrails.notify import deliver_pending
from apps.jobs.models import Job
from tests.conftest import make_job
from tests.guardrails.conftest import START

NOW = START + timedelta(hours=2)


def alert_for(world, job_id: int, slurm_user: str, user=None, kind: str = "gpus_idle") -> Alert:
    job = make_job(world.cluster, job_id, user, world.team_a, user_name=slurm_user,
                   state=Job.State.RUNNING, end_time=None, start_time=START,
                   submit_time=START - timedelta(minutes=5))
    return Alert.objects.create(job=job, kind=kind, gpus=["gpu01:0"], since=START,
                                raised_at=START + timedelta(hours=1), text="GPUs idle")


def test_a_slurm_user_without_a_portal_user_is_told_by_the_domain_rule(world, settings):
    settings.EMAIL_DOMAIN = "example.org"
    alert_for(world, 700, "zoe")
    alert_for(world, 701, "zoe", kind="memory_held")
    alert_for(world, 702, "yan")
    stats = deliver_pending(NOW)
    assert stats["messages"] == 2 and stats["no_address"] == 0
    assert sorted(m.to for m in mail.outbox) == [["yan@example.org"], ["zoe@example.org"]]
    assert set(Alert.objects.values_list("status", flat=True)) == {Alert.Status.SENT}


def test_a_portal_user_without_an_address_falls_back_to_the_domain_rule(world, settings):
    settings.EMAIL_DOMAIN = "example.org"
    bob = world.users["bob"]
    bob.email = ""
    bob.save()
    alert_for(world, 703, "bob", user=bob)
    deliver_pending(NOW)
    assert [m.to for m in mail.outbox] == [["bob@example.org"]]
    bob.email = "bob@lab.example"  # the account's own address wins when there is one
    bob.save()
    alert_for(world, 704, "bob", user=bob)
    deliver_pending(NOW)
    assert mail.outbox[-1].to == ["bob@lab.example"]


def test_without_an_address_the_alert_keeps_the_reason(world, settings):
    settings.EMAIL_DOMAIN = ""
    alert_for(world, 705, "zoe")
    stats = deliver_pending(NOW)
    assert stats["no_address"] == 1 and not mail.outbox
    assert stats["no_address_users"] == {"zoe": "Slurm user 'zoe' matches no portal user, and "
                                                "no e-mail domain rule is set "
                                                "(BEACON_EMAIL_DOMAIN)"}
    alert = Alert.objects.get()
    assert alert.status == Alert.Status.NO_ADDRESS
    assert "matches no portal user" in alert.detail["no_address"]


def test_unmatched_slurm_users_are_rate_limited_by_their_address(world, settings):
    settings.EMAIL_DOMAIN = "example.org"
    settings.GUARDRAILS_MAX_MESSAGES_PER_DAY = 1
    alert_for(world, 706, "zoe")
    deliver_pending(NOW)
    alert_for(world, 707, "zoe")
    alert_for(world, 708, "yan")  # another person: not held back by zoe's limit
    stats = deliver_pending(NOW + timedelta(minutes=10))
    assert stats["rate_limited"] == 1 and stats["messages"] == 1
    assert Message.objects.filter(to=["zoe@example.org"]).count() == 1


def test_check_guardrails_says_how_many_alerts_had_no_address_and_for_whom(world, settings):
    settings.EMAIL_DOMAIN = ""
    for job_id in (710, 711, 712):
        alert_for(world, job_id, "zoe")
    alert_for(world, 713, "yan")
    out, err = io.StringIO(), io.StringIO()
    call_command("check_guardrails", stdout=out, stderr=err)
    sent = json.loads(out.getvalue())["sent"]
    assert sent["messages"] == 0 and sent["no_address"] == 4
    assert sorted(sent["no_address_users"]) == ["yan", "zoe"]
    said = err.getvalue()
    assert "4 alert(s) had no address, for 2 Slurm user(s)" in said
    assert "  yan: Slurm user 'yan' matches no portal user" in said
    assert "  zoe: Slurm user 'zoe' matches no portal user" in said
    assert "BEACON_EMAIL_DOMAIN" in said


def test_check_guardrails_is_quiet_when_everyone_was_reached(world, settings):
    settings.EMAIL_DOMAIN = "example.org"
    alert_for(world, 714, "zoe")
    err = io.StringIO()
    call_command("check_guardrails", stdout=io.StringIO(), stderr=err)
    assert err.getvalue() == ""


@pytest.mark.parametrize(("persona", "listed"), [("staff", True), ("alice", False)])
def test_the_platform_page_lists_the_slurm_users_nobody_could_tell(world, login, settings,
                                                                   persona, listed):
    settings.EMAIL_DOMAIN = ""
    alert_for(world, 715, "zoe")
    alert_for(world, 716, "zoe", kind="memory_held")
    deliver_pending(NOW)
    Alert.objects.update(raised_at=timezone.now())  # within the page's 30 days
    page = login(persona).get("/platform/")
    if not listed:
        assert page.status_code in (403, 404)
        return
    html = page.content.decode()
    assert "Alerts nobody received" in html
    assert "<td>zoe</td><td class=\"num\">2</td>" in html
    assert "matches no portal user" in html


def test_the_platform_page_has_no_such_card_when_every_alert_was_received(world, login):
    assert "Alerts nobody received" not in login("staff").get("/platform/").content.decode()


def test_a_malformed_domain_is_a_system_check_error(settings):
    from apps.core.checks import check_email_domain

    settings.EMAIL_DOMAIN = "example..org"
    [error] = check_email_domain()
    assert error.id == "core.E004"
    settings.EMAIL_DOMAIN = "example.org"
    assert check_email_domain() == []


def test_policy_notices_follow_the_same_mapping(world, settings):
    from apps.guardrails.notify import send_notice

    settings.EMAIL_DOMAIN = "example.org"
    job = alert_for(world, 717, "zoe").job
    message = send_notice(Message.Kind.POLICY, None, "Idle job", "It will be cancelled", NOW,
                          jobs=[job])
    assert message is not None and message.to == ["zoe@example.org"]
    settings.EMAIL_DOMAIN = ""
    assert send_notice(Message.Kind.POLICY, None, "Idle job", "…", NOW, jobs=[job]) is None
