"""A streaming OpenMetrics text reader producing the same ``Series`` as Prometheus answers.

The simulator (and any site exporting history) writes telemetry as OpenMetrics text for
``promtool tsdb create-blocks-from openmetrics``. Reading those files directly lets the
efficiency maths run on exactly the data Prometheus would serve, without Prometheus.

The reader holds one line at a time; :func:`read_series` keeps only the samples its
``keep`` predicate selects, so memory grows with the selection, not with the file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from apps.analysis.timeseries import (
    GpuKey,
    Point,
    Series,
    Window,
    clip,
    combine,
    counter_rate,
)
from apps.clusters.adapters.catalogue import Catalogue, group_by_gpu
from apps.clusters.adapters.node_samples import node_sample_wanted
from apps.clusters.adapters.promql import host_of
from apps.core.errors import AdapterError

SERVICE = "openmetrics"
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


class OpenMetricsError(AdapterError):
    """The file is not valid OpenMetrics; the message names the line."""


@dataclass(frozen=True)
class Sample:
    """One sample line: metric name, labels, value and timestamp (unix seconds)."""

    name: str
    labels: dict[str, str]
    value: float
    timestamp: float


def iter_samples(lines: Iterable[str]) -> Iterator[Sample]:
    """Yield every sample of an OpenMetrics text stream, in file order.

    Raises ``OpenMetricsError`` naming the line number on a malformed line, a sample
    without a timestamp, or a stream that ends without ``# EOF`` (a truncated file).
    """
    for number, text, value, timestamp in _sample_lines(lines):
        name, labels = _series_of(number, text)
        t, v = _numbers(number, text, value, timestamp)
        yield Sample(name, dict(labels), v, t)


def read_series(lines: Iterable[str],
                keep: Callable[[str, dict[str, str]], bool] = lambda n, labels: True,
                ) -> list[Series]:
    """Group the kept samples into series (one per name + label set), points in time order.

    A series' ``name{labels}`` text repeats on every one of its samples, so it is parsed
    (and ``keep`` asked) once per series, not once per sample: a month of telemetry is
    millions of lines of a few thousand series. A line of a series already seen takes
    the fast path (one split, two floats); anything else, or any doubt, goes through the
    full checks of ``_sample_lines``, which also word the errors.
    """
    points: dict[tuple[str, tuple[tuple[str, str], ...]], list[Point]] = {}
    known: dict[str, list[Point] | None] = {}  # series text -> its points, None: not kept
    lines = iter(lines)
    isfinite = math.isfinite
    number = 0
    for raw in lines:
        number += 1
        parts = raw.rsplit(" ", 2)
        # a seen text is a valid series without an exemplar: only the numbers can be wrong
        target = known.get(parts[0], _UNSEEN) if len(parts) == 3 else _UNSEEN
        if target is not _UNSEEN:
            try:
                t, v = float(parts[2]), float(parts[1])
            except ValueError:
                t = math.nan
            if isfinite(t):
                if target is not None:
                    target.append((t, v))
                continue
        line = raw.rstrip("\n")  # from here on, the checks of _sample_lines
        if line == "# EOF":
            number = _after_eof(number, lines)
            break
        if line.startswith("#") or not line.strip():
            continue
        if " # " in line:  # maybe an exemplar: the careful parser finds where labels end
            _, text, value, timestamp = _split_carefully(number, line)
        else:
            parts = line.rsplit(" ", 2)
            if len(parts) != 3:
                raise _error(number, line, "expected 'value timestamp' after the labels")
            text, value, timestamp = parts
        target = known.get(text, _UNSEEN)
        if target is _UNSEEN:
            name, labels = _series_of(number, text)
            target = points.setdefault((name, labels), []) if keep(name, dict(labels)) \
                else None
            known[text] = target
        point = _numbers(number, text, value, timestamp)
        if target is not None:
            target.append(point)
    else:
        raise OpenMetricsError(f"OpenMetrics: no '# EOF' after line {number}: truncated file?",
                               service=SERVICE)
    return [Series(name, dict(labels), tuple(sorted(pts))) for (name, labels), pts in
            points.items()]


def _after_eof(number: int, rest: Iterator[str]) -> int:
    """Nothing but blank lines may follow ``# EOF``; the last line's number."""
    last = number
    for last, tail in enumerate(rest, start=number + 1):
        if tail.strip():
            raise _error(last, tail.rstrip("\n"), "content after # EOF")
    return last


_UNSEEN: list[Point] = []


def series_of(text: str, number: int) -> tuple[str, dict[str, str]]:
    """A sample line's ``name{labels}`` text -> (name, labels); an error names line ``number``."""
    name, labels = _series_of(number, text)
    return name, dict(labels)


def _series_of(number: int, text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``name{labels}`` -> (name, sorted label pairs); errors name the line."""
    try:
        return _parse_series_text(text)
    except _BadSeries:
        sample = _sample(number, f"{text} 0 0")  # raises the precise, line-numbered error
        return sample.name, tuple(sorted(sample.labels.items()))


class _BadSeries(ValueError):
    pass


@lru_cache(maxsize=16_384)
def _parse_series_text(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Parse a series' text once for several files: the same GPU's series recurs in the
    next file. Bounded to a few files' series: a job's label makes new texts, and a
    month's would otherwise stay in memory (it grew the demo's RSS with days)."""
    match = _NAME.match(text)
    if not match:
        raise _BadSeries(text)
    pos = match.end()
    if pos == len(text):
        return match.group(), ()
    if text[pos] != "{" or not text.endswith("}"):
        raise _BadSeries(text)
    body = text[pos + 1:-1]
    if not _LABEL_BODY.fullmatch(body):  # pairs separated by commas, one trailing comma allowed
        raise _BadSeries(text)
    pairs = _LABEL_PAIRS.findall(body)
    return match.group(), tuple(sorted((k, _unescape(v)) for k, v in pairs))


_PAIR = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
_LABEL_BODY = re.compile(rf"(?:{_PAIR},)*{_PAIR},?|")
_LABEL_PAIRS = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\":
            escaped = value[i + 1:i + 2]
            if escaped not in _ESCAPES:
                raise _BadSeries(value)
            out.append(_ESCAPES[escaped])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _sample_lines(lines: Iterable[str]) -> Iterator[tuple[int, str, str, str]]:
    """``(line number, series text, value, timestamp)`` of every sample line, with the same
    checks as ``iter_samples`` (EOF marker, nothing after it)."""
    seen_eof = False
    number = 0
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\n")
        if seen_eof:
            if line.strip():
                raise _error(number, line, "content after # EOF")
            continue
        if line == "# EOF":
            seen_eof = True
        elif line.startswith("#") or not line.strip():
            continue
        elif " # " in line:  # maybe an exemplar: the careful parser finds where labels end
            yield _split_carefully(number, line)
        else:
            parts = line.rsplit(" ", 2)
            if len(parts) != 3:
                raise _error(number, line, "expected 'value timestamp' after the labels")
            yield number, parts[0], parts[1], parts[2]
    if not seen_eof:
        raise OpenMetricsError(f"OpenMetrics: no '# EOF' after line {number}: truncated file?",
                               service=SERVICE)


def _split_carefully(number: int, line: str) -> tuple[int, str, str, str]:
    match = _NAME.match(line)
    if not match:
        raise _error(number, line, "expected a metric name")
    pos = match.end()
    if pos < len(line) and line[pos] == "{":
        _, pos = _labels(number, line, pos + 1)
    rest = line[pos:].split("#", 1)[0].split()  # drop an exemplar
    if len(rest) != 2:
        raise _error(number, line, "expected 'value timestamp' after the labels")
    return number, line[:pos], rest[0], rest[1]


def _numbers(number: int, text: str, value: str, timestamp: str) -> Point:
    try:
        t, v = float(timestamp), float(value)
    except ValueError:
        raise _error(number, f"{text} {value} {timestamp}",
                     "value and timestamp must be numbers") from None
    if not math.isfinite(t):
        raise _error(number, f"{text} {value} {timestamp}", "timestamp must be finite")
    return (t, v)


def job_gpu_series(lines: Iterable[str], catalogue: Catalogue, window: Window, *,
                   job_id: str = "", held: Iterable[GpuKey] = ()) -> dict[GpuKey,
                                                                     dict[str, Series]]:
    """The job's per-GPU series from a telemetry file, bound like the Prometheus path.

    By ``job_id`` (the ``hpc_job`` label) when given, else by the ``held`` (host, GPU)
    pairs; either way only samples inside ``window`` are kept.
    """
    held_keys = set(held)
    if not job_id and not held_keys:
        raise ValueError("bind by job_id or by held GPUs")

    def keep(name: str, labels: dict[str, str]) -> bool:
        if catalogue.measure_of(name) is None:
            return False
        if job_id:
            return catalogue.job_of(Series(name, labels)) == job_id
        return catalogue.gpu_key(Series(name, labels)) in held_keys

    pairs = []
    for series in read_series(lines, keep):
        measure = catalogue.measure_of(series.metric)
        points = tuple(clip(series.points, window))
        if measure and points:
            pairs.append((measure, Series(series.metric, series.labels, points)))
    return group_by_gpu(pairs, catalogue, raw=True)


@dataclass(frozen=True)
class JobSeries:
    """A job's per-GPU series and the per-node series of every host in the file."""

    gpus: dict[GpuKey, dict[str, Series]]
    nodes: dict[str, dict[str, Series]]
    binding: str = "label"


def job_series(lines: Iterable[str], catalogue: Catalogue, window: Window, *,
               job_id: str = "", held: Iterable[GpuKey] = ()) -> JobSeries:
    """One pass over a telemetry file: the job's GPU series (bound as ``job_gpu_series``
    binds them) and node_exporter series of every host, as per-second rates.

    Node series carry no job label: callers keep the hosts the job ran on. Counters keep
    one sample before the window so the first rate inside it is known.
    """
    held_keys = set(held)
    if not job_id and not held_keys:
        raise ValueError("bind by job_id or by held GPUs")
    name = job_id or "held"
    request = JobRequest(name, window, by_label=bool(job_id),
                         held=tuple((key, window.start, window.end) for key in held_keys))
    return jobs_series(lines, catalogue, [request])[name]


@dataclass(frozen=True)
class JobRequest:
    """One job to read: its window, and how to bind its GPUs (label, or held intervals)."""

    job_id: str
    window: Window
    by_label: bool = True
    held: tuple[tuple[GpuKey, float, float], ...] = ()


def jobs_series(lines: Iterable[str], catalogue: Catalogue,
                requests: Sequence[JobRequest]) -> dict[str, JobSeries]:
    """One pass over a telemetry file for many jobs (a backfill reads each file once).

    A job bound by label gets the series carrying its ``hpc_job``; one bound by held GPUs
    gets the samples of those (host, GPU) pairs inside each held interval. Every job gets
    the node series of the hosts its GPUs are on. Memory grows with the kept samples.
    """
    labelled = {r.job_id: r for r in requests if r.by_label}
    node_keys = catalogue.node_keys
    held: dict[GpuKey, list[tuple[JobRequest, float, float]]] = {}
    for r in requests:
        for key, start, end in r.held:
            held.setdefault(key, []).append((r, start, end))

    def keep(name: str, labels: dict[str, str]) -> bool:
        if name in node_keys:
            return any(node_sample_wanted(key, labels) for key in node_keys[name])
        if catalogue.measure_of(name) is None:
            return False
        series = Series(name, labels)
        return catalogue.job_of(series) in labelled or catalogue.gpu_key(series) in held

    pairs: dict[str, list[tuple[str, Series]]] = {r.job_id: [] for r in requests}
    found_by_label: set[str] = set()
    node_raw: dict[tuple[str, str], list[tuple[str, tuple[Point, ...]]]] = {}
    for series in read_series(lines, keep):
        if series.metric in node_keys:
            host = host_of(series.labels.get(catalogue.node_label, ""))
            for family in node_keys[series.metric]:  # CPU time: the mode picks the measure
                if node_sample_wanted(family, series.labels):
                    node_raw.setdefault((host, family), []).append(
                        (series.metric, series.points))
        else:
            _assign(series, catalogue, labelled, held, pairs, found_by_label)
    return {r.job_id: _job_result(r, pairs[r.job_id], node_raw, catalogue,
                                  "label" if r.job_id in found_by_label else "host")
            for r in requests}


def _assign(series: Series, catalogue: Catalogue, labelled: dict[str, JobRequest],
            held: dict[GpuKey, list[tuple[JobRequest, float, float]]],
            pairs: dict[str, list[tuple[str, Series]]], found_by_label: set[str]) -> None:
    """Give a GPU series' samples to the job(s) it belongs to, clipped to their windows."""
    measure = catalogue.measure_of(series.metric)
    if measure is None:
        return
    owner = labelled.get(catalogue.job_of(series))
    targets = [(owner, owner.window.start, owner.window.end)] if owner else \
        held.get(catalogue.gpu_key(series) or GpuKey("", -1), [])
    for request, start, end in targets:
        span = Window(max(start, request.window.start), min(end, request.window.end))
        points = tuple(clip(series.points, span))
        if points:
            pairs[request.job_id].append((measure, Series(series.metric, series.labels, points)))
            if owner is not None:
                found_by_label.add(request.job_id)


def _job_result(request: JobRequest, pairs: list[tuple[str, Series]],
                node_raw: dict[tuple[str, str], list[tuple[str, tuple[Point, ...]]]],
                catalogue: Catalogue, binding: str) -> JobSeries:
    gpus = group_by_gpu(pairs, catalogue, raw=True)
    hosts = {key.host for key in gpus}
    padded = Window(request.window.start - 2 * catalogue.scrape_interval, request.window.end)
    mine = {(host, family): [(m, tuple(clip(points, padded))) for m, points in parts]
            for (host, family), parts in node_raw.items() if host in hosts}
    return JobSeries(gpus, _node_measures(mine, request.window, catalogue.node_samples), binding)


def _node_measures(raw: dict[tuple[str, str], list[tuple[str, tuple[Point, ...]]]],
                   window: Window, samples: Mapping[str, tuple[tuple[str, ...], str]]
                   ) -> dict[str, dict[str, Series]]:
    """Per host: each node measure from its families, devices combined as ``samples``
    (the catalogue's NODE_SAMPLES and file-system counters) says."""
    nodes: dict[str, dict[str, Series]] = {}
    hosts = {host for host, _ in raw}
    for host in sorted(hosts):
        for measure, (families, how) in samples.items():
            by_family = [[points for _, points in raw.get((host, family), [])]
                         for family in families]
            if not any(by_family):
                continue
            points = tuple(clip(_node_combined(by_family, how), window))
            if points:
                nodes.setdefault(host, {})[measure] = Series(measure, {"host": host}, points)
    return nodes


def _node_combined(by_family: list[list[tuple[Point, ...]]], how: str) -> tuple[Point, ...]:
    """One node's series of a measure from its devices' (or CPUs') raw samples."""
    if how == "busy":  # 1 - mean idle rate over CPUs (each CPU's idle seconds per second)
        idle = combine([counter_rate(p) for p in by_family[0]], "mean")
        return tuple((t, 1.0 - v) for t, v in idle)
    if how == "mean_rate":  # mean over CPUs of each CPU's seconds per second in one mode
        return combine([counter_rate(p) for p in by_family[0]], "mean")
    if how == "difference":  # MemTotal - MemAvailable, where both were scraped
        if len(by_family) != 2 or not all(by_family):
            return ()
        total, free = (dict(combine(parts, "sum")) for parts in by_family)
        return tuple((t, total[t] - free[t]) for t in sorted(total.keys() & free.keys()))
    parts = [points for family in by_family for points in family]
    if how in ("rate", "increase"):
        return combine([counter_rate(points) for points in parts], "sum")
    return combine(parts, how)


def first_timestamp(lines: Iterable[str]) -> float | None:
    """The timestamp of the first sample (None for a file without one)."""
    for sample in iter_samples(lines):
        return sample.timestamp
    return None


# --- Line parsing ----------------------------------------------------------------------


def _error(number: int, line: str, why: str) -> OpenMetricsError:
    return OpenMetricsError(f"OpenMetrics line {number}: {why}", service=SERVICE,
                            detail=line[:300])


def _sample(number: int, line: str) -> Sample:
    match = _NAME.match(line)
    if not match:
        raise _error(number, line, "expected a metric name")
    name, pos = match.group(), match.end()
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        labels, pos = _labels(number, line, pos + 1)
    rest = line[pos:].split("#", 1)[0].split()  # drop an exemplar
    if len(rest) != 2:
        raise _error(number, line, "expected 'value timestamp' after the labels")
    try:
        value, timestamp = float(rest[0]), float(rest[1])
    except ValueError:
        raise _error(number, line, "value and timestamp must be numbers") from None
    if not math.isfinite(timestamp):
        raise _error(number, line, "timestamp must be finite")
    return Sample(name, labels, value, timestamp)


def _labels(number: int, line: str, pos: int) -> tuple[dict[str, str], int]:
    labels: dict[str, str] = {}
    while True:
        if pos < len(line) and line[pos] == "}":
            return labels, pos + 1
        match = _LABEL.match(line, pos)
        if not match or line[match.end():match.end() + 2] != '="':
            raise _error(number, line, f"bad label at column {pos + 1}")
        value, pos = _quoted(number, line, match.end() + 2)
        labels[match.group()] = value
        if pos < len(line) and line[pos] == ",":
            pos += 1
        elif pos >= len(line) or line[pos] != "}":
            raise _error(number, line, f"expected ',' or '}}' at column {pos + 1}")


def _quoted(number: int, line: str, pos: int) -> tuple[str, int]:
    end = line.find('"', pos)
    if end >= 0 and "\\" not in line[pos:end]:
        return line[pos:end], end + 1  # the common case: no escapes
    out: list[str] = []
    while pos < len(line):
        ch = line[pos]
        if ch == '"':
            return "".join(out), pos + 1
        if ch == "\\":
            escaped = line[pos + 1:pos + 2]
            if escaped not in _ESCAPES:
                raise _error(number, line, f"bad escape at column {pos + 1}")
            out.append(_ESCAPES[escaped])
            pos += 2
            continue
        out.append(ch)
        pos += 1
    raise _error(number, line, "unterminated label value")
