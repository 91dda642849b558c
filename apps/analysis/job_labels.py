"""AI-aware job labels from a job's batch script: launcher, framework, parallelism, paths.

Pure: the rules are data (``apps/jobs/label_rules.json``, read by the service and handed in
as a mapping), the script is a string, the result a plain dict stored in ``Job.labels``.

Rule kinds:
- ``first``: the ``value`` of the first pattern that matches (launcher, framework);
- ``int``: the first capture group of the first pattern that matches, as an integer;
- ``text``: the first capture group of the first pattern that matches, outer quotes
  stripped (the ``#SBATCH --output`` path); a rule's ``default`` is stored when a script
  was given and nothing matched, so its presence says a script was read;
- ``paths``: every distinct first capture group, in order of appearance (datasets, checkpoints).

Full-line shell comments are ignored, except ``#SBATCH`` lines, so commented-out commands do
not label a job. A line ending in ``\\`` is joined with the next one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KINDS = ("first", "int", "text", "paths")
MAX_SCRIPT = 1_000_000  # characters looked at: bounded work for a hostile script
MAX_PATHS = 20


@dataclass(frozen=True)
class Pattern:
    regex: re.Pattern[str]
    value: str = ""


@dataclass(frozen=True)
class LabelRule:
    name: str
    kind: str
    patterns: tuple[Pattern, ...]
    default: str | None = None  # text rules: stored when a script matched nothing


@dataclass(frozen=True)
class LabelRules:
    version: int
    rules: tuple[LabelRule, ...]


def rules_from_dict(data: Mapping[str, Any]) -> LabelRules:
    """Validate and compile the rules document; errors name the rule and pattern."""
    version = data.get("version")
    if not isinstance(version, int):
        raise ValueError("label rules: 'version' must be an integer")
    rules = []
    for i, raw in enumerate(data.get("labels") or []):
        name, kind = raw.get("name"), raw.get("kind")
        if not name or kind not in KINDS:
            raise ValueError(f"label rule #{i}: needs a name and a kind in {KINDS}")
        default = raw.get("default")
        if default is not None and (kind != "text" or not isinstance(default, str)):
            raise ValueError(f"label rule {name!r}: only a text rule has a (string) default")
        rules.append(LabelRule(name, kind, tuple(_pattern(name, j, p)
                                                 for j, p in enumerate(raw.get("patterns") or [])),
                               default))
    return LabelRules(version, tuple(rules))


def _pattern(name: str, index: int, raw: Mapping[str, Any]) -> Pattern:
    try:
        regex = re.compile(raw["regex"], re.MULTILINE)
    except (KeyError, re.error) as exc:
        raise ValueError(f"label rule {name!r} pattern #{index}: {exc}") from None
    return Pattern(regex, str(raw.get("value", "")))


def _clean(script: str) -> str:
    joined = re.sub(r"\\\r?\n", " ", script[:MAX_SCRIPT])
    lines = [ln for ln in joined.splitlines()
             if not ln.lstrip().startswith("#") or ln.lstrip().startswith("#SBATCH")]
    return "\n".join(lines)


def _apply(rule: LabelRule, text: str) -> Any:
    if rule.kind == "paths":
        found: list[str] = []
        for pattern in rule.patterns:
            found += [m.group(1) for m in pattern.regex.finditer(text) if m.group(1)]
        return list(dict.fromkeys(found))[:MAX_PATHS] or None
    for pattern in rule.patterns:
        match = pattern.regex.search(text)
        if match:
            if rule.kind == "text":
                return _unquote(match.group(1))
            return pattern.value if rule.kind == "first" else int(match.group(1))
    return rule.default if text.strip() else None


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "\"'" \
        else value


def match_labels(script: str, rules: LabelRules) -> dict[str, Any]:
    """Labels for one batch script; ``rules`` (the rules version) is always present, so a
    job without a match is known to have been looked at."""
    text = _clean(script)
    labels: dict[str, Any] = {}
    for rule in rules.rules:
        value = _apply(rule, text)
        if value is not None:
            labels[rule.name] = value
    labels["rules"] = rules.version
    return labels
