"""Plotly figures for chargeback pages, from plain numbers (pure, unit-tested)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from apps.core.figures import legend_below

Figure = dict[str, Any]

PARTS = ("useful", "waiting", "held_idle", "no_process", "unmeasured")
COLOURS = {"useful": "#1a7f37", "waiting": "#b35900", "held_idle": "#c62828",
           "no_process": "#98a2b3", "unmeasured": "#d0d5dd"}
LABELS = {"useful": "useful (computing)", "waiting": "busy, waiting",
          "held_idle": "idle, memory held", "no_process": "no process",
          "unmeasured": "no telemetry"}


def team_split(rows: Sequence[tuple[str, dict[str, float]]]) -> Figure:
    """One stacked bar per team: where its allocated GPU-hours went (hours by part)."""
    teams = [team for team, _ in rows]
    data = [{"type": "bar", "orientation": "h", "name": LABELS[part], "y": teams,
             "x": [round(hours.get(part, 0.0), 2) for _, hours in rows],
             "marker": {"color": COLOURS[part]},
             "hovertemplate": f"%{{y}} {LABELS[part]}: %{{x:.1f}} GPU-h<extra></extra>"}
            for part in PARTS]
    return {"data": data, "layout": legend_below({
        "barmode": "stack", "height": 90 + 28 * len(teams),
        "margin": {"l": 110, "r": 20, "t": 10, "b": 40},
        "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"size": 12}, "xaxis": {"title": {"text": "GPU-hours"}},
        "yaxis": {"autorange": "reversed"}})}
