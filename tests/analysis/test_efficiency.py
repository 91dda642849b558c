"""Efficiency maths: table tests on hand-made series (milliseconds, no database)."""

from __future__ import annotations

import math

import pytest

from apps.analysis import efficiency as eff
from apps.analysis.timeseries import GpuKey, Series, Window, regrid

W = Window(0.0, 3000.0)  # 100 samples at 30 s
T = [30.0 * (i + 1) for i in range(100)]
G0, G1 = GpuKey("gpu01", 0), GpuKey("gpu01", 1)


def flat(value: float, times=T) -> Series:
    return Series("m", {}, tuple((t, value) for t in times))


def steps(*parts: tuple[int, float]) -> Series:
    """``steps((50, 0.9), (50, 0.1))``: 50 samples at 0.9 then 50 at 0.1."""
    values = [v for n, v in parts for _ in range(n)]
    return Series("m", {}, tuple(zip(T, values, strict=True)))


@pytest.mark.parametrize(("series", "measure"), [
    ({"sm_active": flat(0.5), "gpu_util": flat(0.9)}, "sm_active"),
    ({"gr_engine_active": flat(0.5), "gpu_util": flat(0.9)}, "gr_engine_active"),
    ({"gpu_util": flat(0.9)}, "gpu_util"),
    ({"sm_active": Series("m", {}, ((30.0, math.nan),)), "gpu_util": flat(0.9)}, "gpu_util"),
    ({"fb_used": flat(100)}, None),
])
def test_it_falls_back_sm_then_gr_engine_then_util(series, measure):
    assert eff.choose_measure(series) == measure


@pytest.mark.parametrize(("series", "split"), [
    # computing flat out: all useful
    ({"sm_active": flat(1.0), "gpu_util": flat(1.0), "fb_used": flat(70000)},
     eff.Split(1.0, 0.0, 0.0, 0.0)),
    # the NCCL signature: util 90 %, SM 20 % -> 20 useful, 70 waiting, 10 idle (held)
    ({"sm_active": flat(0.2), "gpu_util": flat(0.9), "fb_used": flat(70000)},
     eff.Split(0.2, 0.7, 0.1, 0.0)),
    # a notebook holding memory, doing nothing
    ({"sm_active": flat(0.0), "gpu_util": flat(0.0), "fb_used": flat(9000)},
     eff.Split(0.0, 0.0, 1.0, 0.0)),
    # allocated, no process at all
    ({"sm_active": flat(0.0), "gpu_util": flat(0.0), "fb_used": flat(0)},
     eff.Split(0.0, 0.0, 0.0, 1.0)),
    # half computing, half empty
    ({"sm_active": steps((50, 0.8), (50, 0.0)), "gpu_util": steps((50, 0.8), (50, 0.0)),
      "fb_used": steps((50, 40000), (50, 0))},
     eff.Split(0.4, 0.0, 0.1, 0.5)),
    # duty cycle only: busy counts as useful (an upper bound)
    ({"gpu_util": flat(0.6), "fb_used": flat(2000)}, eff.Split(0.6, 0.0, 0.4, 0.0)),
    # a bare CUDA context (500 MiB) is not memory held: the site's one reading (issue 26)
    ({"gpu_util": flat(0.6), "fb_used": flat(500)}, eff.Split(0.6, 0.0, 0.0, 0.4)),
    # no memory series: idle time counts as held
    ({"sm_active": flat(0.5), "gpu_util": flat(0.5)}, eff.Split(0.5, 0.0, 0.5, 0.0)),
])
def test_it_splits_a_gpu_time(series, split):
    s = eff.summarise_gpu(G0, series, W)
    assert s is not None
    for name in ("useful", "waiting", "held_idle", "no_process"):
        assert getattr(s.split, name) == pytest.approx(getattr(split, name)), name
    assert s.split.total == pytest.approx(1.0)


@pytest.mark.parametrize(("values", "mean", "p5", "p50", "p95", "idle"), [
    ([0.5] * 100, 0.5, 0.5, 0.5, 0.5, 0.0),
    ([0.0] * 50 + [1.0] * 50, 0.5, 0.0, 0.0, 1.0, 0.5),
    ([i / 100 for i in range(100)], 0.495, 0.04, 0.49, 0.94, 0.05),
])
def test_it_computes_time_weighted_stats_and_idle_fraction(values, mean, p5, p50, p95, idle):
    s = eff.summarise_gpu(G0, {"sm_active": Series("m", {}, tuple(zip(T, values, strict=True)))},
                          W)
    assert s is not None
    assert (s.activity.mean, s.activity.p5, s.activity.p50, s.activity.p95) == pytest.approx(
        (mean, p5, p50, p95))
    assert s.idle_fraction == pytest.approx(idle)


def test_a_gap_counts_as_missing_time_not_as_a_long_sample():
    # 10 samples at 1.0, then a 20-minute hole, then 10 samples at 0.0
    times = [30.0 * i for i in range(1, 11)] + [1500.0 + 30.0 * i for i in range(1, 11)]
    values = [1.0] * 10 + [0.0] * 10
    s = eff.summarise_gpu(G0, {"sm_active": Series("m", {}, tuple(zip(times, values,
                                                                      strict=True)))}, W)
    assert s is not None
    # the first sample after the hole stands for 60 s (twice the usual gap), not 1230 s
    assert s.measured_seconds == pytest.approx(300 + 60 + 270)
    assert s.activity.mean == pytest.approx(300 / 630)


def test_irregular_samples_are_weighted_by_time():
    # 1.0 for 10 samples 30 s apart (300 s), then 0.0 at +60 s and +30 s (90 s)
    pts = (*((30.0 * i, 1.0) for i in range(1, 11)), (360.0, 0.0), (390.0, 0.0))
    s = eff.summarise_gpu(G0, {"sm_active": Series("m", {}, pts)}, Window(0, 390))
    assert s is not None
    assert s.activity.mean == pytest.approx(300 / 390)


def test_waiting_with_traffic_is_reported_where_traffic_is_measured():
    series = {"sm_active": flat(0.2), "gpu_util": flat(0.9), "fb_used": flat(50000),
              "nvlink_tx": steps((25, 5e9), (75, 0.0))}
    s = eff.summarise_gpu(G0, series, W)
    assert s is not None and s.waiting_with_traffic == pytest.approx(0.25)
    assert eff.summarise_gpu(G0, {"sm_active": flat(0.2), "gpu_util": flat(0.9)},
                             W).waiting_with_traffic is None


def test_hours_come_from_slurm_and_only_the_weighting_from_samples():
    gpus = {G0: {"sm_active": flat(0.25), "gpu_util": flat(0.25), "fb_used": flat(10)},
            G1: {"sm_active": flat(0.75), "gpu_util": flat(0.75), "fb_used": flat(10)}}
    # Slurm says 2 GPUs x 1 hour, although the samples only span 50 minutes.
    job = eff.summarise_job(gpus, W, allocated_gpu_hours=2.0)
    assert job.hours.useful == pytest.approx(1.0)
    assert job.hours.no_process == pytest.approx(1.0)
    assert job.hours.total == pytest.approx(2.0)
    assert job.coverage == pytest.approx(6000 / 7200)


@pytest.mark.parametrize(("series", "words"), [
    ({"sm_active": flat(0.19), "gpu_util": flat(0.87), "fb_used": flat(60000)},
     "GPUs were busy 87% of the time but computing 19%: most busy time was waiting."),
    ({"sm_active": flat(0.8), "gpu_util": flat(0.9), "fb_used": flat(60000)},
     "GPUs were computing 80% of the time (busy 90%)."),
    ({"sm_active": flat(0.01), "gpu_util": flat(0.02), "fb_used": flat(9000)},
     "GPUs sat idle 98% of the time with memory held"),
    ({"sm_active": flat(0.0), "gpu_util": flat(0.0), "fb_used": flat(0)},
     "GPUs had no process 100% of the time"),
    ({"gpu_util": flat(0.87)},
     "GPUs were busy 87% of the time. Profiling metrics unavailable: efficiency is an upper "
     "bound."),
    ({"sm_active": flat(0.3), "gpu_util": flat(0.5), "fb_used": steps((50, 9000), (50, 0))},
     "GPUs were busy 50% of the time and computing 30%; idle 50%."),
])
def test_the_verdict_says_what_happened(series, words):
    job = eff.summarise_job({G0: series}, W, allocated_gpu_hours=1.0)
    assert job.verdict.startswith(words)


def test_gpus_without_series_are_missing_not_zero():
    job = eff.summarise_job({G0: {"sm_active": flat(0.5)}}, W, 2.0, expected=[G0, G1])
    assert job.missing == (G1,)
    assert job.verdict.endswith("Telemetry covers 1 of 2 GPUs.")
    empty = eff.summarise_job({}, W, 2.0, expected=[G0, G1])
    assert not empty.has_data and empty.hours.total == 0.0
    assert "unknown" in empty.verdict


@pytest.mark.parametrize(("measures", "job_measure", "upper"), [
    (["sm_active", "sm_active"], "sm_active", False),
    (["sm_active", "gr_engine_active"], "gr_engine_active", True),
    (["sm_active", "gpu_util"], "gpu_util", True),
])
def test_the_job_names_its_weakest_measure(measures, job_measure, upper):
    gpus = {GpuKey("n", i): {m: flat(0.5)} for i, m in enumerate(measures)}
    job = eff.summarise_job(gpus, W, 1.0)
    assert (job.measure, job.upper_bound) == (job_measure, upper)
    assert bool(job.measure_note) is upper


@pytest.mark.parametrize(("points", "n", "expected"), [
    ([(30.0, 1.0), (60.0, 3.0)], 1, [2.0]),
    ([(30.0, 1.0), (3000.0, 3.0)], 2, [1.0, 3.0]),
    ([(30.0, 1.0)], 3, [1.0, None, None]),
    ([(1000.0, 1.0)], 3, [1.0, None, None]),  # t = 1000 ends the first third exactly
    ([(0.0, 9.0), (3001.0, 9.0)], 2, [None, None]),  # outside (start, end]
])
def test_regrid_buckets_like_avg_over_time(points, n, expected):
    assert regrid(points, W, n) == expected


def test_a_slurm_gpu_count_above_the_series_found_is_reported():
    job = eff.summarise_job({G0: {"sm_active": flat(0.5)}}, W, 8.0, gpu_count=8)
    assert job.verdict.endswith("Telemetry covers 1 of 8 GPUs.")
