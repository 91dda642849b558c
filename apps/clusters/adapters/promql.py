"""Safe PromQL construction: the ONE place that turns label values into PromQL text.

No other code concatenates label values into a query (issue 5, security doc §5). A value
becomes a double-quoted PromQL string literal through :func:`quote`; a set of values
becomes an anchored regex alternation through :func:`any_of`. An empty value is refused:
``label=""`` also matches every series that lacks the label, so ``{hpc_job=""}`` would
select all free GPUs instead of nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Slurm ids as dcgm-exporter's job mapping writes them: JobIDRaw, or 123_4 for array tasks.
JOB_ID = re.compile(r"^\d+(_\d+)?$")
# RE2's metacharacters. Escaping exactly these keeps the regex portable (Python's
# re.escape also escapes characters such as '#' and '~' for its own verbose mode).
_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")
OPS = ("=", "!=", "=~", "!~")


class UnsafeValue(ValueError):
    """A value that cannot be put into a query as asked (empty, bad name, unencodable)."""


def quote(value: str) -> str:
    """Return ``value`` as a PromQL double-quoted string literal.

    Backslashes, double quotes and control characters are escaped exactly as Go's
    ``strconv.Quote`` would; other Unicode (``jöb-β``, emoji) stays literal, because
    ``\\uXXXX`` surrogate pairs for astral characters are rejected by Prometheus.
    """
    if not isinstance(value, str):
        raise UnsafeValue(f"label value must be a string, not {type(value).__name__}")
    if value == "":
        raise UnsafeValue("empty label value refused: label=\"\" matches series without it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UnsafeValue(f"label value {value!r} is not valid Unicode text") from None
    return json.dumps(value, ensure_ascii=False)


def regex_escape(value: str) -> str:
    """Escape ``value`` so that an RE2 regex matches it literally."""
    return "".join("\\" + ch if ch in _RE2_SPECIAL else ch for ch in value)


def any_of(values: Iterable[str]) -> str:
    """A quoted regex matching exactly one of ``values`` (Prometheus anchors regexes).

    Duplicates are dropped and the order is made stable so equal sets give equal queries.
    """
    items = sorted(set(values))
    if not items:
        raise UnsafeValue("an alternation needs at least one value")
    for item in items:
        quote(item)  # same refusals as a single value
    return quote("|".join(regex_escape(item) for item in items))


def any_host(hosts: Iterable[str]) -> str:
    """A quoted regex matching ``host`` or ``host:port`` for any of ``hosts``.

    node_exporter series carry the scrape target (``gpu01:9100``) rather than a host name.
    """
    items = sorted(set(hosts))
    if not items:
        raise UnsafeValue("an alternation needs at least one value")
    for item in items:
        quote(item)
    return quote("(" + "|".join(regex_escape(item) for item in items) + ")(:[0-9]+)?")


def check_metric(name: str) -> str:
    if not METRIC_NAME.fullmatch(name):
        raise UnsafeValue(f"{name!r} is not a valid metric name")
    return name


def check_label(name: str) -> str:
    if not LABEL_NAME.fullmatch(name) or name.startswith("__"):
        raise UnsafeValue(f"{name!r} is not a valid label name")
    return name


def check_job_id(value: str) -> str:
    """Allow-list a Slurm job id before it goes anywhere near a query."""
    if not JOB_ID.fullmatch(value):
        raise UnsafeValue(f"{value!r} is not a Slurm job id (digits, or digits_digits)")
    return value


@dataclass(frozen=True)
class Matcher:
    """One label matcher; build them with the class methods, which check every part."""

    label: str
    op: str
    text: str  # already-quoted PromQL literal

    @classmethod
    def eq(cls, label: str, value: str) -> Matcher:
        return cls(check_label(label), "=", quote(value))

    @classmethod
    def ne(cls, label: str, value: str) -> Matcher:
        return cls(check_label(label), "!=", quote(value))

    @classmethod
    def one_of(cls, label: str, values: Iterable[str]) -> Matcher:
        return cls(check_label(label), "=~", any_of(values))

    @classmethod
    def host(cls, label: str, hosts: Iterable[str]) -> Matcher:
        return cls(check_label(label), "=~", any_host(hosts))

    @classmethod
    def present(cls, label: str) -> Matcher:
        """``label!=""``: the series carries the label (the one legitimate empty literal)."""
        return cls(check_label(label), "!=", '""')

    def render(self) -> str:
        return f"{self.label}{self.op}{self.text}"


def selector(metric: str, *matchers: Matcher) -> str:
    """``metric{m1,m2}``: an instant-vector selector from checked parts."""
    body = ",".join(m.render() for m in matchers)
    return f"{check_metric(metric)}{{{body}}}" if body else check_metric(metric)


def duration(seconds: float) -> str:
    """A PromQL duration in whole milliseconds (``[2016000ms]``), never below 1 ms."""
    return f"{max(1, round(seconds * 1000))}ms"
