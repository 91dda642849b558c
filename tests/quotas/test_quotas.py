"""Quota services: preview, apply (Slurm refusals, Slurm down, concurrent edits), scheduled
quotas, drift, usage and forecast, deduplicated warnings."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core import mail

from apps.audit.models import AuditEvent
from apps.clusters.models import Node, SlurmAssociation
from apps.core.errors import AdapterError, TransientAdapterError
from apps.jobs.models import Job
from apps.quotas import services
from apps.quotas.models import Quota, QuotaAlert, QuotaChange
from tests.conftest import T0
from tests.quotas.conftest import shares

NOV, DEC = date(2026, 11, 1), date(2026, 12, 1)
NOW = datetime(2026, 11, 20, 12, tzinfo=UTC)


def _apply(nlp, slurm, user, hours="100", seen=None, version=0, month=NOV, now=NOW,
           reason="Q4 budget"):
    """What the page does: GPU-hours (typed, parsed by the form) -> GPU-minutes -> apply."""
    minutes = services.quota_minutes(nlp, month, Decimal(hours) if hours else None)
    return services.apply(nlp, month, minutes, seen, version, reason, user, client=slurm,
                          now=now)


def _writes(slurm) -> list[tuple]:
    return [arg for name, arg in slurm.calls if name == "set_account_limit" and not arg[3]]


def test_a_preview_rehearses_the_exact_change_and_writes_nothing(world, slurm, nlp):
    p = services.preview(nlp, NOV, 6000, client=slurm, now=NOW)
    assert (p.old_minutes, p.new_minutes, p.version, p.scheduled) == (None, 6000, 0, False)
    assert p.command.endswith("GrpTRESMins=gres/gpu=6000") and "Modified" in p.slurm_output
    assert _writes(slurm) == [] and slurm.account_limits("nlp").grp_tres_mins == {}
    assert not Quota.objects.exists()


def test_applying_writes_slurm_reads_it_back_and_records_who_what_why(world, slurm, nlp):
    quota = _apply(nlp, slurm, world.users["staff"])
    assert (quota.gpu_minutes, quota.state, quota.version) == (6000, "applied", 1)
    assert slurm.account_limits("nlp").grp_tres_mins == {"gres/gpu": 6000}
    change = QuotaChange.objects.get()
    assert (change.kind, change.actor.username, change.old_minutes, change.new_minutes,
            change.reason) == ("set", "staff", None, 6000, "Q4 budget")
    assert "GrpTRESMins=gres/gpu=6000" in change.command
    event = AuditEvent.objects.get(action="quota")
    assert event.username == "staff" and event.details["new"] == 6000


@pytest.mark.parametrize(("hours", "reason", "message"), [
    ("-5", "x", "cannot be negative"),
    ("99999999999", "x", "absurd"),
    ("1.001", "x", "whole number of GPU-minutes"),
    ("100", "   ", "say why"),
])
def test_bad_values_are_refused_before_slurm_is_asked(world, slurm, nlp, hours, reason, message):
    Node.objects.filter(cluster=world.cluster).update(gpu_count=8)  # ceiling: 8 GPUs x 10
    with pytest.raises(services.QuotaError, match=message):
        _apply(nlp, slurm, world.users["staff"], hours=hours, reason=reason)
    assert slurm.calls == [] and not Quota.objects.exists()


@pytest.mark.parametrize("error", [
    AdapterError("Slurm changed nothing:  Nothing modified", service="slurm"),
    TransientAdapterError("sacctmgr: error: Problem talking to the database", service="slurm"),
])
def test_a_refused_write_or_slurm_down_records_nothing_as_applied(world, slurm, nlp, error):
    slurm.limit_fail = error
    with pytest.raises(AdapterError):
        _apply(nlp, slurm, world.users["staff"])
    assert not Quota.objects.exists()
    failed = QuotaChange.objects.get()
    assert failed.kind == "failed" and str(error) in failed.error


def test_a_failed_change_leaves_the_quota_in_force_untouched(world, slurm, nlp):
    _apply(nlp, slurm, world.users["staff"])
    slurm.limit_fail = TransientAdapterError("slurmdbd: Connection refused", service="slurm")
    with pytest.raises(TransientAdapterError):
        _apply(nlp, slurm, world.users["staff"], hours="200", seen=6000, version=1)
    quota = Quota.objects.get()
    assert (quota.gpu_minutes, quota.version) == (6000, 1)


def test_the_last_write_wins_only_if_it_saw_the_current_value(world, slurm, nlp):
    seen_by_both = services.preview(nlp, NOV, 6000, client=slurm, now=NOW)
    _apply(nlp, slurm, world.users["staff"], hours="100", seen=seen_by_both.old_minutes,
           version=seen_by_both.version)
    with pytest.raises(services.QuotaConflict, match="staff changed this quota to 100 GPU-hours"):
        _apply(nlp, slurm, world.users["alice"], hours="300", seen=seen_by_both.old_minutes,
               version=seen_by_both.version)
    assert slurm.account_limits("nlp").grp_tres_mins == {"gres/gpu": 6000}
    assert len(_writes(slurm)) == 1
    assert QuotaChange.objects.filter(kind="conflict").count() == 1


def test_a_value_changed_in_slurm_since_the_preview_is_a_conflict(world, slurm, nlp):
    seen = services.preview(nlp, NOV, 6000, client=slurm, now=NOW)
    slurm.set_account_limit("nlp", "gres/gpu", 1234)  # someone ran sacctmgr meanwhile
    with pytest.raises(services.QuotaConflict, match=r"Slurm holds 20\.5667 GPU-hours now"):
        _apply(nlp, slurm, world.users["staff"], seen=seen.old_minutes, version=seen.version)
    assert slurm.account_limits("nlp").grp_tres_mins == {"gres/gpu": 1234}
    assert not Quota.objects.exists()


def test_removing_a_quota_writes_minus_one(world, slurm, nlp):
    _apply(nlp, slurm, world.users["staff"])
    quota = _apply(nlp, slurm, world.users["staff"], hours="", seen=6000, version=1)
    assert quota.gpu_minutes is None and slurm.account_limits("nlp").grp_tres_mins == {}


def test_a_quota_for_a_later_month_is_written_when_that_month_begins(world, slurm, nlp):
    quota = _apply(nlp, slurm, world.users["staff"], month=DEC)
    assert quota.state == "scheduled" and _writes(slurm) == []
    assert services.apply_due(world.cluster, slurm, NOW) == 0
    slurm.limit_fail = TransientAdapterError("down", service="slurm")
    assert services.apply_due(world.cluster, slurm, datetime(2026, 12, 1, 0, 5, tzinfo=UTC)) == 0
    assert Quota.objects.get().state == "scheduled"  # kept for the next pass
    slurm.limit_fail = None
    assert services.apply_due(world.cluster, slurm, datetime(2026, 12, 1, 0, 15, tzinfo=UTC)) == 1
    assert Quota.objects.get().state == "applied"
    assert slurm.account_limits("nlp").grp_tres_mins == {"gres/gpu": 6000}
    assert list(QuotaChange.objects.order_by("at", "id").values_list("kind", flat=True)) == [
        "scheduled", "failed", "applied"]


def _limit(slurm) -> int | None:
    return slurm.account_limits("nlp").grp_tres_mins.get("gres/gpu")


def _set_in_slurm(minutes: int):
    def race(fake) -> None:  # another writer, or Slurm capping the value
        row = fake.account_limits("nlp")
        fake.assocs[fake.assocs.index(row)] = replace(row, grp_tres_mins={"gres/gpu": minutes})
    return race


DEC1 = datetime(2026, 12, 1, 0, 5, tzinfo=UTC)


def test_a_scheduled_quota_is_applied_only_once_slurm_reads_back_its_value(world, slurm, nlp):
    before = _limit(slurm)
    _apply(nlp, slurm, world.users["staff"], month=DEC)
    slurm.after_write = _set_in_slurm(1234)
    assert services.apply_due(world.cluster, slurm, DEC1) == 0
    quota = Quota.objects.get()
    assert quota.state == "scheduled" and quota.applied_at is None
    failed = QuotaChange.objects.get(kind="failed")
    assert "Slurm reports 20.5667 GPU-hours after writing 100 GPU-hours" in failed.error
    assert "previous value" in failed.error and "was put back" in failed.error
    assert _limit(slurm) == before and failed.old_minutes == before
    assert services.apply_due(world.cluster, slurm, DEC1) == 1  # the next pass
    assert (Quota.objects.get().state, _limit(slurm)) == ("applied", 6000)


def test_slurm_down_after_taking_a_scheduled_write_gets_its_old_value_back(world, slurm, nlp):
    before = _limit(slurm)
    _apply(nlp, slurm, world.users["staff"], month=DEC)
    slurm.read_fail_after_write = TransientAdapterError("slurmctld not responding",
                                                        service="slurm")
    assert services.apply_due(world.cluster, slurm, DEC1) == 0
    assert Quota.objects.get().state == "scheduled" and _limit(slurm) == before
    error = QuotaChange.objects.get(kind="failed").error
    assert error.startswith("slurmctld not responding") and "was put back" in error


def test_slurm_down_after_taking_a_write_is_undone_and_nothing_applied(world, slurm, nlp):
    before = _limit(slurm)
    slurm.read_fail_after_write = TransientAdapterError("slurmctld not responding",
                                                        service="slurm")
    with pytest.raises(TransientAdapterError, match="was put back"):
        _apply(nlp, slurm, world.users["staff"])
    assert not Quota.objects.filter(state="applied").exists() and _limit(slurm) == before
    assert [w[2] for w in _writes(slurm)] == [6000, before]  # the write, then the undo


def test_when_the_undo_fails_too_the_next_check_shows_the_drift(world, slurm, nlp):
    _apply(nlp, slurm, world.users["staff"])  # 100 h in force
    slurm.read_fail_after_write = TransientAdapterError("slurmctld not responding",
                                                        service="slurm")
    slurm.after_write = lambda fake: setattr(
        fake, "limit_fail", TransientAdapterError("slurmctld down", service="slurm"))
    with pytest.raises(TransientAdapterError, match="failed too"):
        _apply(nlp, slurm, world.users["staff"], hours="200", seen=6000, version=1)
    quota = Quota.objects.get()
    assert (quota.gpu_minutes, quota.version) == (6000, 1) and _limit(slurm) == 12000
    slurm.limit_fail = None
    assert services.check_cluster(world.cluster, slurm, now=NOW)["drift"] == 1
    assert (Quota.objects.get().drift, Quota.objects.get().slurm_minutes) == (True, 12000)


def test_a_past_month_is_refused(world, slurm, nlp):
    with pytest.raises(services.QuotaError, match="is over"):
        _apply(nlp, slurm, world.users["staff"], month=date(2026, 10, 1))


def test_drift_in_slurm_is_detected_once_shown_and_cleared(world, slurm, nlp):
    _apply(nlp, slurm, world.users["staff"])
    services.check_cluster(world.cluster, slurm, now=NOW)
    assert not Quota.objects.get().drift
    row = slurm.account_limits("nlp")
    slurm.assocs[slurm.assocs.index(row)] = replace(row, grp_tres_mins={"gres/gpu": 9000})
    assert services.check_cluster(world.cluster, slurm, now=NOW)["drift"] == 1
    assert services.check_cluster(world.cluster, slurm, now=NOW)["drift"] == 0  # once
    quota = Quota.objects.get()
    assert (quota.drift, quota.slurm_minutes, quota.gpu_minutes) == (True, 9000, 6000)
    drift = QuotaChange.objects.get(kind="drift")
    assert (drift.actor, drift.old_minutes, drift.new_minutes) == (None, 6000, 9000)
    assert AuditEvent.objects.filter(action="quota", username="slurm").count() == 1
    slurm.assocs[slurm.assocs.index(slurm.account_limits("nlp"))] = row.__class__(
        **{**row.__dict__, "grp_tres_mins": {"gres/gpu": 6000}})
    services.check_cluster(world.cluster, slurm, now=NOW)
    assert not Quota.objects.get().drift


def test_usage_is_slurms_decayed_usage_with_a_forecast_at_the_current_burn(world, slurm, nlp):
    _apply(nlp, slurm, world.users["staff"], now=T0)
    slurm.share_rows = shares({"nlp": 30 * 60.0})
    services.check_cluster(world.cluster, slurm, now=T0 + timedelta(days=1))
    [usage] = services.usage_for([nlp], now=T0 + timedelta(days=1))
    status = usage.status
    # three 8-GPU one-hour jobs in the last 7 days: 24 GPU-h / 7 days
    assert (status.limit_hours, status.used_hours, status.percent) == (100, 30, 30.0)
    assert status.burn_hours_per_day == pytest.approx(24 / 7)
    assert status.exhausted_at == T0 + timedelta(days=1) + timedelta(days=70 / (24 / 7))
    assert usage.month_hours == pytest.approx(24.0)


def test_the_burn_counts_gres_gpu_devices_as_slurms_limit_does(world, slurm, nlp):
    # the same three jobs on 8 MIG slices each: Slurm's GrpTRESMins counts 8 devices, the
    # statements 8/7 GPUs; the forecast is of Slurm's limit, so it burns devices
    Job.objects.filter(account="nlp").update(gpu_equivalent=8 / 7,
                                             gpu_types={"a100": 8 / 7})
    _apply(nlp, slurm, world.users["staff"], now=T0)
    [usage] = services.usage_for([nlp], now=T0 + timedelta(days=1))
    assert usage.status.burn_hours_per_day == pytest.approx(24 / 7)
    assert usage.month_hours == pytest.approx(24.0)


def test_warnings_at_80_and_100_percent_are_sent_once_each(world, slurm, nlp, settings):
    settings.QUOTA_WEBHOOK_URL = ""
    world.users["alice"].email = "alice@example.org"
    world.users["alice"].save()
    _apply(nlp, slurm, world.users["staff"])
    slurm.share_rows = shares({"nlp": 85 * 60.0})
    assert services.check_cluster(world.cluster, slurm, now=NOW)["alerts_sent"] == 1
    assert services.check_cluster(world.cluster, slurm, now=NOW)["alerts_sent"] == 0
    [message] = mail.outbox
    assert message.to == ["alice@example.org"] and "85% of its GPU-hour quota" in message.body
    slurm.share_rows = shares({"nlp": 100 * 60.0})
    services.check_cluster(world.cluster, slurm, now=NOW)
    assert [a.level for a in QuotaAlert.objects.order_by("level")] == [80, 100]
    assert "New jobs of the team wait" in mail.outbox[-1].body and len(mail.outbox) == 2
    _apply(nlp, slurm, world.users["staff"], hours="200", seen=6000, version=1)  # raised
    services.check_cluster(world.cluster, slurm, now=NOW)
    assert len(mail.outbox) == 2  # 50 % of the new quota: nothing to say


def test_an_alert_that_could_not_be_sent_is_tried_again(world, slurm, nlp, settings):
    settings.QUOTA_WEBHOOK_URL = "http://127.0.0.1:9/hook"  # nothing listens on port 9
    _apply(nlp, slurm, world.users["staff"])
    slurm.share_rows = shares({"nlp": 90 * 60.0})
    services.check_cluster(world.cluster, slurm, now=NOW)
    alert = QuotaAlert.objects.get()
    assert alert.sent_at is None and alert.error == "webhook: the webhook could not be delivered"
    settings.QUOTA_WEBHOOK_URL = ""
    world.users["alice"].email = "alice@example.org"
    world.users["alice"].save()
    services.check_cluster(world.cluster, slurm, now=NOW)
    alert.refresh_from_db()
    assert alert.sent_at is not None and alert.channels == ["email"]


def test_a_write_keeps_the_synced_copy_in_step(world, slurm, nlp):
    services.check_cluster(world.cluster, slurm, now=NOW)  # syncs the associations
    _apply(nlp, slurm, world.users["staff"])
    row = SlurmAssociation.objects.get(cluster=world.cluster, account="nlp", user_name="")
    assert row.grp_tres_mins == {"gres/gpu": 6000}
