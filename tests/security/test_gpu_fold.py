"""GpuFold: GPU series folded into a frame's buckets one at a time, as a live read streams
them in (issue 29), with no series kept. Each case is the series folded and the points
of the frame they give."""

from __future__ import annotations

import math

import pytest

from apps.analysis.timeseries import Series
from apps.clusters.adapters.catalogue import Catalogue
from apps.security.adapters.telemetry import RawTelemetry
from apps.security.frames import GpuFold, Grid, build_frame

T0 = 1_790_000_000.0
GRID = Grid(T0, 60, 3)  # buckets ending at T0+60, T0+120, T0+180


def _series(points, job="", host="gpu01", gpu="0", **labels):
    return Series("", {"Hostname": host, "gpu": gpu, "UUID": f"GPU-{host}-{gpu}",
                       **({"hpc_job": job} if job else {}), **labels},
                  tuple((T0 + dt, v) for dt, v in points))


def _frame(folded):
    fold = GpuFold(Catalogue(), GRID)
    for measure, series in folded:
        fold.add(measure, series)
    frame, stats = build_frame(RawTelemetry(60), Catalogue(), GRID, [], {}, set(), fold)
    assert not fold.gpus  # each GPU's buckets are dropped once its points are built
    return {(t.host, t.gpu): [(p.t - T0, p.owners, p.util, p.fb_mib, p.mig, p.together)
                              for p in t.points] for t in frame.gpus}, stats


@pytest.mark.parametrize(("folded", "points"), [
    pytest.param([("gpu_util", _series([(30, 50.0), (90, 70.0)], job="7"))],
                 {("gpu01", 0): [(60, ("7",), 50.0, None, False, ()),
                                 (120, ("7",), 70.0, None, False, ())]},
                 id="one labelled series, a point per bucket"),
    pytest.param([("gpu_util", _series([(10, 40.0), (50, 60.0)]))],
                 {("gpu01", 0): [(60, (), 50.0, None, False, ())]},
                 id="two points in a bucket are averaged; no label, no binding: free"),
    pytest.param([("gpu_util", _series([(0, 1.0), (200, 2.0), (60, math.nan)]))], {},
                 id="points on the grid's start, past its end or NaN fill no bucket"),
    pytest.param([("gpu_clock", _series([(30, 1.0)]))], {},
                 id="a measure no rule reads is left out"),
    pytest.param([("gpu_util", Series("", {"gpu": "0"}, ((T0 + 30, 1.0),)))], {},
                 id="a series naming no host is left out"),
    pytest.param([("gpu_util", _series([(30, 90.0)], job="1")),
                  ("fb_used", _series([(30, 100.0)], job="1")),
                  ("fb_used", _series([(30, 300.0)], job="2"))],
                 {("gpu01", 0): [(60, ("1", "2"), 90.0, 200.0, False, ("1", "2"))]},
                 id="two jobs' memory at one instant: held together"),
    pytest.param([("fb_used", _series([(20, 100.0)], job="1")),
                  ("fb_used", _series([(40, 300.0)], job="2"))],
                 {("gpu01", 0): [(60, ("1", "2"), None, 200.0, False, ())]},
                 id="one job after the other within a bucket: owners, not together"),
    pytest.param([("gpu_util", _series([(30, 5.0)], GPU_I_ID="1")),
                  ("gpu_util", _series([(150, 6.0)], gpu="1"))],
                 {("gpu01", 0): [(60, (), 5.0, None, True, ())],
                  ("gpu01", 1): [(180, (), 6.0, None, False, ())]},
                 id="a MIG label marks its buckets only"),
])
def test_folding_series_gives_the_frames_points(folded, points):
    assert _frame(folded)[0] == points


def test_hosts_with_a_job_label_are_mapped_the_others_are_named():
    _, stats = _frame([("gpu_util", _series([(30, 1.0)], job="7")),
                       ("gpu_util", _series([(30, 1.0)], host="gpu02"))])
    assert (stats.gpus, stats.gpu_buckets, stats.unmapped_hosts) == (2, 2, ["gpu02"])


def test_folds_of_two_stores_absorbed_give_the_frame_of_one_fold():
    a = [("gpu_util", _series([(30, 1.0), (90, 2.0)], job="7")),
         ("fb_used", _series([(30, 10.0)], job="7"))]
    b = [("gpu_util", _series([(150, 3.0)], host="gpu02")),
         ("fb_used", _series([(150, 30.0)], host="gpu02", job="8"))]
    whole, _ = _frame(a + b)
    first, second = GpuFold(Catalogue(), GRID), GpuFold(Catalogue(), GRID)
    for fold, folded in ((first, a), (second, b)):
        for measure, series in folded:
            fold.add(measure, series)
    merged = GpuFold(Catalogue(), GRID)
    merged.absorb(first)
    merged.absorb(second)
    frame, _ = build_frame(RawTelemetry(60), Catalogue(), GRID, [], {}, set(), merged)
    assert {(t.host, t.gpu): [(p.t - T0, p.owners, p.util, p.fb_mib, p.mig, p.together)
                              for p in t.points] for t in frame.gpus} == whole
    assert [t.uuid for t in frame.gpus] == ["GPU-gpu01-0", "GPU-gpu02-0"]


@pytest.mark.parametrize(("start", "end", "step", "grid"), [
    (T0, T0 + 600, 60, Grid(T0, 60, 10)),
    (T0 + 1, T0 + 600, 60, Grid(T0, 60, 10)),  # the window's start inside the first bucket
    (T0, T0 + 2, 0.5, Grid(T0, 1, 2)),  # a step of a second at least
])
def test_a_windows_grid_ends_at_its_end(start, end, step, grid):
    assert Grid.over(start, end, step) == grid
