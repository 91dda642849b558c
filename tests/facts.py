"""Figures two pages state differently (issue 26): the comparison behind
``tests/core/test_persona_figures.py``, over what ``tests/crawl.py`` collects.

Two statements conflict when they give the same fact about the same subject at the same
moment (``data-at``; none is "now") with different text. A fact whose pages must share one
snapshot (``one_snapshot``: a team's month, counted once by its statement) conflicts also
when two pages give it as of different moments. A page may print a figure without its
unit under a column that names it, never other digits.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from apps.core.facts import FACTS
from tests.crawl import Stated


def _key(s: Stated) -> tuple[str, ...]:
    fact = FACTS.get(s.fact)
    return (s.fact, s.subject) if fact is not None and fact.one_snapshot else \
        (s.fact, s.subject, s.at)


def _said(s: Stated) -> str:
    return f"{s.value} as of {s.at}" if s.at else s.value


def _shown_as_canonical(s: Stated) -> bool:
    """The text shown is the canonical text, or it less a unit (no digits dropped)."""
    rest = s.value.removeprefix(s.shown + " ")
    return bool(s.shown) and (s.shown == s.value or (
        rest != s.value and not any(c.isdigit() for c in rest)))


def contradictions(stated: Iterable[Stated], who: str = "") -> list[str]:
    """Every fact stated two ways, with the pages that said each; and every figure shown
    other than as its canonical text (or that text without its unit)."""
    out: list[str] = []
    groups: dict[tuple[str, ...], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for s in stated:
        if s.fact not in FACTS:
            out.append(f"{s.page}: unknown fact {s.fact!r}")
        if not s.subject or not s.value:
            out.append(f"{s.page}: {s.fact} without a subject or a value")
        if not _shown_as_canonical(s):
            out.append(f"{s.page}: {s.fact} {s.subject} shown as {s.shown!r}, not {s.value!r}")
        groups[_key(s)][_said(s)].append(s.page)
    for key, said in sorted(groups.items()):
        if len(said) > 1:
            ways = "; ".join(f"{text!r} on {', '.join(sorted(set(pages))[:3])}"
                             for text, pages in sorted(said.items()))
            out.append(f"{who}{' ' if who else ''}{' '.join(key[:2])}: {ways}")
    return out
