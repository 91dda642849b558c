"""The SLO maths (apps/analysis/slo.py), as tables of cases: no database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from apps.analysis import slo
from apps.analysis.pending import wait_cause
from apps.analysis.slo import Cause, Counts, JobFacts, Sli, Status

T = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)
M = timedelta(minutes=1)


def job(job_id: int = 1, **kw) -> JobFacts:
    values = {"team": "nlp", "submit": T, "state": "COMPLETED", "start": T + 10 * M,
              "end": T + 2 * H}
    values.update(kw)
    return JobFacts(job_id, **values)


# --- Windows, time zones, DST ------------------------------------------------------------

BERLIN, NEW_YORK, KOLKATA = ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York"), \
    ZoneInfo("Asia/Kolkata")


@pytest.mark.parametrize(("now", "tz", "start", "hours"), [
    # November in UTC: 30 days
    (datetime(2026, 11, 15, tzinfo=UTC), UTC, datetime(2026, 11, 1, tzinfo=UTC), 720),
    # October in Berlin: starts at 22:00 UTC (CEST), clocks go back on the 25th: 745 h
    (datetime(2026, 10, 20, tzinfo=UTC), BERLIN, datetime(2026, 9, 30, 22, tzinfo=UTC), 745),
    # March in Berlin: clocks go forward on the 29th: 743 h
    (datetime(2026, 3, 30, tzinfo=UTC), BERLIN, datetime(2026, 2, 28, 23, tzinfo=UTC), 743),
    # November in New York: DST ends on the 1st at 02:00, so the month starts at 04:00 UTC
    (datetime(2026, 11, 20, tzinfo=UTC), NEW_YORK, datetime(2026, 11, 1, 4, tzinfo=UTC), 721),
    # UTC+5:30 all year: a half-hour offset, no DST
    (datetime(2026, 11, 20, tzinfo=UTC), KOLKATA, datetime(2026, 10, 31, 18, 30, tzinfo=UTC),
     720),
    # just after local midnight on the 1st in Berlin is already the new month
    (datetime(2026, 10, 31, 23, 30, tzinfo=UTC), BERLIN, datetime(2026, 10, 31, 23, tzinfo=UTC),
     720),
])
def test_calendar_months_start_at_local_midnight_and_follow_the_clocks(now, tz, start, hours):
    window = slo.calendar_month(now, tz)
    assert window.start == start
    assert window.seconds == hours * 3600
    assert window.observed_end == now and window.calendar


def test_rolling_windows_end_now():
    window = slo.slo_window("rolling_28d", T, BERLIN)
    assert (window.start, window.end, window.observed_end) == (T - timedelta(days=28), T, T)
    assert slo.slo_window("rolling_7d", T, UTC).seconds == 7 * 86400


def test_trend_days_of_a_calendar_month_are_local_days_of_23_or_25_hours():
    now = datetime(2026, 10, 27, 12, tzinfo=UTC)
    edges = slo.day_edges(slo.calendar_month(now, BERLIN), BERLIN)
    lengths = [(b - a).total_seconds() / 3600 for a, b in pairwise(edges)]
    assert lengths[:24] == [24] * 24 and lengths[24] == 25  # 25 October: clocks go back
    assert lengths[25] == 24 and edges[-1] == now  # the last day ends at the observed end
    assert all(e.astimezone(BERLIN).hour == 0 for e in edges[:-1])


def test_trend_days_of_a_rolling_window_are_24_hours():
    edges = slo.day_edges(slo.rolling(T, 7), BERLIN)
    assert len(edges) == 8 and {b - a for a, b in pairwise(edges)} == {
        timedelta(days=1)}


def test_a_window_refuses_naive_or_reversed_edges():
    with pytest.raises(slo.SloError):
        slo.Window(datetime(2026, 1, 2), datetime(2026, 1, 3), datetime(2026, 1, 3))
    with pytest.raises(slo.SloError):
        slo.Window(T, T - H, T)


# --- Waits and their causes --------------------------------------------------------------


@pytest.mark.parametrize(("kw", "resource_min", "own_min", "own_limited"), [
    ({}, 10, 0, False),  # submitted, eligible at once, waited 10 min for resources
    ({"wait_reason": "Priority"}, 10, 0, False),
    ({"wait_reason": "Resources"}, 10, 0, False),
    ({"wait_reason": "ReqNodeNotAvail"}, 10, 0, False),  # nodes down: the platform's
    ({"wait_reason": "SomethingNew"}, 10, 0, False),  # unknown codes are charged
    # a dependency: eligible 6 min after submit; the 4 min after that are the platform's
    ({"eligible": T + 6 * M, "wait_reason": "Priority"}, 4, 6, False),
    # the team's own limits held it from eligible to start: all of it is theirs
    ({"wait_reason": "AssocGrpGRES"}, 0, 10, True),
    ({"wait_reason": "QOSMaxGRESPerUser"}, 0, 10, True),
    ({"wait_reason": "JobHeldUser"}, 0, 10, True),
    ({"wait_reason": "Dependency"}, 0, 10, True),
    ({"eligible": T + 3 * M, "wait_reason": "JobArrayTaskLimit"}, 0, 10, True),
    ({"start": T - M}, 0, 0, False),  # clocks a little off: never a negative wait
])
def test_a_jobs_wait_is_split_into_the_platforms_and_its_own(kw, resource_min, own_min,
                                                              own_limited):
    wait = slo.job_wait(job(**kw))
    assert wait == slo.Wait(resource_min * 60.0, own_min * 60.0, own_limited)


@pytest.mark.parametrize("kw", [
    {"start": None, "state": "PENDING", "end": None},  # still waiting
    {"allocated": False, "state": "CANCELLED"},  # cancelled while pending (start = end)
    {"gpus": 0},  # a CPU job
])
def test_only_started_gpu_jobs_have_a_wait(kw):
    assert slo.job_wait(job(**kw)) is None


@pytest.mark.parametrize(("code", "cause"), [
    ("AssocGrpGRESMinutes", "own"), ("QOSGrpGRES", "own"), ("BeginTime", "own"),
    ("PartitionTimeLimit", "own"), ("DependencyNeverSatisfied", "own"),
    ("Resources", "resources"), ("Priority", "resources"), ("", "resources"),
    ("None", "resources"), ("NodeDown", "resources"),
])
def test_pending_reasons_sort_into_own_and_resource_waits(code, cause):
    assert wait_cause(code) == cause


# --- Endings -------------------------------------------------------------------------------


@pytest.mark.parametrize(("kw", "key", "cause"), [
    ({"state": "COMPLETED"}, "completed", Cause.SUCCESS),
    ({"state": "COMPLETED", "hardware_fault": True}, "completed", Cause.SUCCESS),
    ({"state": "NODE_FAIL"}, "node_fail", Cause.PLATFORM),
    ({"state": "FAILED", "hardware_fault": True}, "gpu_fault", Cause.PLATFORM),
    ({"state": "TIMEOUT", "hardware_fault": True}, "gpu_fault", Cause.PLATFORM),
    ({"state": "PREEMPTED"}, "preempted", Cause.PLATFORM),
    ({"state": "BOOT_FAIL"}, "boot_fail", Cause.PLATFORM),
    ({"state": "FAILED", "wait_reason": "launch failed requeued held"}, "launch_failed",
     Cause.PLATFORM),
    ({"state": "FAILED", "wait_reason": "Prolog"}, "launch_failed", Cause.PLATFORM),
    ({"state": "FAILED"}, "exit_nonzero", Cause.USER),
    ({"state": "OUT_OF_MEMORY"}, "out_of_memory", Cause.USER),
    ({"state": "CANCELLED"}, "cancelled", Cause.USER),
    ({"state": "TIMEOUT"}, "timeout", Cause.USER),
    ({"state": "DEADLINE"}, "timeout", Cause.USER),
    ({"state": "CANCELLED", "allocated": False}, "never_started", Cause.EXCLUDED),
    ({"state": "CANCELLED", "start": None}, "never_started", Cause.EXCLUDED),
    ({"state": "REVOKED"}, "unclassified", Cause.EXCLUDED),
])
def test_endings_are_classified_by_the_first_matching_rule(kw, key, cause):
    rule = slo.classify_ending(job(**kw), slo.DEFAULT_ENDING_RULES)
    assert (rule.key, rule.cause) == (key, cause)


def test_rules_are_data_an_edited_table_changes_the_verdict():
    # A site that treats preemption as the user's choice (they picked the low QOS)
    rules = [slo.EndingRule("preempted", Cause.USER, states=frozenset({"PREEMPTED"})),
             *slo.DEFAULT_ENDING_RULES]
    assert slo.classify_ending(job(state="PREEMPTED"), rules).cause is Cause.USER


# --- Counting events in a window: edges, arrays, emptiness --------------------------------

LO, HI = T, T + 24 * H


@pytest.mark.parametrize(("jobs", "good", "total"), [
    ([], 0, 0),  # an empty window
    ([job(start=LO)], 1, 1),  # started on the window's first instant: inside
    ([job(start=HI, end=HI + H)], 0, 0),  # started on its end: the next window's
    ([job(submit=LO - 2 * H, start=LO + M)], 0, 1),  # waited across the edge: counted once
    ([job(start=LO + 40 * M, submit=LO)], 0, 1),  # 40 min: late against 30
    ([job(start=LO + 30 * M, submit=LO)], 1, 1),  # exactly the target: on time
    ([job(wait_reason="AssocGrpGRES", start=LO + 5 * H, submit=LO)], 0, 0),  # own limit
    # an array: each task its own event; throttled tasks are the team's own; the pending
    # remainder has no allocation and never counts
    ([job(10, array_job_id=10, start=LO + M, submit=LO),
      job(11, array_job_id=10, start=LO + 2 * M, submit=LO),
      job(12, array_job_id=10, start=LO + 3 * H, submit=LO, wait_reason="JobArrayTaskLimit"),
      job(13, array_job_id=10, start=None, end=None, state="PENDING", allocated=False)], 2, 2),
])
def test_queue_wait_counts_jobs_by_start_time(jobs, good, total):
    counts = slo.event_counts(Sli.QUEUE_WAIT, jobs, LO, HI, HI, target_wait_s=1800)
    assert counts == Counts(good, total)


@pytest.mark.parametrize(("jobs", "good", "total"), [
    ([], 0, 0),
    ([job(start=LO - 5 * H, end=LO + H, state="NODE_FAIL")], 0, 1),  # ran across the edge
    ([job(start=LO - 5 * H, end=LO, state="NODE_FAIL")], 0, 1),  # ended on the first instant
    ([job(start=LO + H, end=HI, state="NODE_FAIL")], 0, 0),  # ended on the end: next window
    ([job(end=LO + H, state="FAILED"), job(2, end=LO + H)], 2, 2),  # user failures are good
    ([job(start=None, end=LO + H, state="CANCELLED", allocated=False)], 0, 0),
    ([job(end=None, state="RUNNING")], 0, 0),  # not ended: not counted yet
])
def test_job_success_counts_jobs_by_end_time(jobs, good, total):
    assert slo.event_counts(Sli.JOB_SUCCESS, jobs, LO, HI, HI) == Counts(good, total)


@pytest.mark.parametrize(("jobs", "good", "total"), [
    ([], 0, 0),
    # 2 GPUs, 10 h of which 4 h inside the window, 25 % useful: prorated
    ([job(gpus=2, start=LO - 6 * H, end=LO + 4 * H, measured=True, useful_fraction=0.25)],
     2 * 4 * 3600 * 0.25, 2 * 4 * 3600),
    # still running: it ends "now" (the window's observed end)
    ([job(gpus=1, start=HI - 2 * H, end=None, state="RUNNING", measured=True,
          useful_fraction=0.5)], 3600, 7200),
    # without telemetry: neither good nor total (reported as coverage)
    ([job(gpus=8, start=LO, end=LO + H)], 0, 0),
])
def test_efficiency_counts_gpu_seconds_prorated_to_the_window(jobs, good, total):
    counts = slo.event_counts(Sli.GPU_EFFICIENCY, jobs, LO, HI, HI)
    assert counts.good == pytest.approx(good) and counts.total == pytest.approx(total)


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([], 0.5, None), ([7.0], 0.9, 7.0), ([1.0, 2.0], 0.5, 1.0), ([3.0, 1.0, 2.0], 0.5, 2.0),
    ([float(v) for v in range(1, 11)], 0.9, 9.0), ([5.0, 1.0], 0.0, 1.0),
    # rank ceil(0.9 x 110) = 99, as PostgreSQL's percentile_disc answers
    ([float(v) for v in range(1, 111)], 0.9, 99.0),
])
def test_percentiles_are_nearest_rank_as_postgresql_computes_them(values, q, expected):
    assert slo.percentile(values, q) == expected
    # the same answer from the values sorted once (how the queue-wait query reads them)
    assert slo.percentile_of_sorted(sorted(values), q) == expected


@pytest.mark.parametrize("q", [-0.1, 1.5])
def test_a_percentile_outside_0_to_1_is_refused_sorted_or_not(q):
    with pytest.raises(slo.SloError, match="not in"):
        slo.percentile([1.0], q)
    with pytest.raises(slo.SloError, match="not in"):
        slo.percentile_of_sorted([1.0], q)


@pytest.mark.parametrize(("gpus", "bucket"), [(0.25, "1"), (1, "1"), (2, "2-4"), (8, "5-8"),
                                              (16, "9-32"), (256, "33+")])
def test_gpu_count_buckets(gpus, bucket):
    assert slo.gpu_bucket(gpus) == bucket


# --- Budgets, burn rates, alerts, exhaustion ------------------------------------------------


@pytest.mark.parametrize(("counts", "target", "remaining", "rate"), [
    (Counts(0, 0), 0.9, 1.0, None),  # empty: nothing spent, no rate
    (Counts(100, 100), 0.9, 1.0, 0.0),
    (Counts(95, 100), 0.9, 0.5, 0.5),
    (Counts(90, 100), 0.9, 0.0, 1.0),
    (Counts(80, 100), 0.9, -1.0, 2.0),  # overspent
    (Counts(999, 1000), 0.99, 0.9, 0.1),
])
def test_budget_remaining_and_burn_rate(counts, target, remaining, rate):
    assert slo.budget_remaining(counts, target) == pytest.approx(remaining)
    assert slo.burn_rate(counts, target) == (None if rate is None else pytest.approx(rate))


@pytest.mark.parametrize("target", [0.0, 1.0, 1.5, -0.1])
def test_targets_must_leave_a_budget(target):
    with pytest.raises(slo.SloError):
        slo.budget_remaining(Counts(1, 1), target)


def test_the_workbook_thresholds_for_a_30_day_window():
    thresholds = [a.threshold(30 * 86400) for a in slo.WORKBOOK_ALERTS]
    assert thresholds == pytest.approx([14.4, 6.0, 3.0, 1.0])
    assert [slo.window_label(s) for s in slo.BURN_WINDOWS] == [
        "5m", "30m", "1h", "2h", "6h", "1d", "3d"]


@pytest.mark.parametrize(("rates", "names"), [
    ({}, []),
    ({3600: 15.0, 300: 15.0}, ["page-1h"]),
    ({3600: 15.0, 300: 2.0}, []),  # the short window says it already stopped
    ({3600: 2.0, 300: 15.0}, []),  # a blip: the long window is not burning
    ({3600: 15.0, 300: None}, []),  # no events in the short window
    ({86400: 3.5, 7200: 4.0, 3 * 86400: 1.2, 6 * 3600: 1.1}, ["ticket-1d", "ticket-3d"]),
])
def test_an_alert_fires_when_its_long_and_short_windows_both_burn(rates, names):
    assert [a.name for a in slo.firing(rates, 30 * 86400)] == names


@pytest.mark.parametrize(("remaining", "rate", "expected"), [
    (0.5, 2.0, 0.25 * 28 * 86400), (0.5, None, None), (0.5, 0.0, None), (0.0, 5.0, 0.0),
    (-0.3, 1.0, 0.0), (1.0, 1.0, 28 * 86400),
])
def test_time_to_exhaustion(remaining, rate, expected):
    assert slo.time_to_exhaustion(remaining, rate, 28 * 86400) == expected


@pytest.mark.parametrize(("counts", "burn", "status"), [
    (Counts(0, 0), {}, Status.NO_DATA),
    (Counts(99, 100), {}, Status.OK),
    (Counts(80, 100), {}, Status.BREACHED),
    # all bad for 6 h: rate 10, above 5.6 (5 % of a 28-day budget in 6 h); at a 90 % target
    # the 1 h page (13.44) can never fire: the rate cannot exceed 1 / (1 - target)
    (Counts(95, 100), {6 * 3600: Counts(0, 10), 1800: Counts(0, 2)}, Status.FAST_BURN),
    (Counts(95, 100), {3600: Counts(0, 10), 300: Counts(0, 2)}, Status.OK),
    (Counts(95, 100), {86400: Counts(60, 100), 7200: Counts(5, 10)}, Status.SLOW_BURN),
])
def test_assess_gives_the_status(counts, burn, status):
    window = slo.rolling(T, 28)
    result = slo.assess(counts, 0.9, window, burn)
    assert result.status is status
    if status is Status.NO_DATA:
        assert result.sli is None and result.remaining == 1.0 and result.exhaustion_s is None


def test_the_trend_spends_the_budget_day_by_day():
    days = [(T, T + 24 * H, Counts(10, 10)), (T + 24 * H, T + 48 * H, Counts(0, 0)),
            (T + 48 * H, T + 72 * H, Counts(5, 10))]
    points = slo.trend(days, 0.9)
    assert [p.sli for p in points] == [1.0, None, 0.5]
    assert [p.remaining for p in points] == pytest.approx([1.0, 1.0, 1 - 5 / 2])


def test_the_reference_counts_the_window_its_burn_windows_and_days():
    window = slo.rolling(T, 7)
    late = job(1, submit=T - 3 * H, start=T - 2 * H, end=T - H)  # waited 1 h, 2 h ago
    early = job(2, submit=T - 5 * 24 * H, start=T - 5 * 24 * H + M)
    ref = slo.reference_counts(Sli.QUEUE_WAIT, [late, early], window, UTC,
                               target_wait_s=1800)
    assert ref.window == Counts(1, 2)
    assert ref.burn[3600] == Counts() and ref.burn[7200] == Counts(0, 1)
    assert ref.burn[3 * 86400] == Counts(0, 1)
    assert [d[2] for d in ref.days] == [Counts(), Counts(), Counts(1, 1), Counts(), Counts(),
                                        Counts(), Counts(0, 1)]
