"""Plotly figures of a usage report, from its rows (pure, unit-tested)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from apps.analysis.reports import Row
from apps.core.figures import legend_below

Figure = dict[str, Any]
MAX_SERIES = 12  # the largest groups by GPU-hours; the rest are one "other" series


def _name(group: tuple[str, ...]) -> str:
    return " · ".join(group)


def gpu_hours(rows: Sequence[Row], labels: Sequence[str]) -> Figure | None:
    """GPU-hours per period, one stacked bar series per group (a bar per group when the
    report has one period)."""
    if not rows:
        return None
    totals: dict[tuple[str, ...], float] = {}
    for r in rows:
        totals[r.group] = totals.get(r.group, 0.0) + r.gpu_hours
    top = sorted(totals, key=lambda g: (-totals[g], g))[:MAX_SERIES]
    series: dict[str, list[float]] = {_name(g): [0.0] * len(labels) for g in top}
    for r in rows:
        name = _name(r.group) if r.group in top else "other"
        series.setdefault(name, [0.0] * len(labels))[r.period] += r.gpu_hours
    data = [{"type": "bar", "name": name, "x": list(labels), "y": [round(v, 2) for v in ys],
             "hovertemplate": f"{name} %{{x}}: %{{y:.1f}} GPU-h<extra></extra>"}
            for name, ys in series.items()]
    rows_of_legend = 1 + len(series) // 6
    return {"data": data, "layout": legend_below({
        "barmode": "stack", "height": 300, "margin": {"l": 60, "r": 20, "t": 10, "b": 40},
        "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"size": 12}, "yaxis": {"title": {"text": "GPU-hours"}},
        "xaxis": {"type": "category"}}, rows=rows_of_legend)}


def efficiency(rows: Sequence[Row], labels: Sequence[str]) -> Figure | None:
    """Efficiency (useful / measured GPU-time) per period, one line per largest group."""
    measured = [r for r in rows if r.efficiency.total > 0]
    if not measured or len(labels) < 2:
        return None
    totals: dict[tuple[str, ...], float] = {}
    for r in measured:
        totals[r.group] = totals.get(r.group, 0.0) + r.efficiency.total
    top = sorted(totals, key=lambda g: (-totals[g], g))[:MAX_SERIES]
    data = []
    for g in top:
        ys: list[float | None] = [None] * len(labels)
        for r in measured:
            if r.group == g and r.efficiency_share is not None:
                ys[r.period] = round(r.efficiency_share * 100, 1)
        data.append({"type": "scatter", "mode": "lines+markers", "name": _name(g),
                     "x": list(labels), "y": ys, "connectgaps": False,
                     "hovertemplate": f"{_name(g)} %{{x}}: %{{y}}%<extra></extra>"})
    return {"data": data, "layout": legend_below({
        "height": 260, "margin": {"l": 60, "r": 20, "t": 10, "b": 40},
        "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"size": 12}, "yaxis": {"title": {"text": "efficiency %"}, "range": [0, 100]},
        "xaxis": {"type": "category"}}, rows=1 + len(data) // 6)}
