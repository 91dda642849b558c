"""Typed Prometheus client; what comes from prometheus-api-client is the session set-up only.

Why not ``custom_query(_range)`` as it comes (measured against Prometheus 2.42, issue 5):

- its default ``Retry(total=3)`` re-sends a timed-out query: 0.5 s became 8.2 s, ending in a
  ``requests`` ``RetryError``. Here the library's retry is off and the portal retries only
  what is safe to repeat (see :meth:`PrometheusClient._send`);
- it returns ``data.result`` only, dropping ``warnings`` (partial data) and ``resultType``;
- ``method="POST"`` still puts the query in the URL (431 past ~1 MB). Here queries are
  posted as a form body.

What the library does here, plainly: ``PrometheusConnect`` is constructed on our session so
that it mounts its ``HTTPAdapter`` there, with a ``Retry`` of zero (tested:
``test_a_client_timeout_is_sent_once_and_is_transient``). Nothing else of it is called.
Queries are our own POSTs (the three traps above). Readiness is our own ``GET /-/ready``:
the library's ``check_prometheus_connection`` fetches the web UI's root instead, and raises
on a refused connection rather than answering False.
Every failure becomes an ``AdapterError``; the ones a later retry can fix become a
``TransientAdapterError``.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry

from apps.analysis.timeseries import Point, Series
from apps.core.errors import AdapterError, TransientAdapterError
from apps.jobs.adapters import jsonstream

log = logging.getLogger(__name__)

SERVICE = "prometheus"
# Prometheus refuses more than 11,000 points per series in a range query.
MAX_POINTS_PER_SERIES = 11_000


class QueryError(AdapterError):
    """Prometheus refused the query (400 bad PromQL, 422 execution error): a bug or bad input."""


class QueryTooLarge(QueryError):
    """The query would load more samples than ``--query.max-samples`` allows."""


class QueryTimeout(TransientAdapterError):
    """Prometheus (or the client) gave up in time; later, or smaller, may work."""


@dataclass(frozen=True)
class QueryResult:
    """What a query returned: the series, their type, and anything Prometheus warned about.

    ``warnings`` are non-empty when the data may be partial (a failing remote read, say);
    callers must show or record them. ``peak_samples`` / ``total_samples`` come from
    ``stats=all`` when asked for.
    """

    result_type: str
    series: list[Series] = field(default_factory=list)
    warnings: tuple[str, ...] = ()
    peak_samples: int | None = None
    total_samples: int | None = None


@dataclass(frozen=True)
class QueryFailure:
    """One query Prometheus could not answer: which measure, the query, and Prometheus's
    own error text ("HTTP 422 execution: vector cannot contain metrics with the same
    labelset"). Kept so that the rest of a read goes on, and shown where the read is."""

    measure: str
    query: str
    error: str

    def __str__(self) -> str:
        return f"{self.measure}: {self.error} (query: {self.query[:500]})"


def read_narrowly(failures: list[QueryFailure], measure: str, expr: str,
                  call: Callable[[], QueryResult]) -> QueryResult | None:
    """``call()``, or None with the failure noted in ``failures``: one refused or timed-out
    query must not cost the other measures of a read (issue 17).

    Prometheus unreachable or unavailable is not narrow: re-raised, since every other
    query would fail the same way (the task retries later).
    """
    try:
        return call()
    except TransientAdapterError as exc:
        if not isinstance(exc, QueryTimeout):
            raise
        failures.append(QueryFailure(measure, expr, error_text(exc)))
    except AdapterError as exc:
        failures.append(QueryFailure(measure, expr, error_text(exc)))
    return None


def error_text(exc: AdapterError) -> str:
    """What Prometheus said (``HTTP 422 execution: ...``), else the adapter's message."""
    first = exc.detail.splitlines()[0] if exc.detail else ""
    return first if first.startswith("HTTP ") else str(exc)


def all_failed(failures: list[QueryFailure], asked: int, what: str) -> AdapterError | None:
    """The error to raise when every one of ``asked`` queries failed (the source failed,
    not a measure of it), else None."""
    if asked and len(failures) >= asked:
        return AdapterError(f"every {what} query failed ({asked}); first: {failures[0]}",
                            service=SERVICE, detail="\n".join(map(str, failures))[:2000])
    return None


class PrometheusClient:
    """A small, typed view of the Prometheus HTTP API.

    ``timeout`` (seconds) bounds every request on the client side; the server is told to
    give up a little earlier, so a slow query ends as a clear ``QueryTimeout`` rather than
    a dropped connection while the server keeps working. ``retries`` is how often a
    *connection* failure or a 503 "unavailable" is retried (never a timeout: repeating a
    heavy query only doubles its cost; the Celery task retries later, with backoff).
    """

    def __init__(self, base_url: str, *, timeout: float = 10.0, retries: int = 1,
                 backoff: float = 0.25, headers: Mapping[str, str] | None = None,
                 session: requests.Session | None = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise AdapterError(f"Prometheus URL {base_url!r} has no http(s) scheme",
                               service=SERVICE)
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self.retries = max(0, int(retries))
        self.backoff = backoff
        self.headers = dict(headers or {})
        self.session = session or requests.Session()
        # The library mounts its own retry adapter on the session: make it a no-op. This
        # set-up is all that is used of PrometheusConnect (see the module docstring).
        self.connection = PrometheusConnect(
            url=self.base_url, headers=self.headers, session=self.session,
            retry=Retry(total=0, connect=0, read=0, status=0, redirect=0, raise_on_status=False),
            timeout=self.timeout,
        )

    # --- Public API --------------------------------------------------------------------

    def ready(self) -> bool:
        """True when Prometheus answers its readiness probe ``/-/ready`` (200 once the TSDB
        is loaded; never an exception)."""
        try:
            response = self.session.get(f"{self.base_url}/-/ready", timeout=self.timeout,
                                        headers=self.headers)
        except requests.RequestException:
            return False
        return response.status_code == 200

    def query(self, expr: str, at: float | None = None, *, stats: bool = False) -> QueryResult:
        """Instant query at ``at`` (unix seconds; server's now when None)."""
        form: dict[str, str] = {"query": expr}
        if at is not None:
            form["time"] = _num(at)
        return self._query("query", form, stats)

    def query_range(self, expr: str, start: float, end: float, step: float, *,
                    stats: bool = False) -> QueryResult:
        """Range query over ``[start, end]`` every ``step`` seconds (fractions allowed)."""
        return self._query("query_range", _range_form(expr, start, end, step), stats)

    def stream_range(self, expr: str, start: float, end: float, step: float,
                     each: Callable[[Series], None]) -> QueryResult:
        """``query_range`` whose series go to ``each`` as they are decoded, never all held
        at once: the answer is read a megabyte of text at a time (issue 29: one GPU
        measure of a 100,000-GPU cluster is 100,000 series, most of a gigabyte as decoded
        JSON). The result carries the type and warnings; its ``series`` is empty.

        An answer cut off midway raises ``TransientAdapterError`` (never ``QueryTimeout``,
        which ``read_narrowly`` would take as one failed measure) after ``each`` has seen
        part of it: the caller drops whatever it folded from this read.
        """
        form = _range_form(expr, start, end, step)
        form["timeout"] = self._server_timeout()
        with self._send("query_range", form, stream=True) as response, _gc_paused():
            return _stream_result(response, expr, each)

    # --- HTTP and errors ---------------------------------------------------------------

    def _server_timeout(self) -> str:
        # The server gives up first, so its answer (a 503 "timeout") reaches us.
        return f"{max(0.05, self.timeout * 0.9):.3f}"

    def _query(self, endpoint: str, form: dict[str, str], stats: bool) -> QueryResult:
        form["timeout"] = self._server_timeout()
        if stats:
            form["stats"] = "all"
        body = _check_response(self._send(endpoint, form), form["query"])
        with _gc_paused():
            return _parse_result(body, form["query"])

    def _send(self, endpoint: str, form: dict[str, str], *,
              stream: bool = False) -> requests.Response:
        """POST ``form`` as a form body; retry only connection failures and 503 unavailable.
        A 200 comes back (its body unread when ``stream``); any other status raises."""
        attempt = 0
        while True:
            try:
                return self._post_once(endpoint, form, stream)
            except TransientAdapterError as exc:
                if isinstance(exc, QueryTimeout) or attempt >= self.retries:
                    raise
                attempt += 1
                log.info("prometheus: retry %d/%d after %s", attempt, self.retries, exc)
                time.sleep(self.backoff * 2 ** (attempt - 1))

    def _post_once(self, endpoint: str, form: dict[str, str],
                   stream: bool) -> requests.Response:
        url = f"{self.base_url}/api/v1/{endpoint}"
        try:
            response = self.session.post(url, data=form, headers=self.headers, stream=stream,
                                         timeout=(min(self.timeout, 5.0), self.timeout))
        except requests.Timeout as exc:
            raise QueryTimeout(f"Prometheus did not answer within {self.timeout:g}s",
                               service=SERVICE, detail=str(exc)) from exc
        except requests.RequestException as exc:
            raise TransientAdapterError(f"cannot reach Prometheus at {self.base_url}",
                                        service=SERVICE, detail=str(exc)) from exc
        if response.status_code != 200:
            with response:
                _check_response(response, form.get("query", ""))  # raises its error
        return response


def _range_form(expr: str, start: float, end: float, step: float) -> dict[str, str]:
    """A range query's form, refused here when Prometheus would refuse it."""
    if step <= 0 or end < start:
        raise QueryError(f"bad range: start={start} end={end} step={step}",
                         service=SERVICE)
    if (end - start) / step + 1 > MAX_POINTS_PER_SERIES:
        raise QueryError(
            f"range {end - start:.0f}s at step {step:g}s exceeds Prometheus' "
            f"{MAX_POINTS_PER_SERIES} points per series; use a larger step",
            service=SERVICE)
    return {"query": expr, "start": _num(start), "end": _num(end), "step": _num(step)}


def _num(value: float) -> str:
    return f"{value:.3f}"


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a large answer is decoded and parsed.

    A 64-GPU job's answers hold ~390,000 points: decoding and parsing them allocates about
    a million small containers, and every few hundred allocations the collector walks the
    containers alive, the series parsed so far included. That walk was most of the
    adapter's time over the bare HTTP calls (``python -m bench job_metrics``). Nothing
    built here can form a reference cycle, so reference counting frees all of it; the
    collector is back on as soon as the answer is parsed (Mercurial's ``util.nogc``).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check_response(response: requests.Response, expr: str) -> dict[str, Any]:
    """The JSON body of a successful answer, or the right AdapterError for a failed one."""
    try:
        with _gc_paused():
            body = response.json()
    except ValueError:
        body = None
    status = response.status_code
    if status == 200 and isinstance(body, dict) and body.get("status") == "success":
        return body
    error_type = body.get("errorType", "") if isinstance(body, dict) else ""
    error = body.get("error", "") if isinstance(body, dict) else response.text[:500]
    raise _error_for(status, str(error_type), str(error), expr)


def _error_for(status: int, error_type: str, error: str, expr: str) -> AdapterError:
    detail = f"HTTP {status} {error_type}: {error}\nquery: {expr[:1000]}"
    if status == 400:
        return QueryError(f"Prometheus rejected the query: {error}", service=SERVICE,
                          detail=detail)
    if status == 422:
        # A timeout during series lookup arrives as an execution error (doc §9).
        if "context deadline exceeded" in error:
            return QueryTimeout("Prometheus timed out expanding series", service=SERVICE,
                                detail=detail)
        if "too many samples" in error:
            return QueryTooLarge(
                "query would load too many samples (Prometheus --query.max-samples): "
                "narrow the range, raise the step or use a recording rule",
                service=SERVICE, detail=detail)
        return QueryError(f"Prometheus could not execute the query: {error}",
                          service=SERVICE, detail=detail)
    if status == 503 and error_type == "timeout":
        return QueryTimeout("Prometheus query timed out", service=SERVICE, detail=detail)
    if status in (413, 414, 431):
        return QueryError("query too long for Prometheus", service=SERVICE, detail=detail)
    if status >= 500 or status == 429:
        return TransientAdapterError(f"Prometheus unavailable (HTTP {status})",
                                     service=SERVICE, detail=detail)
    return AdapterError(f"unexpected answer from Prometheus (HTTP {status})",
                        service=SERVICE, detail=detail)


# --- Parsing ---------------------------------------------------------------------------


def _parse_result(body: dict[str, Any], expr: str) -> QueryResult:
    try:
        data = body["data"]
        result_type = str(data["resultType"])
        series = _parse_series(result_type, data["result"])
        stats = data.get("stats", {}).get("samples", {}) if "stats" in data else {}
    except (KeyError, TypeError, ValueError) as exc:
        raise AdapterError("malformed answer from Prometheus", service=SERVICE,
                           detail=f"{exc!r}\nquery: {expr[:1000]}") from exc
    warnings = tuple(str(w) for w in body.get("warnings") or ())
    if warnings:
        log.warning("prometheus: warnings for %s: %s", expr[:200], "; ".join(warnings))
    return QueryResult(result_type, series, warnings, stats.get("peakSamples"),
                       stats.get("totalQueryableSamples"))


def _parse_series(result_type: str, result: Any) -> list[Series]:
    if result_type == "matrix":
        # The hot loop of a job page (~390,000 points for 64 GPUs): one pass per series
        # straight into the tuple the Series keeps, unpacking each pair (a malformed pair
        # is a ValueError, reported as a malformed answer).
        return [_series(item["metric"], tuple([(float(t), float(v)) for t, v in
                                               item["values"]]))
                for item in result]
    if result_type == "vector":
        return [_series(item["metric"], (_point(item["value"]),)) for item in result]
    if result_type == "scalar":
        return [Series("", {}, (_point(result),))]
    raise ValueError(f"unsupported resultType {result_type!r}")


def _stream_result(response: requests.Response, expr: str,
                   each: Callable[[Series], None]) -> QueryResult:
    """A 200 answer's matrix series to ``each``, read from the body in 1 MiB chunks."""
    members: dict[str, Any] = {}
    for series in _streamed(response, expr, members):
        each(series)  # outside the generator: an error of ``each`` is its own, not ours
    if members.get("status") != "success" or members.get("resultType") != "matrix":
        raise AdapterError("malformed answer from Prometheus", service=SERVICE,
                           detail=f"status {members.get('status')!r}, resultType "
                                  f"{members.get('resultType')!r}\nquery: {expr[:1000]}")
    warnings = tuple(str(w) for w in members.get("warnings") or ())
    if warnings:
        log.warning("prometheus: warnings for %s: %s", expr[:200], "; ".join(warnings))
    return QueryResult("matrix", [], warnings)


def _streamed(response: requests.Response, expr: str,
              members: dict[str, Any]) -> Iterator[Series]:
    """The series of ``data.result`` one by one; the other members into ``members``."""
    chunks = response.iter_content(1 << 20)
    try:
        for items in jsonstream.stream(chunks, "result", members, inside=("data",)):
            for item in items:
                yield _series(item["metric"], tuple([(float(t), float(v))
                                                     for t, v in item["values"]]))
    except (requests.RequestException, OSError) as exc:
        raise TransientAdapterError(f"the answer of Prometheus at {response.url} was cut off",
                                    service=SERVICE, detail=f"{exc}\nquery: {expr[:1000]}"
                                    ) from exc
    except (jsonstream.JsonStreamError, KeyError, TypeError, ValueError) as exc:
        raise AdapterError("malformed answer from Prometheus", service=SERVICE,
                           detail=f"{exc!r}\nquery: {expr[:1000]}") from exc


def _series(metric: dict[str, str], points: tuple[Point, ...]) -> Series:
    labels = {str(k): str(v) for k, v in metric.items() if k != "__name__"}
    return Series(str(metric.get("__name__", "")), labels, points)


def _point(pair: Any) -> Point:
    """``[1700000000.5, "NaN"]`` -> ``(1700000000.5, nan)``; values arrive as strings."""
    t, v = pair
    return float(t), float(v)
