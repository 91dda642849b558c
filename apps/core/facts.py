"""Figures a page states, marked so a test can check that no two pages contradict (issue 26).

A newcomer found one team's GPU-hours this month as 1,500.9 on the quotas page and 1,490.6 on
its statement. Every page that states one of the facts below prints it through
:func:`fact_html` (templates: the ``fact`` and ``fact_within`` tags of
``apps/core/templatetags/portal.py``), which formats the value with the fact's one function
and wraps it::

    <span data-fact="job-gpu-hours" data-subject="job:hpc/123"
          data-value="12.4 GPU-h">12.4 GPU-h</span>

``tests/core/test_persona_figures.py`` walks the site as the admin, a lead and a researcher at
one frozen time and fails when two pages state the same fact about the same subject at the
same moment with different text (``data-value``).

``data-at`` is the moment a dated figure describes: a running job's stored metrics end at
their last snapshot, an alert quotes the reading it was raised on. Without it the figure is
"now" (a finished job's figures never change). A fact with ``one_snapshot`` (a team's month)
must be stated at one moment everywhere: two pages may not give it from two snapshots, even
each labelled with its own "as of".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe

from apps.analysis.figures import gpu_hours_text, memory_text, share_text


@dataclass(frozen=True)
class Fact:
    """One kind of figure: what it is, how it prints (``text(value, unit)``), and whether
    every page must state it from one snapshot."""

    meaning: str
    text: Callable[[Any, bool], str]
    one_snapshot: bool = False


FACTS: dict[str, Fact] = {
    "job-gpu-hours": Fact("a job's allocated GPU-hours (Slurm: GPUs x run time, until now "
                          "while it runs)", lambda v, unit: gpu_hours_text(v, unit)),
    "job-idle-share": Fact("the share of a job's measured GPU time its GPUs sat idle with "
                           "GPU memory held (the idleness reading's 'memory held')",
                           lambda v, unit: share_text(v)),
    "job-memory-peak": Fact("a job's peak CPU memory in use on its busiest node (--mem is "
                            "per node)", lambda v, unit: memory_text(v, unit)),
    "team-month-gpu-hours": Fact("a team's allocated GPU-hours in a month, as its statement "
                                 "counts them (GPU-equivalents)",
                                 lambda v, unit: gpu_hours_text(v, unit), one_snapshot=True),
}


def subject_of(thing: Any, month: date | None = None) -> str:
    """``job:<cluster>/<job id>``, ``team:<slug>`` (``/<YYYY-MM>`` with a month), or a
    string as given."""
    if isinstance(thing, str):
        subject = thing
    elif hasattr(thing, "job_id") and hasattr(thing, "cluster"):
        subject = f"job:{thing.cluster.name}/{thing.job_id}"
    elif hasattr(thing, "slug"):
        subject = f"team:{thing.slug}"
    else:
        raise ValueError(f"a fact's subject is a job, a team or a string, not {thing!r}")
    if not subject:
        raise ValueError("a fact needs a subject")
    return f"{subject}/{month:%Y-%m}" if month else subject


def _fact(name: str) -> Fact:
    try:
        return FACTS[name]
    except KeyError:
        raise ValueError(f"unknown fact {name!r}: one of {', '.join(sorted(FACTS))}") from None


def _attrs(name: str, subject: str, value: str, at: datetime | None) -> SafeString:
    when = format_html(' data-at="{}"', at.astimezone(UTC).isoformat(timespec="seconds")) \
        if at is not None else ""
    return format_html('data-fact="{}" data-subject="{}" data-value="{}"{}', name, subject,
                       value, when)


def fact_html(name: str, subject: Any, value: Any, at: datetime | None = None,
              bare: bool = False, month: date | None = None) -> SafeString:
    """The figure as the fact prints it, wrapped; ``bare`` leaves the unit to a column's
    heading (``data-value`` keeps it). ``—`` unwrapped when the value is unknown."""
    fact = _fact(name)
    if value is None or value == "":  # unknown (a template's missing key is "")
        return mark_safe("—")
    full = fact.text(value, True)
    shown = fact.text(value, not bare)
    if subject is None:  # about nothing a page could name (an unmapped account): not marked
        return format_html("{}", shown)
    return format_html("<span {}>{}</span>", _attrs(name, subject_of(subject, month), full, at),
                       shown)


def fact_within(text: str, name: str, subject: Any, value: Any, at: datetime | None = None,
                after: str = "") -> SafeString:
    """``text`` (escaped) with the fact's figure in it wrapped: a stored sentence (an alert,
    a piece of advice) made by the same function; the first figure past ``after``. Left as
    it is when it does not state it."""
    fact = _fact(name)
    escaped = str(conditional_escape(text))
    if value is None or value == "":  # unknown (a template's missing key is "")
        return mark_safe(escaped)  # noqa: S308  (escaped above)
    figure = str(conditional_escape(fact.text(value, True)))
    if subject is None:
        return mark_safe(escaped)  # noqa: S308  (escaped above)
    start = escaped.find(str(conditional_escape(after))) if after else 0
    found = escaped.find(figure, start) if start >= 0 else -1
    if found < 0:
        return mark_safe(escaped)  # noqa: S308  (escaped above)
    head, tail = escaped[:found], escaped[found + len(figure):]
    span = format_html("<span {}>{}</span>", _attrs(name, subject_of(subject), fact.text(
        value, True), at), mark_safe(figure))  # noqa: S308  (escaped above)
    return mark_safe(head + span + tail)  # noqa: S308  (each part escaped)
