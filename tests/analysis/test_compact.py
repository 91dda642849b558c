"""The archive's compact series: round trips at the stored resolution, and its size."""

from __future__ import annotations

import math

import pytest

from apps.analysis import compact


@pytest.mark.parametrize(("channel", "values", "back"), [
    ("gpu_util", [0.0, 0.5, 1.0, None, 1.7, -1.0], [0.0, 0.5, 1.0, None, 1.0, 0.0]),
    ("activity", [0.123, math.nan], [0.124, None]),
    ("fb_used", [0.0, 81559.4, 143771.0, None, 1e9], [0.0, 81560.0, 143772.0, None, 262136.0]),
    ("power", [699.6], [700.0]),
])
def test_it_round_trips_at_the_stored_resolution(channel, values, back):
    assert compact.decode(compact.encode({channel: values})) == {channel: back}


def test_three_hundred_points_of_five_channels_fit_in_about_two_kilobytes():
    n = 300
    wave = [0.5 + 0.5 * math.sin(i / 7) for i in range(n)]
    channels = {"gpu_util": wave, "activity": [w * 0.3 for w in wave],
                "tensor_active": [w * 0.1 for w in wave], "fb_used": [60000.0] * n,
                "power": [300 + 100 * w for w in wave]}
    blob = compact.encode(channels)
    assert len(blob) <= 3 * n + 2 * 2 * n + 8  # never worse than the raw layout
    assert len(compact.decode(blob)["activity"]) == n


@pytest.mark.parametrize("bad", [
    {"gpu_util": [0.1], "activity": [0.1, 0.2]},
    {"nope": [0.1]},
])
def test_it_refuses_unequal_or_unknown_channels(bad):
    with pytest.raises(compact.CompactError):
        compact.encode(bad)


def test_it_refuses_an_unknown_version():
    with pytest.raises(compact.CompactError):
        compact.decode(b"\x09\x00\x00")
    assert compact.decode(b"") == {}
