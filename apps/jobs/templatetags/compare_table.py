"""The comparison table's rows (``jobs/compare.html``), one ``<tr>`` per figure.

Each cell prints as the job page prints the same figure: GPU-hours and the idle share as
facts (``apps/core/facts.py``, so a test can hold the two pages to one text), shares with
``share_text``, run times with the ``duration`` filter. A missing figure says why in words
(``Cell.missing``) instead of a zero. Every stored value passes through ``escape``.
"""

from __future__ import annotations

from datetime import timedelta
from html import escape
from typing import Any

from django import template
from django.utils.safestring import SafeString, mark_safe

from apps.analysis.compare import Cell, Row
from apps.analysis.figures import share_text
from apps.core.facts import fact_html
from apps.core.templatetags.portal import duration, gpus

register = template.Library()


@register.simple_tag
def compare_rows(compared: Any) -> SafeString:
    """Every row of ``compared`` (``apps.jobs.compare.Compared``); the rows a named
    difference is about are marked."""
    differing = compared.comparison.differing_rows()
    lines = []
    for row in compared.comparison.rows:
        marked = ' class="row-differs"' if row.key in differing else ""
        cells = "".join(f'<td class="{_align(row)}">{_cell(row, cell, job, at)}</td>'
                        for cell, job, at in zip(row.cells, compared.jobs, compared.at,
                                                 strict=True))
        lines.append(f'<tr id="row-{escape(row.key)}"{marked}><th scope="row">'
                     f"{escape(row.label)}</th>{cells}</tr>")
    return mark_safe("\n".join(lines))  # noqa: S308  (every value inside is escaped)


def _align(row: Row) -> str:
    return "" if row.kind == "text" else "num"


def _cell(row: Row, cell: Cell, job: Any, at: Any) -> str:
    if cell.value is None:
        return f'<span class="muted">{escape(cell.missing or "—")}</span>'
    value = cell.value
    if row.kind == "text":
        return escape(str(value))
    number = float(value)
    printers = {
        "gpu_hours": lambda: str(fact_html("job-gpu-hours", job, number)),
        "idle_share": lambda: str(fact_html("job-idle-share", job, number, at=at)),
        "share": lambda: share_text(number),
        "duration": lambda: escape(duration(timedelta(seconds=number))),
        "gpus": lambda: escape(gpus(number)),
        "count": lambda: f"{number:,.0f}",
        "ms": lambda: f"{number:,.0f} ms",
    }
    return printers[row.kind]()
