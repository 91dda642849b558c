"""Safe PromQL construction: the ONE place that turns label values into PromQL text.

No other code concatenates label values into a query (issue 5, security doc §5). A value
becomes a double-quoted PromQL string literal through :func:`quote`; a set of values
becomes an anchored regex alternation through :func:`any_of`. An empty value is refused:
``label=""`` also matches every series that lacks the label, so ``{hpc_job=""}`` would
select all free GPUs instead of nothing.

Counters over several metric names go through :func:`counter_sum` (issue 17): ``rate()``
and ``increase()`` drop ``__name__``, so ``rate({__name__=~"rx|tx"}[2m])`` is refused by
Prometheus ("vector cannot contain metrics with the same labelset") on every real
node_exporter, where both directions of a port share every other label. Here each name
gets its own selector and function, and its name is put back as a label
(``label_replace(..., "beacon_name", "<name>", "", "")``) before the ``or`` that joins
them, so no two operands can collide and a name a node lacks drops only its own share.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
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
    def not_matching(cls, label: str, pattern: str) -> Matcher:
        """``label!~"pattern"``: ``pattern`` is a regex written in code (``lo|ib.*``), never
        user input; it is quoted like any value."""
        return cls(check_label(label), "!~", quote(pattern))

    @classmethod
    def from_tuple(cls, rule: tuple[str, str, str]) -> Matcher:
        """``(label, op, value)`` as tables in code write them (``("mode", "=", "idle")``)."""
        label, op, value = rule
        if op not in OPS:
            raise UnsafeValue(f"{op!r} is not a PromQL matcher operator")
        return cls(check_label(label), op, quote(value))

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


# The label :func:`counter_sum` writes each counter's name into (rate() drops __name__).
NAME_LABEL = "beacon_name"
# Labels that differ between two scrapes of one target (a node_exporter scraped by two
# jobs): averaged away before any sum, so such a target is not counted twice. An average,
# not a max: two scrapes sample a counter at different instants, and the max of two noisy
# short-window rates is biased up (measured: a 25 % busy node read as 19 %).
SCRAPE_LABELS = ("job",)
COUNTER_FUNCTIONS = ("rate", "increase", "irate")
# The query engines Beacon reads (Cluster.metric_labels "store"; docs/metrics.md, "Stores"):
# Prometheus's (Prometheus 2.x, and Thanos Query and Mimir, which run it) and MetricsQL
# (VictoriaMetrics, single node or cluster).
STORES = ("prometheus", "victoriametrics")


def check_store(store: object) -> str:
    """A store ``metric_labels`` may name (``STORES``)."""
    if store not in STORES:
        raise UnsafeValue(f"store {store!r} is not one of {', '.join(STORES)}")
    return str(store)


def counter_call(fn: str, sel: str, window: str | float, store: str = "prometheus") -> str:
    """``fn(sel[window])`` as Prometheus reads it, written for ``store`` (issue 29).

    ``window`` is a PromQL duration (used as it is) or seconds. Prometheus 2.x reads the
    samples inside ``[t - window, t]``, extrapolated to the range. VictoriaMetrics'
    ``rate`` and ``increase`` differ: they also take the last sample *before* the range
    (and widen a range shorter than ~1.25 scrapes), so a job's first point carried the
    previous job's traffic; and ``increase`` takes a series' first value as an increase
    from 0 when nothing precedes it and the value is small (a partition-key counter that
    stood at 3 when the window opened read as "3 violations" at its first minute). So on
    VictoriaMetrics ``rate`` is ``increase_prometheus`` (the samples inside the range only,
    resets handled, no zero assumed) over the time between the range's first and last
    sample, and ``increase`` is that rate times the range, as Prometheus extrapolates it;
    the range gains a millisecond, since VictoriaMetrics' ranges exclude their start.
    """
    check_store(store)
    if fn not in COUNTER_FUNCTIONS:
        raise UnsafeValue(f"{fn!r} is not a counter function ({', '.join(COUNTER_FUNCTIONS)})")
    if store == "prometheus" or fn == "irate" or isinstance(window, str):
        return f"{fn}({sel}[{window if isinstance(window, str) else duration(window)}])"
    span = f"{sel}[{duration(window + 0.001)}]"
    sampled = f"(tlast_over_time({span}) - tfirst_over_time({span}))"
    if fn == "rate":
        return f"(increase_prometheus({span}) / {sampled})"
    # the factor first, as Prometheus does: exactly 1 when the samples span the range
    return f"(increase_prometheus({span}) * ({window:.3f} / {sampled}))"


def counter_sum(names: Sequence[str], matchers: Sequence[Matcher], window: str | float,
                by: Sequence[str], *, fn: str = "rate", store: str = "prometheus") -> str:
    """``sum by (by) (fn(name[window]))`` over one or several counter names.

    Each name is its own selector; with several, each result carries its name in
    ``NAME_LABEL`` before they are joined with ``or``, so the received and transmitted
    series of one port never share a label set (put ``NAME_LABEL`` in ``by`` to keep
    the names apart in the answer). ``avg without (job)`` first, so a target scraped by
    two jobs is counted once. Counter resets are ``fn``'s business (rate and increase
    handle them). ``window`` in seconds is read as Prometheus reads it on ``store``
    (:func:`counter_call`).
    """
    if fn not in COUNTER_FUNCTIONS:
        raise UnsafeValue(f"{fn!r} is not a counter function ({', '.join(COUNTER_FUNCTIONS)})")
    if not names:
        raise UnsafeValue("a counter sum needs at least one metric name")
    group = ", ".join(check_label(label) if label != NAME_LABEL else label for label in by)
    if len(set(names)) == 1:
        inner = counter_call(fn, selector(names[0], *matchers), window, store)
    else:
        inner = " or ".join(
            f'label_replace({counter_call(fn, selector(name, *matchers), window, store)}, '
            f'"{NAME_LABEL}", "{name}", "", "")' for name in dict.fromkeys(names))
    return f"sum by ({group}) ({deduplicated(inner)})"


def deduplicated(expr: str) -> str:
    """``avg without (job) (expr)``: one series per target however often it is scraped."""
    return f"avg without ({', '.join(SCRAPE_LABELS)}) ({expr})"


def host_of(target: str) -> str:
    """The host of a scrape target: ``gpu01:9100`` -> ``gpu01``, ``[fe80::1]:9100`` ->
    ``fe80::1``, ``gpu01`` -> ``gpu01``."""
    if target.startswith("["):
        end = target.find("]")
        return target[1:end] if end > 0 else target
    return target.split(":", 1)[0] if target.count(":") == 1 else target
