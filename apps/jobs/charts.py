"""Plotly figures for the job page, built in Python from plain values (pure, unit-tested).

Templates emit each figure with ``json_script`` and ``static/js/charts.js`` draws every
``[data-figure]``. No model access here: views pass numbers in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from itertools import zip_longest
from typing import Any

from apps.analysis.gpu_peaks import pipe_words
from apps.analysis.roofline import Roofline, RooflinePoint
from apps.analysis.vendors import measure_words
from apps.core.figures import legend_below

Figure = dict[str, Any]

SPLIT_COLOURS = {"useful": "#1a7f37", "waiting": "#b35900", "held_idle": "#c62828",
                 "no_process": "#98a2b3"}
SPLIT_LABELS = {"useful": "useful (computing)", "waiting": "busy, waiting",
                "held_idle": "idle, memory held", "no_process": "no process"}
# Every chart's title says its scope (issue 6): the GPUs were this job's alone, or the
# node's counters also count other jobs on it.
SCOPE_WORDS = {"job": "job-exclusive", "node": "node-shared"}
_LAYOUT: dict[str, Any] = {"margin": {"l": 60, "r": 20, "t": 30, "b": 40}, "height": 260,
                           "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)",
                           "font": {"size": 12}}


def activity_bars(means: Mapping[str, float], measure: str, vendor: str = "") -> Figure:
    """GPU utilisation against SM (or fallback) activity against tensor-pipe activity, in
    the words of the GPUs' vendor (GFX activity, VALU busy, MFMA on AMD)."""
    labels = {measure: _measure_label(measure, vendor),
              "gpu_util": "GFX activity (busy)" if vendor == "amd" else "GPU util (busy)",
              "tensor_active": measure_words("tensor_active", vendor)}
    keys = [k for k in dict.fromkeys(("gpu_util", measure, "tensor_active")) if k in means]
    return {
        "data": [{"type": "bar", "orientation": "h", "y": [labels[k] for k in keys],
                  "x": [round(means[k] * 100, 1) for k in keys],
                  "text": [f"{means[k] * 100:.0f}%" for k in keys], "textposition": "auto",
                  "marker": {"color": ["#3056d3", "#1a7f37", "#7b3fbf"][:len(keys)]},
                  "hoverinfo": "x+y"}],
        "layout": {**_LAYOUT, "height": 190, "margin": {**_LAYOUT["margin"], "l": 170},
                   "title": _title("Busy, computing, tensor pipe (mean of the job's GPUs)"),
                   "xaxis": {"range": [0, 100], "ticksuffix": "%"},
                   "yaxis": {"autorange": "reversed"}},
    }


def split_bar(hours: Mapping[str, float]) -> Figure:
    """Allocated GPU-hours as one stacked bar: useful / waiting / held idle / no process."""
    data = [{"type": "bar", "orientation": "h", "name": SPLIT_LABELS[k], "y": ["GPU-hours"],
             "x": [round(hours.get(k, 0.0), 2)], "marker": {"color": SPLIT_COLOURS[k]},
             "hovertemplate": f"{SPLIT_LABELS[k]}: %{{x:.1f}} GPU-h<extra></extra>"}
            for k in SPLIT_LABELS]
    return {"data": data, "layout": legend_below({
        **_LAYOUT, "height": 140, "barmode": "stack", "margin": {**_LAYOUT["margin"], "l": 20},
        "title": _title("Allocated GPU-hours by use"), "yaxis": {"showticklabels": False}})}


def gpu_heatmap(rows: Sequence[tuple[str, Sequence[float | None]]], start: float, step: float,
                title: str) -> Figure:
    """A GPU x time heatmap (0..100 %); rows arrive grouped by node (``gpu01:0`` ...)."""
    n = max((len(values) for _, values in rows), default=0)
    z = [[None if v is None else round(v * 100, 1) for v in values] for _, values in rows]
    return {
        "data": [{"type": "heatmap", **_columns(start, step, n),
                  "y": [label for label, _ in rows], "z": z,
                  "zmin": 0, "zmax": 100, "colorscale": "Viridis",
                  "colorbar": {"title": {"text": "%"}},
                  "hovertemplate": "%{y} %{x}<br>%{z:.0f}%<extra></extra>"}],
        "layout": {**_LAYOUT, "height": max(180, 60 + 22 * len(rows)),
                   "margin": {**_LAYOUT["margin"], "l": 80},
                   "title": _title(title), **_window_axis(start, step, n),
                   "yaxis": {"autorange": "reversed", "type": "category", "dtick": 1}},
    }


def _columns(start: float, step: float, n: int) -> dict[str, Any]:
    """A heatmap's time columns, each centred in its sample's interval. One column is
    given as its start and width: from a single x Plotly cannot tell how wide a cell is,
    and draws a hairline."""
    if n == 1:
        return {"x0": _iso(start + 0.5 * step), "dx": step * 1000}  # a date axis counts ms
    return {"x": [_iso(start + (k + 0.5) * step) for k in range(n)]}


def _window_axis(start: float, step: float, n: int) -> dict[str, Any]:
    """A short series' time axis spans the samples' intervals, so its few points sit in
    the job's window instead of an axis Plotly stretches around one instant."""
    if not 0 < n <= MARKERS_UP_TO:
        return {}
    return {"xaxis": {"type": "date", "range": [_iso(start), _iso(start + n * step)]}}


def _title(text: str, scope: str = "job") -> dict[str, Any]:
    return {"text": f"{text} · {SCOPE_WORDS[scope]}", "font": {"size": 13}}


def _measure_label(measure: str, vendor: str = "") -> str:
    if vendor == "amd":
        return {"sm_active": "VALU busy (computing)", "gpu_util": "GFX activity"}.get(
            measure, measure)
    return {"sm_active": "SM active (computing)", "gr_engine_active": "graphics engine active",
            "gpu_util": "GPU util"}.get(measure, measure)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- Per-GPU and per-node series ----------------------------------------------------------

MAX_LINES = 64  # beyond this many GPUs, lines show per-node means (a legend of 256 is noise)
# A series this short is drawn with its points marked: one sample is no line at all (issue
# 19: short jobs under hourly telemetry had blank charts), a few are easier read as dots.
MARKERS_UP_TO = 12
PHASE_COLOURS = {"data_loading": "#8e5cd9", "forward": "#3056d3", "backward": "#1a7f37",
                 "communication": "#b35900", "optimizer": "#0f8b8d", "other": "#98a2b3"}
PHASE_LABELS = {"data_loading": "data loading", "forward": "forward", "backward": "backward",
                "communication": "communication", "optimizer": "optimizer", "other": "other"}
EVENT_LEVELS = ("none", "power cap", "HW slowdown", "thermal", "XID")
_EVENT_COLOURS = ["#eef1f6", "#f2c94c", "#f2994a", "#c62828", "#4a0d0d"]


def series_lines(rows: Sequence[tuple[str, Sequence[float | None]]], start: float, step: float,
                 title: str, unit: str, scope: str, scale: float = 1.0,
                 highlight: Sequence[str] = ()) -> Figure:
    """One line per GPU (or node), grouped by node in the legend; ``highlight`` thickens
    the named rows (the straggler). The title carries the scope: job-exclusive or shared."""
    rows = _per_node_means(rows) if len(rows) > MAX_LINES else list(rows)
    n = max((len(values) for _, values in rows), default=0)
    times = [_iso(start + (k + 0.5) * step) for k in range(n)]
    sparse = n <= MARKERS_UP_TO
    data = [{"type": "scatter", "mode": "lines+markers" if sparse else "lines", "name": label,
             "x": times, "y": [None if v is None else round(v * scale, 3) for v in values],
             "legendgroup": label.split(":", 1)[0], "connectgaps": False,
             "line": {"width": 3 if label in highlight else 1.2},
             **({"marker": {"size": 9 if n == 1 else 6}} if sparse else {}),
             "hovertemplate": f"{label} %{{x}}<br>%{{y:.3~f}} {unit}<extra></extra>"}
            for label, values in rows]
    # The legend stays at the right, clear of both axis titles: grouped by node, Plotly stacks
    # a group's entries even in a horizontal legend, so below the plot it would not fit.
    return {"data": data, "layout": {
        **_LAYOUT, "height": 240, "margin": {**_LAYOUT["margin"], "t": 36},
        "title": _title(title, scope), **_window_axis(start, step, n),
        "yaxis": {"title": {"text": unit}, "rangemode": "tozero"},
        "showlegend": len(rows) <= 16, "legend": {"font": {"size": 10}}}}


def _per_node_means(rows: Sequence[tuple[str, Sequence[float | None]]]
                    ) -> list[tuple[str, list[float | None]]]:
    by_node: dict[str, list[Sequence[float | None]]] = {}
    for label, values in rows:
        by_node.setdefault(f"{label.split(':', 1)[0]} (mean)", []).append(values)
    out = []
    for node, series in by_node.items():
        columns = zip(*series, strict=False)
        out.append((node, [_mean_known(c) for c in columns]))
    return out


def _mean_known(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def event_level(throttle: float | None, xid: float | None) -> int | None:
    """The worst event in a sample: XID > thermal > HW slowdown > power cap > none."""
    if throttle is None and xid is None:
        return None
    if xid:
        return 4
    bits = int(throttle or 0)
    for level, mask in ((3, 0x20 | 0x40), (2, 0x08), (1, 0x04 | 0x80)):
        if bits & mask:
            return level
    return 0


def events_heatmap(rows: Sequence[tuple[str, Sequence[float | None], Sequence[float | None]]],
                   start: float, step: float) -> Figure:
    """GPU x time of throttle reasons and XIDs: (label, throttle bitmask, XID) per GPU."""
    n = max((max(len(t), len(x)) for _, t, x in rows), default=0)
    z = [[event_level(t, x) for t, x in zip_longest(throttle, xid)] for _, throttle, xid in rows]
    colours = [[i / 4, c] for i, c in enumerate(_EVENT_COLOURS)]
    return {
        "data": [{"type": "heatmap", **_columns(start, step, n),
                  "y": [label for label, _, _ in rows], "z": z,
                  "zmin": 0, "zmax": 4, "colorscale": colours,
                  "colorbar": {"tickvals": [0, 1, 2, 3, 4], "ticktext": list(EVENT_LEVELS)},
                  "hovertemplate": "%{y} %{x}<br>level %{z}<extra></extra>"}],
        "layout": {**_LAYOUT, "height": max(160, 60 + 18 * len(rows)),
                   "margin": {**_LAYOUT["margin"], "l": 80, "t": 36},
                   "title": _title("Throttle reasons and XID errors"),
                   **_window_axis(start, step, n),
                   "yaxis": {"autorange": "reversed", "type": "category", "dtick": 1}},
    }


def waiting_bars(rows: Sequence[tuple[str, float, float]], stragglers: Sequence[str]) -> Figure:
    """Per GPU: computing and busy-but-waiting shares; the stragglers stand out."""
    labels = [label for label, _, _ in rows]
    colour = ["#c62828" if label in stragglers else "#b35900" for label in labels]
    return {"data": [
        {"type": "bar", "name": "computing (SM active)", "x": labels,
         "y": [round(c * 100, 1) for _, c, _ in rows], "marker": {"color": "#1a7f37"}},
        {"type": "bar", "name": "busy, waiting", "x": labels,
         "y": [round(w * 100, 1) for _, _, w in rows], "marker": {"color": colour}},
    ], "layout": legend_below({**_LAYOUT, "barmode": "stack", "height": 250,
                               "margin": {**_LAYOUT["margin"], "t": 40},
                               "title": _title("Computing and waiting per GPU"),
                               "yaxis": {"range": [0, 100], "ticksuffix": "%"},
                               "xaxis": {"type": "category"}})}


def phase_bars(ranks: Sequence[tuple[int, Mapping[str, float]]], straggler: int | None,
               straggler_phase: str, waiting: Sequence[int]) -> Figure:
    """Per rank, the mean step split into phases (stacked, ms). The straggler rank and the
    ranks that merely waited are labelled apart: the waiters' long communication is the
    straggler's doing, not theirs."""
    labels = [_rank_label(rank, straggler, straggler_phase, waiting) for rank, _ in ranks]
    data = [{"type": "bar", "orientation": "h", "name": PHASE_LABELS[p], "y": labels,
             "x": [round(phases.get(p, 0.0), 2) for _, phases in ranks],
             "marker": {"color": PHASE_COLOURS[p]},
             "hovertemplate": f"%{{y}}<br>{PHASE_LABELS[p]}: %{{x:.1f}} ms<extra></extra>"}
            for p in PHASE_COLOURS]
    # time under annotations that map to no phase, by their own names (largest first)
    extra: dict[str, float] = {}
    for _, phases in ranks:
        for name, ms in phases.items():
            if name not in PHASE_COLOURS:
                extra[name] = extra.get(name, 0.0) + ms
    for i, name in enumerate(sorted(extra, key=lambda n: -extra[n])[:8]):
        data.append({"type": "bar", "orientation": "h", "name": name, "y": labels,
                     "x": [round(phases.get(name, 0.0), 2) for _, phases in ranks],
                     "marker": {"color": _ANNOTATION_COLOURS[i % len(_ANNOTATION_COLOURS)]},
                     "hovertemplate": "%{y}<br>" + name.replace("%", "%%")
                                      + ": %{x:.1f} ms<extra></extra>"})
    return {"data": data, "layout": legend_below({
        **_LAYOUT, "barmode": "stack", "height": max(180, 70 + 24 * len(ranks)),
        "margin": {**_LAYOUT["margin"], "l": 190},
        "title": _title("Mean step per rank, from the job's traces"),
        "xaxis": {"title": {"text": "ms per step"}},
        "yaxis": {"autorange": "reversed", "type": "category"}}, rows=2)}


_ANNOTATION_COLOURS = ["#d4a017", "#c2185b", "#5d4037", "#7986cb", "#4db6ac", "#a1887f"]
GPU_PARTS = (("compute", "compute kernels", "#1a7f37"),
             ("exposed", "communication not under compute (exposed)", "#b35900"),
             ("memory", "memory copies only", "#7986cb"),
             ("idle", "idle: no kernel, no copy", "#d0d5dd"))


def gpu_bars(ranks: Sequence[tuple[str, Mapping[str, float]]]) -> Figure:
    """Per rank, the GPU's own account of a mean step (stacked, ms): compute, exposed
    communication, memory copies alone and idle add up to the GPU step. Communication
    hidden under compute is in the hover text: it costs the step nothing."""
    data = []
    for key, name, colour in GPU_PARTS:
        data.append({
            "type": "bar", "orientation": "h", "name": name, "y": [r for r, _ in ranks],
            "x": [round(parts.get(key, 0.0), 2) for _, parts in ranks],
            "customdata": [round(parts.get("hidden", 0.0), 2) for _, parts in ranks],
            "marker": {"color": colour},
            "hovertemplate": f"%{{y}}<br>{name}: %{{x:.1f}} ms"
                             + (" (communication hidden under it: %{customdata:.1f} ms)"
                                if key == "compute" else "") + "<extra></extra>"})
    return {"data": data, "layout": legend_below({
        **_LAYOUT, "barmode": "stack", "height": max(170, 70 + 24 * len(ranks)),
        "margin": {**_LAYOUT["margin"], "l": 190},
        "title": _title("What the GPU did in a mean step, per rank (kernels)"),
        "xaxis": {"title": {"text": "ms per GPU step"}},
        "yaxis": {"autorange": "reversed", "type": "category"}}, rows=2)}


def _rank_label(rank: int, straggler: int | None, phase: str, waiting: Sequence[int]) -> str:
    if rank == straggler:
        return f"rank {rank} ◀ straggler ({PHASE_LABELS.get(phase, phase)})"
    if rank in waiting:
        return f"rank {rank} (waited)"
    return f"rank {rank}"


# --- The roofline (issue 30) ---------------------------------------------------------------

BOUND_COLOURS = {"memory": "#b35900", "compute": "#1a7f37"}
_ROOF_DASH = ("solid", "dash", "dot", "dashdot")


def roofline_chart(result: Roofline) -> Figure:
    """The job's GPUs on its model's roofline: log-log, FLOP/byte against TFLOP/s.

    The memory roof rises from the left to the highest pipe's ridge; each pipe's peak is a
    flat roof from its own ridge on. One marker per GPU drawn (``RooflinePoint.plotted``),
    coloured by what bounds it. Only a ready result has roofs to draw.
    """
    peaks = result.peaks
    assert peaks is not None, "a roofline needs its model's peaks"
    drawn = [p for p in result.points if p.plotted]
    ridges = peaks.ridge
    lo = min([0.1, *(p.intensity / 4 for p in drawn if p.intensity)])
    hi = max([max(ridges.values()) * 20, *(p.intensity * 4 for p in drawn if p.intensity)])
    bw = peaks.memory_bps
    top = max(ridges, key=lambda pipe: ridges[pipe])
    data: list[dict[str, Any]] = [{
        "type": "scatter", "mode": "lines", "name": f"HBM {bw / 1e12:g} TB/s",
        "x": [lo, ridges[top]], "y": [lo * bw / 1e12, peaks.pipes[top] / 1e12],
        "line": {"color": "#3056d3", "width": 2}, "hoverinfo": "name"}]
    for i, (pipe, peak) in enumerate(sorted(peaks.pipes.items(), key=lambda kv: -kv[1])):
        data.append({"type": "scatter", "mode": "lines", "hoverinfo": "name",
                     "name": f"{pipe_words(pipe, peaks.vendor)} {peak / 1e12:g} TFLOP/s",
                     "x": [ridges[pipe], hi], "y": [peak / 1e12, peak / 1e12],
                     "line": {"color": "#667085", "width": 1.5,
                              "dash": _ROOF_DASH[i % len(_ROOF_DASH)]}})
    for bound in ("memory", "compute"):
        mine = [p for p in drawn if p.bound == bound]
        if mine:
            data.append(_roofline_points(mine, bound, peaks.vendor))
    return {"data": data, "layout": legend_below({
        **_LAYOUT, "height": 380, "margin": {**_LAYOUT["margin"], "l": 70},
        "title": _title(f"Roofline: {peaks.name} (estimated from activity ratios)"),
        "xaxis": {"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte)"}},
        "yaxis": {"type": "log", "title": {"text": "TFLOP/s"}}}, rows=2)}


def _roofline_points(points: Sequence[RooflinePoint], bound: str, vendor: str) -> Figure:
    return {"type": "scatter", "mode": "markers", "name": f"GPU, {bound}-bound",
            "x": [p.intensity for p in points], "y": [p.flops / 1e12 for p in points],
            "text": [p.gpu for p in points],
            "customdata": [[p.bytes_per_s / 1e12, pipe_words(p.pipe, vendor),
                            (p.share_of_roof or 0) * 100] for p in points],
            "marker": {"color": BOUND_COLOURS[bound], "size": 9,
                       "line": {"color": "#ffffff", "width": 1}},
            "hovertemplate": "%{text}<br>%{y:.1f} TFLOP/s at %{x:.1f} FLOP/B"
                             "<br>%{customdata[0]:.2f} TB/s · mostly %{customdata[1]}"
                             "<br>%{customdata[2]:.0f}% of the roof<extra></extra>"}


# --- Jobs side by side (the comparison page) ------------------------------------------------


def busy_timelines(runs: Sequence[tuple[str, float, float, Sequence[float | None]]]) -> Figure:
    """One line per job: its GPUs' mean busy share (%) against hours since the job started,
    so runs that started days apart line up. ``runs``: (label, offset s, step s, values)."""
    data = []
    for label, offset, step, values in runs:
        sparse = len(values) <= MARKERS_UP_TO
        data.append({"type": "scatter", "mode": "lines+markers" if sparse else "lines",
                     "name": label, "connectgaps": False,
                     "x": [round((offset + (k + 0.5) * step) / 3600, 3)
                           for k in range(len(values))],
                     "y": [None if v is None else round(v * 100, 1) for v in values],
                     "hovertemplate": f"{label}<br>%{{x:.2f}} h: %{{y:.0f}}%<extra></extra>"})
    return {"data": data, "layout": legend_below({
        **_LAYOUT, "height": 280,
        "title": _title("GPU busy over the run, mean of each job's GPUs"),
        "xaxis": {"title": {"text": "hours since the job started"}, "rangemode": "tozero"},
        "yaxis": {"range": [0, 100], "ticksuffix": "%"}})}


def phase_comparison(runs: Sequence[tuple[str, Mapping[str, float]]]) -> Figure:
    """One stacked bar per job: its mean step (over ranks) split into phases, in ms."""
    labels = [label for label, _ in runs]
    data = [{"type": "bar", "orientation": "h", "name": PHASE_LABELS[p], "y": labels,
             "x": [round(phases.get(p, 0.0), 2) for _, phases in runs],
             "marker": {"color": PHASE_COLOURS[p]},
             "hovertemplate": f"%{{y}}<br>{PHASE_LABELS[p]}: %{{x:.1f}} ms<extra></extra>"}
            for p in PHASE_COLOURS]
    return {"data": data, "layout": legend_below({
        **_LAYOUT, "barmode": "stack", "height": max(170, 80 + 30 * len(runs)),
        "margin": {**_LAYOUT["margin"], "l": 200},
        "title": _title("Mean step by phase, from each job's latest traces"),
        "xaxis": {"title": {"text": "ms per step"}},
        "yaxis": {"autorange": "reversed", "type": "category"}}, rows=2)}
