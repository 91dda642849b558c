"""Page and API reads from a PostgreSQL streaming replica, when one is configured (issue 29).

With ``DATABASE_REPLICA_URL`` set, ``ReplicaMiddleware`` marks each GET or HEAD request as
one whose reads may go to the replica and ``ReplicaRouter`` sends them there. Everything
else reads the primary: POSTs, Celery tasks, commands, the admin's writes.

Read-your-writes:
1. the first write of a request (the router sees every one) turns the rest of that request's
   reads to the primary, so a page that shows what it just wrote reads it back;
2. the response then carries a cookie that keeps that browser's reads on the primary for
   ``DATABASE_REPLICA_STICKY`` seconds: the redirect after a POST, and the pages after it,
   show the write even while the replica has not replayed it yet.

Health: every ``DATABASE_REPLICA_CHECK_EVERY`` seconds (per process) the replica's replay
position is compared with the primary's WAL position; when it is behind by more than
``DATABASE_REPLICA_MAX_LAG`` seconds (``pg_last_xact_replay_timestamp``), or cannot be
reached, reads go to the primary until a later check finds it back. ``/metrics``
(``beacon_db_replica_*``) and the Platform page say which and why. A safe request that read
the replica and failed (it went away between two checks) is served again from the primary,
so a replica's failure does not show as an error page.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.http import HttpRequest, HttpResponse
from prometheus_client.core import GaugeMetricFamily

REPLICA = "replica"
PRIMARY = "default"
COOKIE = "beacon_primary"
SAFE = ("GET", "HEAD", "OPTIONS")


@dataclass
class _Request:
    """What the router knows of the request in progress."""

    replica_ok: bool
    wrote: bool = False
    used_replica: bool = False


@dataclass(frozen=True)
class ReplicaState:
    """The latest health check: whether reads may use the replica, and why not."""

    configured: bool
    usable: bool
    lag_s: float | None = None
    reason: str = ""
    checked_at: float = field(default=0.0, compare=False)


_current: ContextVar[_Request | None] = ContextVar("beacon_replica_request", default=None)
_lock = threading.Lock()
_state = ReplicaState(configured=False, usable=False, reason="not checked yet")


def configured() -> bool:
    return REPLICA in connections.settings


# --- Health -------------------------------------------------------------------------------


def state(force: bool = False) -> ReplicaState:
    """The replica's health, checked at most every ``DATABASE_REPLICA_CHECK_EVERY`` s."""
    global _state
    if not configured():
        return ReplicaState(configured=False, usable=False, reason="no replica configured")
    now = time.monotonic()
    with _lock:
        if force or now - _state.checked_at >= settings.DATABASE_REPLICA_CHECK_EVERY \
                or not _state.configured:
            _state = check(now)
        return _state


def check(now: float | None = None) -> ReplicaState:
    """Ask the primary for its WAL position and the replica how far it has replayed."""
    now = time.monotonic() if now is None else now
    limit = settings.DATABASE_REPLICA_MAX_LAG
    try:
        with connections[PRIMARY].cursor() as cursor:
            cursor.execute("SELECT pg_current_wal_lsn()::text")
            primary_lsn = cursor.fetchone()[0]
        with connections[REPLICA].cursor() as cursor:
            cursor.execute(
                "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn() >= %s::pg_lsn, "
                "EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())", [primary_lsn])
            recovering, caught_up, behind = cursor.fetchone()
    except (OperationalError, InterfaceError, DatabaseError) as exc:
        connections[REPLICA].close()  # the next check connects afresh
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ReplicaState(True, False, None, f"replica unreachable: {first}", now)
    if not recovering:
        return ReplicaState(True, False, None, "the replica URL names a primary "
                                               "(not in recovery)", now)
    lag = 0.0 if caught_up else (float(behind) if behind is not None else math.inf)
    if lag > limit:
        return ReplicaState(True, False, lag, f"replica {lag:.1f} s behind the primary "
                                              f"(DATABASE_REPLICA_MAX_LAG={limit})", now)
    return ReplicaState(True, True, lag, "", now)


# --- Routing ------------------------------------------------------------------------------


class ReplicaRouter:
    """Reads of a replica-ok request go to the replica while it is healthy; all else to the
    primary. Always names a database, so a row read from the replica is saved to the
    primary (Django would otherwise write it back where it came from)."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        request = _current.get()
        if request is None or not request.replica_ok or request.wrote or not configured():
            return PRIMARY
        if not state().usable:
            return PRIMARY
        request.used_replica = True
        return REPLICA

    def db_for_write(self, model: Any, **hints: Any) -> str:
        request = _current.get()
        if request is not None:
            request.wrote = True  # read-your-writes: the rest of the request reads the primary
        return PRIMARY

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True  # one database: the replica is the primary's copy

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return False if db == REPLICA else None


class ReplicaMiddleware:
    """Marks safe requests without the sticky cookie as replica-ok; sets the cookie after a
    write; serves a request again from the primary when the replica failed under it.

    Placed before the session and authentication middleware: their reads are routed too, and
    a request served again starts them afresh."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not configured():
            return self.get_response(request)
        ok = request.method in SAFE and not _sticky(request)
        current = _Request(replica_ok=ok)
        token = _current.set(current)
        try:
            response = self.get_response(request)
            if current.used_replica and response.status_code >= 500 \
                    and not state(force=True).usable:
                # the replica went away under this request (between two checks): serve it
                # again from the primary; safe methods only, so running it twice is harmless
                current.replica_ok, current.used_replica = False, False
                response = self.get_response(request)
            if current.wrote:
                response.set_cookie(COOKIE, str(int(time.time())),
                                    max_age=settings.DATABASE_REPLICA_STICKY, httponly=True,
                                    samesite="Lax", secure=request.is_secure())
            return response
        finally:
            _current.reset(token)


def _sticky(request: HttpRequest) -> bool:
    raw = request.COOKIES.get(COOKIE, "")
    return raw.isdigit() and time.time() - int(raw) < settings.DATABASE_REPLICA_STICKY


V = TypeVar("V", bound=Callable[..., Any])


def reads_primary(view: V) -> V:
    """A view whose reads must see the latest writes of others (a run's status it polls)."""

    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        current = _current.get()
        if current is not None:
            current.replica_ok = False
        return view(request, *args, **kwargs)

    return wrapped  # type: ignore[return-value]


# --- Metrics ------------------------------------------------------------------------------


class ReplicaCollector:
    """``beacon_db_replica_in_use`` (1: page reads go to the replica) and its lag."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        current = state()
        in_use = GaugeMetricFamily(
            "beacon_db_replica_in_use",
            "1 when page and API reads go to the read replica; 0 when they read the primary "
            "(no replica configured, behind by more than DATABASE_REPLICA_MAX_LAG, or "
            "unreachable: see the reason label)", labels=["configured", "reason"])
        in_use.add_metric([str(current.configured).lower(), current.reason],
                          1.0 if current.usable else 0.0)
        yield in_use
        if current.configured:
            lag = GaugeMetricFamily("beacon_db_replica_lag_seconds",
                                    "replay lag of the read replica at the last check "
                                    "(NaN: unreachable)")
            lag.add_metric([], math.nan if current.lag_s is None else current.lag_s)
            yield lag
