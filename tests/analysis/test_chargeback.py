"""Chargeback maths: accounting, rates, rounding and policies (table tests, no database)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from apps.analysis import chargeback as cb

NOV = cb.Period.month(2026, 11)
T = datetime(2026, 11, 10, tzinfo=UTC)
D = Decimal


def job(gpus: float = 8, start: datetime = T, hours: float = 10, split: cb.Split | None = None,
        user: str = "bob", team: str = "nlp", partition: str = "gpu",
        types: dict[str, float] | None = None, job_id: int = 1) -> cb.JobUsage:
    return cb.JobUsage(job_id, team, user, partition, gpus, start, start + timedelta(hours=hours),
                       {"h100": gpus} if types is None else types, split)


# --- Accounting -----------------------------------------------------------------------------


@pytest.mark.parametrize(("usage", "allocated"), [
    (job(gpus=8, hours=10), 80.0),                                           # inside the month
    (job(gpus=8, start=NOV.start - timedelta(hours=4), hours=10), 48.0),    # starts in October
    (job(gpus=2, start=NOV.end - timedelta(hours=1), hours=5), 2.0),        # ends in December
    (job(gpus=1, start=NOV.start - timedelta(days=1), hours=24 * 40), 720.0),  # spans the month
    (job(gpus=4, start=NOV.end, hours=3), 0.0),                             # December only
    (job(gpus=0.25, hours=8), 2.0),                                         # 2 of 8 shards
    (job(gpus=0, hours=8), 0.0),                                            # CPU-only job
])
def test_it_prorates_allocated_hours_by_overlap_with_the_period(usage, allocated):
    assert cb.job_hours(usage, NOV.start, NOV.end).allocated == pytest.approx(allocated)


def test_a_spanning_job_keeps_its_measured_split_in_each_period():
    usage = job(gpus=8, start=NOV.end - timedelta(hours=6), hours=10,
                split=cb.Split(0.5, 0.2, 0.2, 0.1))
    dec = cb.Period.month(2026, 12)
    nov, later = cb.job_hours(usage, NOV.start, NOV.end), cb.job_hours(usage, dec.start, dec.end)
    assert (nov.allocated, later.allocated) == pytest.approx((48.0, 32.0))
    assert (nov.useful, nov.waiting, nov.held_idle, nov.no_process) == pytest.approx(
        (24.0, 9.6, 9.6, 4.8))
    assert nov.plus(later).useful == pytest.approx(40.0)


@pytest.mark.parametrize(("split", "unmeasured"), [
    (None, 80.0),                          # no telemetry: everything unmeasured
    (cb.Split(0.5, 0.25, 0.0, 0.0), 20.0),  # telemetry covered three quarters
    (cb.Split(1.0), 0.0),
])
def test_hours_without_telemetry_are_unmeasured(split, unmeasured):
    assert cb.job_hours(job(split=split), NOV.start, NOV.end).unmeasured == pytest.approx(
        unmeasured)


@pytest.mark.parametrize(("types", "expected"), [
    ({"h100": 8}, {"h100": 1.0}),
    ({"h100": 2, "a100": 6}, {"a100": 0.75, "h100": 0.25}),
    ({}, {"": 1.0}),
    ({"h100": 0}, {"": 1.0}),
])
def test_gpus_of_several_models_are_spread_by_count(types, expected):
    assert cb.model_shares(types) == expected


def test_usage_groups_by_team_user_partition_and_model():
    jobs = [job(gpus=8, hours=1, user="bob", job_id=1),
            job(gpus=8, hours=2, user="bob", job_id=2),
            job(gpus=4, hours=1, user="tom", job_id=3),
            job(gpus=2, hours=1, user="bob", partition="debug", types={"a100": 2}, job_id=4),
            job(gpus=4, hours=1, user="carol", team="vision", types={"h100": 2, "a100": 2},
                job_id=5)]
    usage = cb.usage_by_key(jobs, NOV.start, NOV.end)
    assert {k: h.allocated for k, h in usage.items()} == pytest.approx({
        ("nlp", "bob", "gpu", "h100"): 24.0, ("nlp", "tom", "gpu", "h100"): 4.0,
        ("nlp", "bob", "debug", "a100"): 2.0, ("vision", "carol", "gpu", "h100"): 2.0,
        ("vision", "carol", "gpu", "a100"): 2.0})


# --- Fractional GPUs: MIG slices -------------------------------------------------------------

F = Fraction


@pytest.mark.parametrize(("type_name", "model", "fraction"), [
    ("h100", "h100", F(1)),                              # a whole GPU
    ("a100_80gb", "a100_80gb", F(1)),                    # memory in the name is not a profile
    ("1g.5gb", "1g.5gb", F(1, 7)),                       # bare profile: parent unknown
    ("1g.10gb", "1g.10gb", F(1, 7)),
    ("1g.12gb", "1g.12gb", F(1, 7)),
    ("1g.20gb", "1g.20gb", F(1, 7)),
    ("1g.24gb", "1g.24gb", F(1, 7)),                     # H100 NVL
    ("a100_1g.5gb", "a100", F(1, 7)),                    # the parent from the type name
    ("a100_2g.10gb", "a100", F(2, 7)),
    ("h100-3g.40gb", "h100", F(3, 7)),
    ("nvidia_h100_80gb_hbm3_4g.40gb", "nvidia_h100_80gb_hbm3", F(4, 7)),
    ("h200_7g.141gb", "h200", F(1)),                     # the whole GPU as one instance
    ("a30_1g.6gb", "a30", F(1, 4)),                      # the A30 has four compute slices
    ("a30_2g.12gb+me", "a30", F(1, 2)),                  # media extensions: same share
    ("a100_3g.39gb", "a100", F(3, 7)),                   # not in the table: N of 7 slices
])
def test_mig_types_count_by_their_share_of_the_parent_gpu(type_name, model, fraction):
    kind = cb.gpu_kind(type_name)
    assert (kind.model, kind.fraction) == (model, fraction)


def test_a_clusters_own_entries_override_the_table():
    kinds = cb.gpu_kinds([{"name": "h100", "shards_per_gpu": 4},        # not about MIG
                          {"name": "1g.10gb", "parent": "h100"},          # parent only
                          {"name": "a100_3g.39gb", "fraction": "3/8"},    # fraction only
                          {"name": "big", "parent": "h100", "fraction": 0.5}])
    assert set(kinds) == {"1g.10gb", "a100_3g.39gb", "big"}
    assert cb.gpu_kind("1g.10gb", kinds) == cb.GpuKind("h100", F(1, 7), "1g.10gb")
    assert cb.gpu_kind("a100_3g.39gb", kinds) == cb.GpuKind("a100", F(3, 8), "3g.39gb")
    assert cb.gpu_kind("big", kinds) == cb.GpuKind("h100", F(1, 2))
    assert cb.gpu_kind("2g.20gb", kinds).fraction == F(2, 7)


@pytest.mark.parametrize(("entry", "message"), [
    ({"parent": "h100"}, "has no name"),
    ({"name": "1g.10gb", "fraction": 0}, "must be in (0, 1]"),
    ({"name": "1g.10gb", "fraction": "8/7"}, "must be in (0, 1]"),
    ({"name": "1g.10gb", "fraction": "a seventh"}, "is not a number"),
    ({"name": "1g.10gb", "fraction": True}, "is not a number"),
    ({"name": "1g.10gb", "parent": ""}, "parent must be"),
])
def test_bad_gpu_type_entries_are_refused_with_a_message(entry, message):
    with pytest.raises(cb.ChargebackError, match=re.escape(message)):
        cb.gpu_kinds([entry])


@pytest.mark.parametrize(("gpus", "types", "equivalent", "models"), [
    (8, {"h100": 8}, 8.0, {"h100": 8}),                  # whole GPUs stay integers
    (4, {}, 4.0, {}),                                    # untyped: whole, no model
    (1, {"a100_1g.5gb": 1}, 1 / 7, {"a100": 1 / 7}),
    (3, {"a100_3g.20gb": 2, "a100_1g.5gb": 1}, 1.0, {"a100": 1}),  # 3/7 + 3/7 + 1/7
    (2, {"h100": 1, "a100_2g.10gb": 1}, 1 + 2 / 7, {"a100": 2 / 7, "h100": 1}),
    (2, {"1g.10gb": 1}, 1 + 1 / 7, {"1g.10gb": 1 / 7}),  # one untyped device stays whole
])
def test_an_allocation_counts_mig_devices_by_fraction(gpus, types, equivalent, models):
    total, per_model = cb.gpu_allocation(gpus, types)
    assert total == pytest.approx(equivalent)
    assert per_model == pytest.approx(models)
    assert all(type(v) is int for m, v in per_model.items() if models[m] == int(models[m]))


def test_mig_hours_are_charged_to_the_parent_model_by_fraction():
    equivalent, types = cb.gpu_allocation(4, {"h100": 1, "h100_1g.10gb": 2, "a100_3g.20gb": 1},
                                          cb.gpu_kinds([]))
    usage = cb.usage_by_key([job(gpus=equivalent, hours=7, types=types)], NOV.start, NOV.end)
    # 7 h of (1 + 2/7) H100 and 3/7 A100: 9 + 3 GPU-hours
    assert {k[3]: h.allocated for k, h in usage.items()} == pytest.approx(
        {"h100": 9.0, "a100": 3.0})


# --- Rates ----------------------------------------------------------------------------------

OCT1 = datetime(2026, 10, 1, tzinfo=UTC)
NOV15 = datetime(2026, 11, 15, tzinfo=UTC)
RATES = [
    cb.Rate(D("1.00"), OCT1),                                  # default
    cb.Rate(D("2.50"), OCT1, gpu_model="h100"),                # by model
    cb.Rate(D("0.80"), OCT1, partition="debug"),               # by partition
    cb.Rate(D("3.00"), OCT1, partition="debug", gpu_model="h100"),
    cb.Rate(D("2.00"), OCT1, NOV15, gpu_model="a100"),         # a100 cheaper from the 15th
    cb.Rate(D("1.50"), NOV15, gpu_model="a100"),
]


@pytest.mark.parametrize(("partition", "model", "at", "price"), [
    ("gpu", "h100", T, D("2.50")),       # model beats default
    ("debug", "h100", T, D("3.00")),     # partition + model beats model
    ("debug", "v100", T, D("0.80")),     # partition beats default
    ("gpu", "v100", T, D("1.00")),       # default
    ("gpu", "a100", T, D("2.00")),       # before the change
    ("gpu", "a100", NOV15, D("1.50")),   # from the change (start inclusive, end exclusive)
    ("gpu", "", T, D("1.00")),           # unknown model: default
])
def test_the_most_specific_rate_in_force_wins(partition, model, at, price):
    rate = cb.rate_for(RATES, partition, model, at)
    assert rate is not None and rate.price == price


def test_no_rate_in_force_is_none():
    assert cb.rate_for([cb.Rate(D("1"), NOV15)], "gpu", "h100", T) is None


def test_the_period_is_cut_where_a_rate_changes():
    assert cb.segments(RATES, NOV) == [cb.Period(NOV.start, NOV15), cb.Period(NOV15, NOV.end)]
    assert cb.segments([cb.Rate(D("1"), OCT1)], NOV) == [NOV]


# --- Rounding and money ---------------------------------------------------------------------


@pytest.mark.parametrize("hours", [
    cb.Hours(10.0, 3.33333, 3.33333, 3.33333, 0.0),
    cb.Hours(1 / 3, 1 / 9, 1 / 9, 1 / 9, 0.0),
    cb.Hours(7.00005, 1.00001, 2.00002, 0.0, 4.00002),
    cb.Hours(100.0, 60.0, 30.0, 20.0, 0.0),   # fractions past 1 (noise): scaled down
    cb.Hours(0.0),
])
def test_rounded_parts_always_add_up_to_the_allocated_hours(hours):
    r = cb.round_hours(hours)
    assert r.useful + r.waiting + r.held_idle + r.no_process + r.unmeasured == r.allocated
    assert abs(r.allocated - D(hours.allocated)) <= D("0.00005")


def test_hours_round_half_even_to_a_ten_thousandth():
    assert cb.round_hours(cb.Hours(1.00005)).allocated == D("1.0000")
    assert cb.round_hours(cb.Hours(1.00015)).allocated == D("1.0002")


@pytest.mark.parametrize(("hours", "price", "amount"), [
    (D("1.0000"), D("2.50"), D("2.50")),
    (D("0.0020"), D("2.50"), D("0.00")),   # 0.005 -> half-even -> 0.00
    (D("0.0060"), D("2.50"), D("0.02")),   # 0.015 -> half-even -> 0.02
    (D("123.4567"), D("1.10"), D("135.80")),
])
def test_amounts_round_half_even_to_the_cent(hours, price, amount):
    assert cb.money(hours, price) == amount


SPLIT = cb.Hours(100.0, 40.0, 20.0, 10.0, 10.0)  # 20 unmeasured


@pytest.mark.parametrize(("terms", "charged"), [
    (cb.Terms(cb.Policy.ALLOCATED), D("100")),
    (cb.Terms(cb.Policy.USEFUL_PLUS_FEE, D("0")), D("60")),      # useful + unmeasured
    (cb.Terms(cb.Policy.USEFUL_PLUS_FEE, D("0.25")), D("70")),   # + 40 wasted x 0.25
    (cb.Terms(cb.Policy.USEFUL_PLUS_FEE, D("1")), D("100")),     # full fee = allocated
])
def test_the_policy_decides_the_charged_hours(terms, charged):
    assert cb.charged_hours(cb.round_hours(SPLIT), terms) == charged


@pytest.mark.parametrize("fee", [D("-0.1"), D("1.5")])
def test_a_waste_fee_outside_zero_to_one_is_refused(fee):
    with pytest.raises(cb.ChargebackError, match="between 0 and 1"):
        cb.Terms(cb.Policy.USEFUL_PLUS_FEE, fee)


def test_lines_price_each_key_and_show_the_cost_at_useful_hours():
    usage = {("nlp", "bob", "gpu", "h100"): SPLIT,
             ("nlp", "bob", "gpu", "v100"): cb.Hours(2.0)}
    lines = cb.price_lines(usage, NOV, [cb.Rate(D("2.50"), OCT1, gpu_model="h100")],
                           cb.Terms(cb.Policy.ALLOCATED))
    h100, v100 = lines
    assert (h100.amount, h100.useful_amount, h100.price) == (D("250.00"), D("150.00"), D("2.50"))
    assert (v100.priced, v100.amount) == (False, D("0.00"))  # no rate: shown, not priced


def test_statement_lines_split_a_key_at_a_rate_change_and_totals_add_up():
    a100 = [j for j in (job(gpus=8, start=NOV15 - timedelta(hours=5), hours=10,
                            types={"a100": 8}, split=cb.Split(0.5, 0.5)),)]
    by_segment = {seg: cb.usage_by_key(a100, seg.start, seg.end)
                  for seg in cb.segments(RATES, NOV)}
    lines = cb.statement_lines(by_segment, RATES, cb.Terms(cb.Policy.USEFUL_PLUS_FEE, D("0.5")))
    first, second = lines["nlp"]
    assert (first.price, first.hours.allocated, first.charged_hours) == (
        D("2.00"), D("40.0000"), D("30.0000"))
    assert (second.price, second.amount) == (D("1.50"), D("45.00"))
    total = cb.totals(lines["nlp"])
    assert (total.allocated, total.amount) == (D("80.0000"), D("105.00"))
    assert total.waste_share == pytest.approx(0.5)


def test_a_period_must_not_be_empty_and_months_roll_over_the_year():
    assert cb.Period.month(2026, 12).end == datetime(2027, 1, 1, tzinfo=UTC)
    with pytest.raises(cb.ChargebackError):
        cb.Period(NOV.end, NOV.start)
