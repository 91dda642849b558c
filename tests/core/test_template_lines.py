"""House rule: no template line over 160 characters (long logic goes to presenters or filters)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

LIMIT = 160


def _templates() -> list[Path]:
    roots = [Path(d) for t in settings.TEMPLATES for d in t.get("DIRS", [])]
    roots += [p for p in Path(settings.BASE_DIR, "apps").glob("*/templates")]
    return sorted(f for root in roots for f in root.rglob("*.html"))


def test_templates_are_found():
    assert len(_templates()) > 50


def test_no_template_line_is_over_160_characters():
    long = [f"{path}:{number}: {len(line)} chars"
            for path in _templates()
            for number, line in enumerate(path.read_text().splitlines(), start=1)
            if len(line) > LIMIT]
    assert long == []
