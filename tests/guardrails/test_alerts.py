"""Alerts on running jobs: raised once per job and kind, sent in plain words, rate-limited,
opted out of; the live view comes from the job page's own archive path."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.core import mail

from apps.accounts.models import Contact
from apps.analysis.timeseries import GpuKey
from apps.guardrails import services
from apps.guardrails.models import Alert, AlertPreference, Message, TeamAlertSetting
from apps.jobs.models import JobMetrics
from tests.conftest import make_job
from tests.guardrails.conftest import BUSY, HELD, IDLE, START, TimedSource, after, gpus


def half_idle(minutes: float = 30) -> TimedSource:
    """GPUs 0-1 busy throughout, 2-3 idle from ``minutes`` on."""
    return TimedSource(gpus(4), lambda key, t: BUSY if key.gpu < 2 else
                       after(minutes, IDLE)(key, t))


def check(job, source, hours: float):
    return services.run_checks(now=START + timedelta(hours=hours), source=source,
                               jobs=type(job).objects.filter(pk=job.pk))


def test_it_tells_the_owner_which_gpus_sat_idle_and_how_to_end_the_job(running):
    stats = check(running, half_idle(), 2)
    assert stats["alerts"] == 1 and stats["sent"]["messages"] == 1
    alert = Alert.objects.get(job=running)
    assert alert.kind == "gpus_idle" and alert.gpus == ["gpu01:2", "gpu01:3"]
    assert alert.status == Alert.Status.SENT
    [message] = mail.outbox
    assert message.to == ["bob@example.org"]
    assert "Job 555 (llm-train)" in message.subject and "GPUs idle" in message.subject
    body = message.body
    assert "2 of the job's 4 GPUs (gpu01:2, gpu01:3) did no work" in body
    assert "since 2026-11-20 06:3" in body  # the first idle sample after 30 minutes
    assert "scancel 555" in body and "/jobs/testcluster/555/" in body
    assert "What to check:" in body
    # the live snapshot the alert read is the job page's own
    assert JobMetrics.objects.get(job=running).status == JobMetrics.Status.LIVE


def test_it_raises_each_kind_once_however_often_it_looks(running):
    source = half_idle()
    check(running, source, 2)
    check(running, source, 2.5)
    check(running, source, 3)
    assert Alert.objects.filter(job=running).count() == 1
    assert len(mail.outbox) == 1


def test_a_busy_job_hears_nothing(running):
    stats = check(running, TimedSource(gpus(4), lambda k, t: BUSY), 3)
    assert stats["measured"] == 1 and stats["alerts"] == 0 and not mail.outbox


def test_not_idle_long_enough_yet(running):
    check(running, half_idle(minutes=90), 2)  # idle 30 min of the 60
    assert not Alert.objects.exists()


def test_memory_held_on_idle_gpus_is_its_own_alert_in_the_same_message(running):
    source = TimedSource(gpus(4), lambda key, t: BUSY if key.gpu < 2 else
                         after(30, HELD)(key, t))
    check(running, source, 2)
    assert set(Alert.objects.values_list("kind", flat=True)) == {"gpus_idle", "memory_held"}
    [message] = mail.outbox
    assert "17.6 GiB" in message.body or "17.5 GiB" in message.body


def test_an_opted_out_user_is_not_sent_but_the_alert_is_kept(running, world):
    AlertPreference.objects.create(user=world.users["bob"], alerts=False)
    check(running, half_idle(), 2)
    assert Alert.objects.get().status == Alert.Status.OPTED_OUT and not mail.outbox


def test_a_user_may_leave_out_one_kind(running, world):
    AlertPreference.objects.create(user=world.users["bob"], kinds_off=["gpus_idle"])
    source = TimedSource(gpus(4), lambda key, t: BUSY if key.gpu < 2 else
                         after(30, HELD)(key, t))
    check(running, source, 2)
    statuses = dict(Alert.objects.values_list("kind", "status"))
    assert statuses == {"gpus_idle": "opted_out", "memory_held": "sent"}


def test_the_team_default_applies_unless_the_user_chose(running, world):
    TeamAlertSetting.objects.create(team=world.team_a, alerts_default=False)
    check(running, half_idle(), 2)
    assert Alert.objects.get().status == Alert.Status.OPTED_OUT
    Alert.objects.all().delete()
    AlertPreference.objects.create(user=world.users["bob"], alerts=True)
    check(running, half_idle(), 2)
    assert Alert.objects.get().status == Alert.Status.SENT


def test_messages_are_rate_limited_per_user(running, world, settings):
    settings.GUARDRAILS_MAX_MESSAGES_PER_DAY = 1
    other = make_job(world.cluster, 556, world.users["bob"], world.team_a, state="RUNNING",
                     end_time=None, start_time=START, gpus=4, gpu_equivalent=4.0)
    check(running, half_idle(), 2)
    check(other, half_idle(), 2.5)
    assert len(mail.outbox) == 1
    assert Alert.objects.get(job=other).status == Alert.Status.PENDING
    # a day later the waiting alert goes out
    check(other, half_idle(), 26.5)
    assert len(mail.outbox) == 2 and "Job 556" in mail.outbox[1].subject


def test_an_alert_whose_job_ended_while_rate_limited_expires(running, world, settings):
    settings.GUARDRAILS_MAX_MESSAGES_PER_DAY = 1
    other = make_job(world.cluster, 557, world.users["bob"], world.team_a, state="RUNNING",
                     end_time=None, start_time=START, gpus=4, gpu_equivalent=4.0)
    check(running, half_idle(), 2)
    check(other, half_idle(), 2.5)
    other.state, other.end_time = "COMPLETED", START + timedelta(hours=3)
    other.save()
    from apps.guardrails.notify import deliver_pending

    deliver_pending(START + timedelta(hours=4))
    assert Alert.objects.get(job=other).status == Alert.Status.EXPIRED


def test_webhooks_of_the_user_and_the_team_are_posted(running, world):
    AlertPreference.objects.create(user=world.users["bob"], webhook_url="https://chat/u",
                                   webhook_format="mattermost")
    TeamAlertSetting.objects.create(team=world.team_a, webhook_url="https://chat/team")
    with mock.patch("apps.guardrails.notify.post_json") as post:
        check(running, half_idle(), 2)
    urls = [c.args[0] for c in post.call_args_list]
    assert urls == ["https://chat/u", "https://chat/team"]
    assert post.call_args_list[0].args[1]["username"] == "Beacon"
    assert Message.objects.get().channels == ["email", "mattermost", "slack"]


def test_a_failed_send_is_retried_next_time(running):
    with mock.patch("apps.guardrails.notify.send_mail", side_effect=OSError("smtp down")):
        check(running, half_idle(), 2)
    assert Alert.objects.get().status == Alert.Status.PENDING
    assert Message.objects.get().error.startswith("email: smtp down")
    check(running, half_idle(), 2.2)
    assert Alert.objects.get().status == Alert.Status.SENT and len(mail.outbox) == 1


def test_a_hardware_straggler_is_copied_to_the_hardware_contact(running, world):
    Contact.objects.create(area="hardware", name="HW on-call", email="hw@example.org",
                           cluster=world.cluster)
    Alert.objects.create(job=running, kind="straggler", gpus=["gpu01:3"], since=START,
                         raised_at=START, hardware=True, text="GPU gpu01:3 is slower",
                         detail={"evidence": ["89 °C"]})
    from apps.guardrails.notify import deliver_pending

    deliver_pending(START + timedelta(hours=1))
    assert sorted(m.to[0] for m in mail.outbox) == ["bob@example.org", "hw@example.org"]
    copy = next(m for m in mail.outbox if m.to == ["hw@example.org"])
    assert "Hardware: GPU gpu01:3" in copy.subject and "89 °C" in copy.body


def test_a_straggler_named_by_the_live_verdict_is_raised(running):
    """The peers spin in NCCL (busy by utilisation, low SM activity) while gpu01:3 computes
    hot and slow: the archive's straggler verdict names it, and the owner hears of it."""
    slow = {**BUSY, "sm_active": 0.85}
    waiting = {**BUSY, "sm_active": 0.4, "tensor_active": 0.2}
    source = TimedSource(gpus(4), lambda key, t: slow if key.gpu == 3 else waiting)
    check(running, source, 2)
    metrics = JobMetrics.objects.get(job=running)
    named = [s["gpu"] for s in metrics.straggler_detail.get("stragglers", [])]
    assert named == ["gpu01:3"]
    alert = Alert.objects.get(job=running)
    assert alert.kind == "straggler" and alert.gpus == ["gpu01:3"]
    assert not alert.hardware  # no hardware sign: the owner only, with the code advice
    assert "uneven work per rank" in mail.outbox[0].body


def test_unreadable_telemetry_is_counted_not_fatal(running):
    from apps.core.errors import TransientAdapterError

    class Down:
        name = "prometheus"

        def fetch(self, *a):
            raise TransientAdapterError("prometheus down", service="prometheus")

    stats = check(running, Down(), 2)
    assert stats["errors"] == 1 and stats["jobs"] == 1 and not Alert.objects.exists()


@pytest.mark.parametrize("partition, alerted", [("gpu", True), ("interactive", False)])
def test_interactive_partitions_wait_longer(running, partition, alerted):
    running.partition = partition
    running.save()
    source = TimedSource(gpus(4), lambda key, t: after(30, IDLE)(key, t))
    check(running, source, 3)  # idle 2.5 h: over 60 min, under the interactive 240
    assert Alert.objects.filter(kind="gpus_idle").exists() == alerted


# GPUs busy waiting (low SM activity), 6.8 GB/s each into them over PCIe, on two nodes
WIRE = {**BUSY, "gpu_util": 0.87, "sm_active": 0.19, "tensor_active": 0.09, "pcie_rx": 6.8e9}


@pytest.mark.parametrize(("ib_rx", "stalled"), [
    (2 * 6.8e9, False),  # the InfiniBand ports received it all: GPUDirect collectives
    (2e9, True),  # most of it came from host memory: the owner hears of an input stall
])
def test_an_input_stall_alert_needs_copies_the_network_does_not_explain(world, ib_rx, stalled):
    world.users["bob"].email = "bob@example.org"
    world.users["bob"].save()
    job = make_job(world.cluster, 556, world.users["bob"], world.team_a, state="RUNNING",
                   end_time=None, start_time=START, submit_time=START, nodes="gpu[01-02]",
                   node_count=2, gpus=4, gpu_equivalent=4.0)
    keys = [GpuKey(host, i) for host in ("gpu01", "gpu02") for i in range(2)]
    node = {"ib_rx": ib_rx, "cpu_busy": 0.2}
    source = TimedSource(keys, lambda key, t: WIRE, nodes={"gpu01": node, "gpu02": node})
    check(job, source, 2)
    assert Alert.objects.filter(job=job, kind="input_stall").exists() is stalled


@pytest.mark.parametrize(("throttle", "hardware"), [
    (0x4, False),  # the software power limit: the busiest GPU reaches it, the owner's alone
    (0x88, True),  # a hardware slowdown with the power brake: the device's
])
def test_only_a_throttle_reason_of_the_device_copies_the_hardware_contact(running, world,
                                                                         throttle, hardware):
    Contact.objects.create(area="hardware", name="HW on-call", email="hw@example.org",
                           cluster=world.cluster)
    slow = {**BUSY, "sm_active": 0.85, "throttle_reasons": float(throttle)}
    waiting = {**BUSY, "sm_active": 0.4, "tensor_active": 0.2, "throttle_reasons": 0.0}
    check(running, TimedSource(gpus(4), lambda key, t: slow if key.gpu == 3 else waiting), 2)
    alert = Alert.objects.get(job=running, kind="straggler")
    assert alert.hardware is hardware
    assert ("hw@example.org" in [m.to[0] for m in mail.outbox]) is hardware
    if not hardware:
        assert "the slowest stage" in mail.outbox[0].body
