from __future__ import annotations

from apps.analysis.reports import Row
from apps.analysis.slo import Counts
from apps.reports import charts


def test_hours_stack_one_series_per_group_over_the_periods():
    rows = [Row(("nlp",), 0, 2.0), Row(("nlp",), 1, 3.0), Row(("vision",), 1, 1.0)]
    fig = charts.gpu_hours(rows, ["d1", "d2"])
    assert fig is not None
    assert {t["name"]: t["y"] for t in fig["data"]} == {"nlp": [2.0, 3.0], "vision": [0.0, 1.0]}


def test_groups_past_the_largest_go_to_other():
    rows = [Row((f"u{i:02d}",), 0, float(i + 1)) for i in range(charts.MAX_SERIES + 3)]
    fig = charts.gpu_hours(rows, ["all"])
    assert fig is not None
    names = [t["name"] for t in fig["data"]]
    assert len(names) == charts.MAX_SERIES + 1 and names[-1] == "other"
    assert fig["data"][-1]["y"] == [6.0]  # u00..u02: 1 + 2 + 3


def test_efficiency_lines_need_measured_time_and_two_periods():
    rows = [Row(("nlp",), 0, efficiency=Counts(1, 4)), Row(("nlp",), 1, efficiency=Counts(3, 4))]
    fig = charts.efficiency(rows, ["d1", "d2"])
    assert fig is not None and fig["data"][0]["y"] == [25.0, 75.0]
    assert charts.efficiency(rows[:1], ["d1"]) is None
    assert charts.gpu_hours([], ["d1"]) is None
