"""Sign-in lockouts (django-axes) that say how long they last, and the admin's way out.

django-axes locks a (user name, address) pair after ``LOGIN_FAILURE_LIMIT`` failures for
``LOGIN_LOCKOUT_MINUTES``. Its page said neither how long, and by default every attempt
during the lockout, even with the right password, restarted it (Beacon sets
``AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False``). ``lockout_response`` is
``AXES_LOCKOUT_CALLABLE``: the page says when sign-in opens again; ``unlock`` lifts a lock
for the admin action and ``manage.py unlock_sign_in``, both audited (issue 27).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off, get_failure_limit
from axes.utils import reset
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from apps.audit import services as audit
from apps.audit.models import AuditEvent


def lockout_ends(attempts: Iterable[tuple[datetime, int]], limit: int,
                 cool_off: timedelta) -> datetime | None:
    """When a lockout over ``attempts`` ((last failure, failures) per record) ends: the
    moment the newest records still in the window add up to fewer than ``limit``, as
    django-axes counts (the failures of records whose last failure is within ``cool_off``).
    ``None`` when they never reached the limit."""
    total = 0
    for when, failures in sorted(attempts, key=lambda a: a[0], reverse=True):
        total += failures
        if total >= limit:
            return when + cool_off
    return None


def minutes_left(ends: datetime, now: datetime) -> int:
    """Whole minutes until ``ends``, rounded up: "1 minute" until the very end."""
    return max(1, math.ceil((ends - now).total_seconds() / 60))


def lockout_response(request: HttpRequest, original_response: Any = None,
                     credentials: dict[str, Any] | None = None) -> HttpResponse:
    """The 429 page, with the minutes left and a ``Retry-After`` header."""
    cool_off = get_cool_off(request) or timedelta(0)
    now = timezone.now()
    ends = _lock_end(request, credentials, cool_off) or now + cool_off
    response = render(request, "registration/locked_out.html", {
        "minutes": minutes_left(ends, now), "until": ends,
        "failure_limit": get_failure_limit(request, credentials),
        "lockout_minutes": round(cool_off.total_seconds() / 60),
    }, status=getattr(settings, "AXES_HTTP_RESPONSE_CODE", 429))  # axes' default
    response["Retry-After"] = str(max(1, math.ceil((ends - now).total_seconds())))
    return response


def _lock_end(request: HttpRequest, credentials: dict[str, Any] | None,
              cool_off: timedelta) -> datetime | None:
    handler = AxesProxyHandler.get_implementation()
    if not hasattr(handler, "filter_user_attempts"):
        return None  # a handler without stored attempts (cache): the full cool-off is shown
    since = timezone.now() - cool_off
    ends = [lockout_ends(qs.filter(attempt_time__gte=since)
                         .values_list("attempt_time", "failures_since_start"),
                         get_failure_limit(request, credentials), cool_off)
            for qs in handler.filter_user_attempts(request, credentials)]
    return max((e for e in ends if e is not None), default=None)


def unlock(username: str, via: str, request: HttpRequest | None = None,
           actor: Any = None) -> int:
    """Lift every sign-in lock on ``username`` (from any address) and audit it, even when
    there was nothing to lift (the admin asked). Returns the attempt records removed."""
    removed = reset(username=username)
    audit.record(AuditEvent.Action.UNLOCK, request, user=actor,
                 target=f"sign-in of {username}"[:300],
                 details={"via": via, "attempt_records_removed": removed})
    return removed
