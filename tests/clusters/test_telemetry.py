"""Query bounds for job telemetry: the arithmetic, without a server."""

from __future__ import annotations

import pytest

from apps.analysis.timeseries import GpuKey, Series, Window
from apps.clusters.adapters.catalogue import Catalogue
from apps.clusters.adapters.telemetry import (
    DEFAULT_MAX_SAMPLES,
    MAX_POINTS,
    GpuInterval,
    _inside,
    _keyer,
    peak_samples,
    plan,
)

DAY = 86400


@pytest.mark.parametrize("seconds", [1, 29, 30, 95, 3600, 5 * 3600 + 7, DAY, 7 * DAY, 90 * DAY])
def test_a_series_never_has_more_than_300_points_nor_windows_below_a_scrape(seconds):
    p = plan(Window(1000, 1000 + seconds), 30)
    assert 1 <= p.n <= MAX_POINTS
    assert p.n * p.step == pytest.approx(seconds)  # the windows tile the job exactly
    assert p.step >= 30 or p.n == 1


def test_a_512_gpu_7_day_job_stays_far_below_the_default_max_samples():
    p = plan(Window(0, 7 * DAY), scrape_interval=30)
    assert (p.n, p.step) == (300, 2016.0)  # 604800 s / 300 windows
    # In memory at once: 300 output points per GPU + one 2016 s window of raw samples
    # (ceil(2016 / 30) + 1 = 69): 512 x (300 + 69) = 188,928 samples.
    assert peak_samples(512, p, 30) == 512 * (300 + 69) == 188_928
    assert peak_samples(512, p, 30) < DEFAULT_MAX_SAMPLES / 100
    # Read over the whole query (not held at once): 512 x 20,160 = 10.3 M, still < 50 M.
    assert 512 * (7 * DAY // 30) == 10_321_920 < DEFAULT_MAX_SAMPLES


# --- Binding by host: cutting series to the held intervals ---------------------------------


def _grouped(p, *keys):
    """Every key's series has one point per window, at the window's end (as Prometheus)."""
    points = tuple((t, float(k)) for k, t in enumerate(p.times()))
    return {key: {"sm_active": Series("DCGM_FI_PROF_SM_ACTIVE", {}, points)} for key in keys}


def test_inside_keeps_held_gpus_only_and_windows_whose_middle_is_held():
    p = plan(Window(0, 600), 30)  # 20 windows of 30 s, points at 30, 60, ..., 600
    a, b, free = GpuKey("n1", 0), GpuKey("n1", 1), GpuKey("n1", 2)
    intervals = [GpuInterval("n1", 0, 0, 600),
                 GpuInterval("n1", 1, 100, 200), GpuInterval("n1", 1, 400, 460)]
    kept = _inside(_grouped(p, a, b, free), intervals, p)
    assert set(kept) == {a, b}  # a GPU the job never held is dropped
    assert len(kept[a]["sm_active"].points) == 20
    # windows (90,120] .. (180,210] have middles 105..195 inside [100,200]; then 405, 435
    assert [t for t, _ in kept[b]["sm_active"].points] == [120, 150, 180, 210, 420, 450]
    assert kept[b]["sm_active"].metric == "DCGM_FI_PROF_SM_ACTIVE"


def test_inside_keeps_nothing_for_an_interval_between_two_windows_middles():
    p = plan(Window(0, 600), 30)
    key = GpuKey("n1", 0)
    kept = _inside(_grouped(p, key), [GpuInterval("n1", 0, 16, 44)], p)  # middles 15 and 45
    assert kept[key]["sm_active"].points == ()


def test_series_are_filed_under_the_held_interval_when_their_uuid_is_known():
    catalogue = Catalogue()
    key_of = _keyer(catalogue, {"GPU-abc": GpuKey("n1", 3)})
    by_uuid = Series("m", {"Hostname": "n1", "gpu": "0", "UUID": "GPU-abc"})
    other = Series("m", {"Hostname": "n1", "gpu": "1", "UUID": "GPU-def"})
    assert key_of(by_uuid) == GpuKey("n1", 3)  # Slurm's index, not NVML's
    assert key_of(other) == GpuKey("n1", 1)
    assert _keyer(catalogue, {})(by_uuid) == GpuKey("n1", 0)
