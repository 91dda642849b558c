"""Reconciliation, quota values and forecasts, pending reasons in words (table tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from apps.analysis import pending, quotas
from apps.analysis import reconcile as rc

J = rc.JobSeconds

# --- Reconciliation ---------------------------------------------------------------------------


def test_matching_sides_reconcile_with_no_job_listed():
    ours = [J(1, "nlp", "bob", 3600.0), J(2, "vision", "carol", 120.0)]
    result = rc.reconcile(ours, list(ours), {"nlp": 60.0, "vision": 2.0})
    assert result.ok and result.jobs == ()
    assert [(a.account, a.delta_minutes) for a in result.accounts] == [("nlp", 0.0),
                                                                       ("vision", 0.0)]


@pytest.mark.parametrize(("ours", "theirs", "kind"), [
    ([], [J(7, "nlp", "bob", 600.0)], rc.Difference.MISSING_IN_BEACON),
    ([J(7, "nlp", "bob", 600.0)], [], rc.Difference.MISSING_IN_SLURM),
    ([J(7, "nlp", "bob", 600.0)], [J(7, "nlp", "bob", 900.0)], rc.Difference.HOURS),
    ([J(7, "vision", "bob", 600.0)], [J(7, "nlp", "bob", 600.0)], rc.Difference.ACCOUNT),
])
def test_each_kind_of_job_difference_is_listed(ours, theirs, kind):
    [diff] = rc.job_differences(ours, theirs)
    assert (diff.job_id, diff.kind) == (7, kind)


def test_a_second_of_noise_and_zero_hour_jobs_are_not_differences():
    ours = [J(1, "nlp", "bob", 600.0), J(2, "nlp", "bob", 0.0)]
    assert rc.job_differences(ours, [J(1, "nlp", "bob", 600.9)]) == []


@pytest.mark.parametrize(("report", "ok"), [
    ({"nlp": 10.0}, True),    # sreport rounded 10.4 down
    ({"nlp": 11.0}, True),    # within one GPU-minute
    ({"nlp": 12.0}, False),   # Beacon is short by 1.6 minutes
])
def test_accounts_agree_with_the_report_within_one_gpu_minute(report, ok):
    ours = [J(1, "nlp", "bob", 10.4 * 60)]
    assert rc.reconcile(ours, ours, report).ok is ok


def test_without_a_report_the_sacct_sum_is_the_reference():
    result = rc.reconcile([J(1, "nlp", "bob", 600.0)], [J(1, "nlp", "bob", 900.0)], None)
    assert not result.ok and result.accounts[0].delta_minutes == pytest.approx(-5.0)


def test_child_accounts_are_taken_out_of_their_parents_row():
    rows = {"root": 100.0, "research": 90.0, "nlp": 60.0, "vision": 20.0, "ops": 10.0}
    parents = {"research": "root", "nlp": "research", "vision": "research", "ops": "root"}
    assert rc.direct_minutes(rows, parents) == {"research": 10.0, "nlp": 60.0, "vision": 20.0,
                                                "ops": 10.0}


# --- Quota values ---------------------------------------------------------------------------

CEILING = Decimal("10000")


@pytest.mark.parametrize(("typed", "minutes"), [
    ("100", 6000), ("0", 0), ("1.5", 90), (" 2.25 ", 135), ("10000", 600000),
])
def test_gpu_hours_become_whole_gpu_minutes(typed, minutes):
    assert quotas.quota_minutes(typed, CEILING) == minutes


@pytest.mark.parametrize(("typed", "message"), [
    ("-5", "cannot be negative"),
    ("abc", "not a number"),
    ("nan", "not a number"),
    ("inf", "not a number"),
    ("0.001", "whole number of GPU-minutes"),
    ("10000.5", "absurd"),
    ("1e12", "absurd"),
])
def test_bad_or_absurd_quota_values_are_refused_with_a_message(typed, message):
    with pytest.raises(quotas.QuotaValueError, match=message):
        quotas.quota_minutes(typed, CEILING)


@pytest.mark.parametrize(("minutes", "message"), [(-1, "negative"), (600001, "absurd")])
def test_minutes_are_checked_the_same_way(minutes, message):
    assert quotas.checked_minutes(600000, CEILING) == 600000
    with pytest.raises(quotas.QuotaValueError, match=message):
        quotas.checked_minutes(minutes, CEILING)


def test_the_ceiling_is_ten_times_what_the_cluster_can_deliver():
    assert quotas.ceiling_hours(32, 720.0) == Decimal("230400")


# --- Usage, levels, forecast -------------------------------------------------------------------

NOW = datetime(2026, 11, 20, tzinfo=UTC)


@pytest.mark.parametrize(("used", "limit", "level"), [
    (0, 100, 0), (79.9, 100, 0), (80, 100, 80), (99, 100, 80), (100, 100, 100),
    (150, 100, 100), (0, 0, 100),
])
def test_warning_levels_are_80_and_100_percent(used, limit, level):
    assert quotas.level_for(used, limit) == level


@pytest.mark.parametrize(("used", "limit", "burn", "expected"), [
    (50, 100, 10, NOW + timedelta(days=5)),
    (100, 100, 10, NOW),     # already used up
    (120, 100, 0, NOW),
    (50, 100, 0, None),      # no burn: never
])
def test_the_exhaustion_forecast_extrapolates_the_current_burn(used, limit, burn, expected):
    assert quotas.forecast(used, limit, burn, NOW) == expected


def test_a_status_carries_percent_and_remaining_hours():
    status = quotas.quota_status(200, 170, 15, NOW)
    assert (status.percent, status.remaining_hours, status.level) == (85.0, 30, 80)
    assert status.exhausted_at == NOW + timedelta(days=2)


# --- Pending reasons --------------------------------------------------------------------------


@pytest.mark.parametrize(("reason", "words", "quota"), [
    ("AssocGrpGRESMinutes", "your team's GPU-hour quota is used up", True),
    ("AssocGrpGRESRunMinutes", "your team's running jobs already hold the rest", True),
    ("QOSGrpGRESMinutes", "the QOS's GPU-hour quota is used up", True),
    ("AssocGrpMemMinutes", "your team's quota for this kind of resource is used up", True),
    ("AssocGrpGRES", "the most GPUs it may hold at once", False),
    ("Resources", "waiting for enough free GPUs", False),
    ("None", "", False),
    ("", "", False),
])
def test_pending_reasons_read_as_words(reason, words, quota):
    text = pending.reason_words(reason)
    assert (words in text) if words else text == ""
    assert pending.is_quota_reason(reason) is quota
