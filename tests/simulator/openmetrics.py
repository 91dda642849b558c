"""A strict little OpenMetrics reader for the tests (what promtool needs, checked by hand)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+) (\d+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(,|$)')


@dataclass
class Family:
    name: str
    kind: str = ""
    help: str = ""
    samples: list[tuple[str, dict[str, str], float, int]] = field(default_factory=list)


def parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        match = LABEL.match(text, pos)
        assert match, f"bad label set at {text[pos:pos + 40]!r}"
        assert match.group(1) not in labels, f"duplicate label {match.group(1)}"
        labels[match.group(1)] = match.group(2)
        pos = match.end()
    return labels


def read(path: Path) -> dict[str, Family]:
    """Parse one file, asserting the rules promtool relies on; returns families by name."""
    lines = path.read_text().splitlines()
    assert lines and lines[-1] == "# EOF", f"{path.name} does not end with # EOF"
    families: dict[str, Family] = {}
    current: Family | None = None
    for line in lines[:-1]:
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert name not in families, f"family {name} declared twice in {path.name}"
            current = families[name] = Family(name, help=line.split(" ", 3)[3])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert current is not None and current.name == name and not current.samples
            current.kind = kind
        else:
            match = SAMPLE.match(line)
            assert match and current is not None, f"bad sample line {line[:80]!r}"
            name, labels, value, ts = match.groups()
            expected = current.name + ("_total" if current.kind == "counter" else "")
            assert name == expected, f"{name} outside its family {current.name}"
            current.samples.append((name, parse_labels(labels), float(value), int(ts)))
    return families


def series(family: Family) -> Iterator[tuple[tuple[tuple[str, str], ...], list[tuple[float, int]]]]:
    """Group samples by label set, checking each series is contiguous and in time order."""
    done: set[tuple[tuple[str, str], ...]] = set()
    key: tuple[tuple[str, str], ...] | None = None
    points: list[tuple[float, int]] = []
    for _, labels, value, ts in family.samples:
        this = tuple(sorted(labels.items()))
        if this != key:
            if key is not None:
                yield key, points
            assert this not in done, f"series of {family.name} split: {dict(this)}"
            done.add(this)
            key, points = this, []
        assert not points or ts > points[-1][1], f"{family.name} {dict(this)} out of order"
        points.append((value, ts))
    if key is not None:
        yield key, points
