"""Session lifetimes: an idle timeout and an absolute timeout, both from settings.

Django's own ``SESSION_COOKIE_AGE`` is one clock that restarts only when the session is
saved. Two timestamps in the session give the two limits ASVS asks for: ``auth_at`` (set
at sign-in, never moved) and ``seen_at`` (moved forward at most once a minute, so an
active user does not cause a session write on every request).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse

AUTH_AT = "beacon_auth_at"
SEEN_AT = "beacon_seen_at"
SEEN_RESOLUTION_S = 60


def stamp_login(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    """``user_logged_in`` receiver: start both clocks."""
    if request is not None and hasattr(request, "session"):
        now = int(time.time())
        request.session[AUTH_AT] = now
        request.session[SEEN_AT] = now


def expiry_reason(session: Any, now: float) -> str | None:
    """Why this signed-in session is over ("idle", "absolute", "unstamped"), or None."""
    auth_at, seen_at = session.get(AUTH_AT), session.get(SEEN_AT)
    if auth_at is None or seen_at is None:
        return "unstamped"  # created before these clocks existed: sign in again
    if now - auth_at > settings.SESSION_ABSOLUTE_TIMEOUT:
        return "absolute"
    if now - seen_at > settings.SESSION_IDLE_TIMEOUT:
        return "idle"
    return None


class SessionTimeoutMiddleware:
    """Signs out a session past either limit; the view then sees an anonymous user."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.user.is_authenticated:
            self._enforce(request)
        return self.get_response(request)

    def _enforce(self, request: HttpRequest) -> None:
        now = time.time()
        reason = expiry_reason(request.session, now)
        if reason:
            # our own attribute, read by the audit log (apps/audit/signals.py) after logout()
            # flushed the session; the stubs' HttpRequest declares only Django's attributes
            request.session_end_reason = reason  # type: ignore[attr-defined]
            logout(request)
            messages.info(request, "Your session has ended; please sign in again.")
        elif now - request.session[SEEN_AT] >= SEEN_RESOLUTION_S:
            request.session[SEEN_AT] = int(now)
