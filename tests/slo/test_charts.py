"""The SLO figures are plain dicts built from the stored trend (no database)."""

from __future__ import annotations

from apps.slo import charts


def _point(day: int, good: float, total: float, sli: float | None, remaining: float) -> dict:
    return {"start": f"2026-11-{day:02d}T00:00:00+00:00", "good": good, "total": total,
            "sli": sli, "remaining": remaining}


def test_the_trend_shows_each_day_against_the_target_and_the_budget_left():
    points = [_point(1, 10, 10, 1.0, 1.0), _point(2, 0, 0, None, 1.0),
              _point(3, 5, 10, 0.5, -1.5)]
    fig = charts.trend(points, 0.9, "Queue wait")
    bars, target, budget = fig["data"]
    assert bars["x"] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert bars["y"] == [100.0, None, 50.0]
    assert bars["marker"]["color"] == ["#3056d3", "#3056d3", "#c62828"]  # below target: red
    assert target["y"] == [90.0] * 3 and budget["y"] == [100.0, 100.0, -150.0]
    assert budget["yaxis"] == "y2" and fig["layout"]["yaxis2"]["overlaying"] == "y"


def test_the_budget_chart_clips_overspent_budgets_and_colours_by_status():
    fig = charts.budgets([("NLP · Queue wait", -4.0, "breached"), ("Vision · Job success",
                                                                   0.8, "ok")])
    bar = fig["data"][0]
    assert bar["x"] == [-100.0, 80.0]
    assert bar["marker"]["color"] == ["#c62828", "#1a7f37"]
    assert fig["layout"]["height"] == 80 + 22 * 2
