"""Figure builders: plain dicts Plotly can draw, built from plain numbers."""

from __future__ import annotations

import json

import pytest

from apps.jobs import charts


@pytest.mark.parametrize(("measure", "labels"), [
    ("sm_active", ["GPU util (busy)", "SM active (computing)", "tensor pipe active"]),
    ("gpu_util", ["GPU util (busy)", "tensor pipe active"]),
])
def test_activity_bars_compare_busy_with_computing(measure, labels):
    fig = charts.activity_bars({"gpu_util": 0.87, "sm_active": 0.19, "tensor_active": 0.05},
                               measure)
    assert fig["data"][0]["y"] == labels
    assert fig["data"][0]["x"][0] == 87.0
    json.dumps(fig)


def test_the_split_bar_stacks_the_four_states_in_order():
    fig = charts.split_bar({"useful": 1.5, "waiting": 5.0, "held_idle": 1.0, "no_process": 0.5})
    assert [t["x"][0] for t in fig["data"]] == [1.5, 5.0, 1.0, 0.5]
    assert fig["layout"]["barmode"] == "stack"


def test_the_heatmap_keeps_gaps_and_orders_rows_as_given():
    rows = [("gpu01:0", [0.5, None, 1.0]), ("gpu01:1", [0.0, 0.25, None])]
    fig = charts.gpu_heatmap(rows, start=0.0, step=60.0, title="SM active per GPU")
    trace = fig["data"][0]
    assert trace["y"] == ["gpu01:0", "gpu01:1"]
    assert trace["z"] == [[50.0, None, 100.0], [0.0, 25.0, None]]
    assert trace["x"][0] == "1970-01-01T00:00:30Z"  # the middle of the first window
    json.dumps(fig)


@pytest.mark.parametrize(("throttle", "xid", "level"), [
    (0, 0, 0), (0x1, 0, 0), (0x4, 0, 1), (0x80, 0, 1), (0x8, 0, 2), (0x20, 0, 3),
    (0x40 | 0x4, 0, 3), (0x60, 63, 4), (None, None, None), (None, 79, 4)])
def test_event_levels_show_the_worst_reason(throttle, xid, level):
    assert charts.event_level(throttle, xid) == level


def test_series_lines_group_by_node_and_scale():
    rows = [("gpu01:0", [0.5, None]), ("gpu02:0", [1.0, 0.25])]
    fig = charts.series_lines(rows, 0.0, 60.0, "SM active", "%", "job", 100.0, ["gpu02:0"])
    assert [t["legendgroup"] for t in fig["data"]] == ["gpu01", "gpu02"]
    assert fig["data"][0]["y"] == [50.0, None]
    assert [t["line"]["width"] for t in fig["data"]] == [1.2, 3]
    assert "job-exclusive" in fig["layout"]["title"]["text"]
    assert "node-shared" in charts.series_lines(rows, 0, 60, "IB", "GB/s", "node")["layout"][
        "title"]["text"]


def test_many_gpus_become_per_node_means():
    rows = [(f"gpu{n:02d}:{i}", [float(i), None]) for n in range(1, 10) for i in range(8)]
    fig = charts.series_lines(rows, 0.0, 60.0, "SM active", "%", "job")
    assert len(fig["data"]) == 9 and fig["data"][0]["name"] == "gpu01 (mean)"
    assert fig["data"][0]["y"] == [3.5, None]


def test_phase_bars_keep_the_straggler_apart_from_the_waiters():
    ranks = [(0, {"backward": 10.0, "communication": 40.0}), (1, {"data_loading": 45.0}),
             (2, {"communication": 38.0})]
    fig = charts.phase_bars(ranks, 1, "data_loading", [0, 2])
    assert fig["data"][0]["y"] == ["rank 0 (waited)", "rank 1 ◀ straggler (data loading)",
                                   "rank 2 (waited)"]
    comm = next(t for t in fig["data"] if t["name"] == "communication")
    assert comm["x"] == [40.0, 0.0, 38.0]
    json.dumps(fig)


@pytest.mark.parametrize(("name", "figure"), [
    ("activity", lambda: charts.activity_bars({"gpu_util": 0.9, "sm_active": 0.2}, "sm_active")),
    ("split", lambda: charts.split_bar({"useful": 1.0})),
    ("waiting", lambda: charts.waiting_bars([("gpu01:0", 0.2, 0.7)], ["gpu01:0"])),
    ("heatmap", lambda: charts.gpu_heatmap([("gpu01:0", [0.5])], 0.0, 60.0, "SM active")),
    ("events", lambda: charts.events_heatmap([("gpu01:0", [0], [0])], 0.0, 60.0)),
    ("phases", lambda: charts.phase_bars([(0, {"forward": 1.0})], None, "", [])),
])
def test_every_job_chart_says_its_scope_in_the_title(name, figure):
    """These are the job's own GPUs (or its own traces): job-exclusive, never node-shared."""
    title = figure()["layout"]["title"]["text"]
    assert title.endswith("· job-exclusive"), (name, title)


# --- Short jobs: one or a few samples are drawn, not left blank (issue 19) ------------------


def test_a_single_sample_is_a_marked_point_in_the_jobs_window():
    fig = charts.series_lines([("gpu01:0", [0.4])], 3600.0, 3600.0, "SM active", "%", "job",
                              100.0)
    trace = fig["data"][0]
    assert trace["mode"] == "lines+markers" and trace["marker"]["size"] == 9
    assert trace["x"] == ["1970-01-01T01:30:00Z"] and trace["y"] == [40.0]
    assert fig["layout"]["xaxis"]["range"] == ["1970-01-01T01:00:00Z", "1970-01-01T02:00:00Z"]


def test_a_few_samples_are_marked_and_a_long_series_is_a_plain_line():
    few = charts.series_lines([("gpu01:0", [0.1] * charts.MARKERS_UP_TO)], 0, 60, "x", "%",
                              "job")
    assert few["data"][0]["mode"] == "lines+markers" and "xaxis" in few["layout"]
    many = charts.series_lines([("gpu01:0", [0.1] * (charts.MARKERS_UP_TO + 1))], 0, 60, "x",
                               "%", "job")
    assert many["data"][0]["mode"] == "lines" and "marker" not in many["data"][0]
    assert "xaxis" not in many["layout"]


@pytest.mark.parametrize("figure", [
    lambda: charts.gpu_heatmap([("gpu01:0", [0.5]), ("gpu01:1", [None])], 0.0, 3600.0, "SM"),
    lambda: charts.events_heatmap([("gpu01:0", [0x20], [0])], 0.0, 3600.0),
])
def test_a_one_sample_heatmap_is_one_column_as_wide_as_its_interval(figure):
    fig = figure()
    trace = fig["data"][0]
    assert "x" not in trace and trace["x0"] == "1970-01-01T00:30:00Z"
    assert trace["dx"] == 3_600_000  # milliseconds on a date axis
    assert fig["layout"]["xaxis"]["range"] == ["1970-01-01T00:00:00Z", "1970-01-01T01:00:00Z"]
    json.dumps(fig)


def test_the_roofline_is_log_log_with_a_roof_per_pipe_and_a_marker_per_gpu():
    from apps.analysis.gpu_peaks import BY_KEY
    from apps.analysis.roofline import GpuActivity, roofline

    h100 = BY_KEY["h100-sxm"]
    gpus = [GpuActivity("n:0", "NVIDIA H100 80GB HBM3", "nvidia", 0.5, {"tensor": 0.4}),
            GpuActivity("n:1", "NVIDIA H100 80GB HBM3", "nvidia", 0.02, {"tensor": 0.6}),
            GpuActivity("n:2", "NVIDIA H100 80GB HBM3", "nvidia", 0.5, {"tensor": 0.0})]
    fig = charts.roofline_chart(roofline(gpus))
    assert fig["layout"]["xaxis"]["type"] == fig["layout"]["yaxis"]["type"] == "log"
    memory, *roofs = [t for t in fig["data"] if t["mode"] == "lines"]
    # the memory roof climbs to the highest pipe's ridge; each pipe is flat from its own
    assert memory["x"][1] == pytest.approx(h100.pipes["tensor"] / h100.memory_bps)
    assert sorted(r["y"][0] for r in roofs) == sorted(p / 1e12 for p in h100.pipes.values())
    markers = {t["name"]: t["text"] for t in fig["data"] if t["mode"] == "markers"}
    # the idle GPU (no FLOPs) has no place on log axes
    assert markers == {"GPU, memory-bound": ["n:0"], "GPU, compute-bound": ["n:1"]}
    json.dumps(fig)
