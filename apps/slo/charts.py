"""Plotly figures for the SLO pages, from the stored trend (pure, unit-tested)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from apps.core.figures import legend_below

Figure = dict[str, Any]

STATUS_COLOURS = {"ok": "#1a7f37", "slow_burn": "#b35900", "fast_burn": "#c62828",
                  "breached": "#c62828", "no_data": "#98a2b3"}


def _pct(value: float | None) -> float | None:
    return None if value is None else round(value * 100, 2)


def trend(points: Sequence[Mapping[str, Any]], target: float, name: str) -> Figure:
    """Each day's SLI (bars, grey when the day had no events) against the target (a line),
    and the error budget left as the window went on (a line on the right axis)."""
    days = [p["start"][:10] for p in points]
    sli = [_pct(p.get("sli")) for p in points]
    colours = ["#3056d3" if v is None or v >= target * 100 else "#c62828" for v in sli]
    return {
        "data": [
            {"type": "bar", "name": f"{name} per day", "x": days, "y": sli,
             "marker": {"color": colours},
             "customdata": [[p["good"], p["total"]] for p in points],
             "hovertemplate": "%{x}: %{y:.1f}% (%{customdata[0]:.4g} good of "
                              "%{customdata[1]:.4g})<extra></extra>"},
            {"type": "scatter", "mode": "lines", "name": "target", "x": days,
             "y": [round(target * 100, 2)] * len(days),
             "line": {"color": "#667085", "dash": "dash", "width": 1}},
            {"type": "scatter", "mode": "lines+markers", "name": "budget left", "x": days,
             "y": [_pct(p.get("remaining")) for p in points], "yaxis": "y2",
             "line": {"color": "#b35900", "width": 2}, "marker": {"size": 4},
             "hovertemplate": "%{x}: %{y:.0f}% of the budget left<extra></extra>"},
        ],
        "layout": legend_below({
            "height": 240, "margin": {"l": 50, "r": 55, "t": 10, "b": 40},
            "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)",
            "font": {"size": 12}, "bargap": 0.15, "showlegend": True,
            "yaxis": {"title": {"text": "SLI"}, "ticksuffix": "%", "rangemode": "tozero"},
            "yaxis2": {"title": {"text": "budget"}, "ticksuffix": "%", "overlaying": "y",
                       "side": "right", "zeroline": True, "zerolinecolor": "#c62828"},
        }),
    }


def budgets(rows: Sequence[tuple[str, float, str]]) -> Figure:
    """The platform overview: one bar per scorecard, budget left, worst first."""
    labels = [label for label, _, _ in rows]
    return {
        "data": [{"type": "bar", "orientation": "h", "y": labels,
                  "x": [round(max(min(v, 1.0), -1.0) * 100, 1) for _, v, _ in rows],
                  "marker": {"color": [STATUS_COLOURS.get(s, "#3056d3") for _, _, s in rows]},
                  "hovertemplate": "%{y}: %{x:.0f}% of the budget left<extra></extra>"}],
        "layout": {"height": 80 + 22 * len(rows), "margin": {"l": 260, "r": 20, "t": 10,
                                                             "b": 40},
                   "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)",
                   "font": {"size": 12}, "xaxis": {"range": [-100, 100], "ticksuffix": "%",
                                                   "title": {"text": "error budget left "
                                                                     "(clipped at ±100%)"}},
                   "yaxis": {"autorange": "reversed"}},
    }
