"""GPU and node health summaries, counters and bitmask re-gridding."""

from __future__ import annotations

import pytest

from apps.analysis import compact
from apps.analysis.health import GpuHealth, NodeHealth, gpu_health, node_health, nvlink_laggards
from apps.analysis.timeseries import Series, Window, combine, counter_increase, counter_rate, regrid

W = Window(0, 120)


def s(*values: float, step: float = 30) -> Series:
    return Series("m", {}, tuple(((i + 1) * step, v) for i, v in enumerate(values)))


@pytest.mark.parametrize(("series", "field", "expected"), [
    ({"temperature": s(60, 70, 80, 90)}, "temp_mean", 75.0),
    ({"temperature": s(60, 70, 80, 90)}, "temp_max", 90.0),
    ({"throttle_reasons": s(0x1, 0x20, 0x40, 0x60)}, "thermal_share", 0.75),
    ({"throttle_reasons": s(0x1, 0x20, 0x40, 0x60)}, "power_share", 0.0),
    # the software power cap alone; the power brake is the device's (issue 28)
    ({"throttle_reasons": s(0x4, 0x80, 0, 0)}, "power_share", 0.25),
    ({"throttle_reasons": s(0x4, 0x80, 0x88, 0)}, "hw_slowdown_share", 0.5),
    ({"throttle_reasons": s(0x8, 0, 0, 0)}, "hw_slowdown_share", 0.25),
    ({"xid": s(0, 63, 63, 79)}, "xids", (63, 79)),
    ({"xid": s(0, 0, 0, 0)}, "xids", ()),
    ({"ecc_dbe": s(5, 5, 7, 1)}, "ecc_dbe", 3),  # +2, then a reset and 1 more
    ({"sm_clock": s(1980, 1980, 345, 345), "gpu_util": s(1, 1, 0, 0)}, "sm_clock_busy", 1980.0),
    ({"sm_clock": s(1200, 1300)}, "sm_clock_busy", 1250.0),
    ({"nvlink_tx": s(1e9, 3e9), "nvlink_rx": s(1e9, 1e9)}, "nvlink_bps", 3e9),
    # AMD: residencies (share of the time each limit held the clocks back), no bitmask
    ({"thermal_throttle": s(0.5, 1.0, 1.0, 0.5)}, "thermal_share", 0.75),
    ({"power_throttle": s(0.2, 0.0, 0.0, 0.2)}, "power_share", 0.1),
    ({"hw_slowdown": s(0.0, 0.0, 1.0, 0.0)}, "hw_slowdown_share", 0.25),
    ({"thermal_throttle": s(1.2, 1.2)}, "thermal_share", 1.0),  # a share, at most all
    # the bitmask, where written, is the reading (a site exporting both is read once)
    ({"throttle_reasons": s(0, 0), "thermal_throttle": s(1, 1)}, "thermal_share", 0.0),
    ({}, "temp_mean", None),
    ({}, "thermal_share", None),
    ({"temperature": Series("m", {}, ((500.0, 99.0),))}, "temp_max", None),  # outside
])
def test_gpu_health_summarises_each_series(series, field, expected):
    assert getattr(gpu_health(series, W), field) == expected


def test_hardware_xids_leave_application_errors_out():
    assert GpuHealth(xids=(13, 31, 63, 79)).hardware_xids == (63, 79)


@pytest.mark.parametrize(("low", "high", "degraded"), [
    (12.5e9, 50e9, True), (50e9, 50e9, False), (None, 50e9, False), (40e9, 50e9, False)])
def test_a_port_slower_than_its_siblings_is_degraded(low, high, degraded):
    assert NodeHealth("n", ib_rate_min_bps=low, ib_rate_max_bps=high).ib_degraded is degraded


def test_node_health_integrates_the_error_rate():
    health = node_health("gpu04", {"ib_errors": s(0.0, 0.1, 0.1, 0.0),
                                   "ib_tx": s(1e9, 3e9, 2e9, 2e9)}, W)
    assert health.ib_errors == pytest.approx(6.0) and health.ib_tx_bps == 2e9


@pytest.mark.parametrize(("points", "rates"), [
    (((0, 0), (10, 100), (20, 300)), ((10, 10.0), (20, 20.0))),
    (((0, 500), (10, 100)), ((10, 10.0),)),  # reset: counted since
    (((0, 1), (0, 2)), ()),
])
def test_counter_rate(points, rates):
    assert counter_rate(points) == rates


def test_counter_increase_counts_through_resets():
    assert counter_increase(((0, 5), (1, 9), (2, 2), (3, 3))) == 4 + 2 + 1


@pytest.mark.parametrize(("how", "expected"), [
    ("sum", ((1, 3.0), (2, 2.0))), ("min", ((1, 1.0), (2, 2.0))), ("max", ((1, 2.0), (2, 2.0)))])
def test_combine_devices(how, expected):
    assert combine([((1, 1), (2, 2)), ((1, 2),)], how) == expected


@pytest.mark.parametrize(("how", "expected"), [
    ("mean", [0x30, 3.0]), ("max", [0x40, 4.0]), ("or", [0x60, 6.0])])
def test_regrid_reduces_bitmasks_with_or_and_codes_with_max(how, expected):
    points = [(10, 0x20), (20, 0x40), (70, 2), (80, 4)]
    assert regrid(points, W, 2, how) == pytest.approx(expected)


@pytest.mark.parametrize(("channel", "values", "back"), [
    ("temperature", [33.4, 89.6, None, 300], [33.0, 90.0, None, 254.0]),
    ("throttle", [0x60, 0x1, None], [96.0, 1.0, None]),
    ("sm_clock", [1980, 345.4], [1980.0, 345.0]),
])
def test_health_channels_round_trip(channel, values, back):
    assert compact.decode(compact.encode({channel: values})) == {channel: back}


@pytest.mark.parametrize("rate", [0.0, 2e6, 3.1e9, 50e9, 900e9, 4e12])
def test_byte_rates_round_trip_within_a_tenth_of_a_percent(rate):
    [back] = compact.decode(compact.encode({"ib_tx": [rate]}))["ib_tx"]
    assert back == pytest.approx(rate, rel=1e-3, abs=1e-3)


def test_residencies_become_the_events_maps_bitmask_where_a_reason_held_most_of_a_bucket():
    from apps.analysis.health import residency_mask

    assert residency_mask({"thermal_throttle": [0.0, 0.6, 1.0, None],
                           "power_throttle": [0.7, 0.1, 0.5, None]}) == \
        [0x04, 0x40, 0x44, None]
    assert residency_mask({}) == []


@pytest.mark.parametrize(("gpus", "expected"), [
    ([("a", 0.9, 3e10), ("b", 0.9, 3e10), ("c", 0.9, 1e9)], ("c",)),
    ([("a", 0.9, 3e10), ("b", 0.9, 3e10), ("c", 0.9, 2e10)], ()),
    # held and never used: no NVLink traffic, and no part of the comparison (issue 28)
    ([("a", 0.9, 3e10), ("b", 0.9, 3e10), ("c", 0.0, 0.0), ("d", 0.01, 0.0)], ()),
    ([("a", 0.9, 3e10), ("b", 0.0, 0.0)], None),  # one GPU ran: nothing to compare
    ([("a", 0.9, 3e10), ("b", 0.9, None)], None),  # NVLink not measured on one
    ([("a", 0.9, 1e9), ("b", 0.9, 3e10), ("c", 0.9, 3e10), ("d", 0.0, 0.0)], ("a",)),
])
def test_nvlink_laggards_are_found_among_the_gpus_that_ran(gpus, expected):
    assert nvlink_laggards(gpus) == expected
