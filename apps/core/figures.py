"""Layout helpers shared by the Plotly figures every app builds in Python (``charts.py``)."""

from __future__ import annotations

from typing import Any

LEGEND_ROOM = 28  # px below the x axis for one row of legend entries


def legend_below(layout: dict[str, Any], rows: int = 1) -> dict[str, Any]:
    """The legend in a band of its own under the plot, below the x axis's ticks and title.

    A legend placed at ``y=-0.25`` of the plot area lands on the axis title at some heights;
    anchored to the bottom of the whole figure (``yref: container``) it never does. The
    bottom margin and the height grow by the band, so the plot keeps its size."""
    margin = dict(layout.get("margin") or {})
    extra = LEGEND_ROOM * rows + 10
    margin["b"] = int(margin.get("b", 40)) + extra
    # traceorder normal: left to right in the order of the data (stacked bars would reverse it)
    legend = {**(layout.get("legend") or {}), "orientation": "h", "yref": "container",
              "y": 0, "yanchor": "bottom", "x": 0, "xanchor": "left", "traceorder": "normal"}
    return {**layout, "margin": margin, "legend": legend, "showlegend": layout.get(
        "showlegend", True), "height": int(layout.get("height", 260)) + extra}
