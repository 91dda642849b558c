"""API rate limits: per credential (a named token, else a signed-in user) and per address.

Two scopes: ``api`` (every endpoint) and ``ingest`` (the collectors' endpoints, a view with
``throttle_scope = "ingest"``), each with a per-credential and a per-address rate from
``settings.API_THROTTLE_RATES`` (``API_RATE_*`` and ``INGEST_RATE_*``). A refused request is a
429 with ``Retry-After``. Counts live in the default cache: shared by every process with
Redis, per process under the embedded default.

DRF checks throttles after authentication and permissions, so a request with a bad token or
none would be refused with 401/403 before it is counted. The per-address limit therefore runs
earlier, in ``AddressThrottleMiddleware``, over every request under ``/api/``; the
per-credential limit is a DRF throttle (``DEFAULT_THROTTLE_CLASSES``), since it needs to know
who is asking.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import Resolver404, resolve
from rest_framework.exceptions import Throttled
from rest_framework.throttling import SimpleRateThrottle

from apps.core.net import client_ip

DEFAULT_SCOPE = "api"


def scope_of(view: Any) -> str:
    """The view's ``throttle_scope`` (``ingest`` for the collectors), else ``api``."""
    return str(getattr(view, "throttle_scope", None) or DEFAULT_SCOPE)


class _ScopedThrottle(SimpleRateThrottle):
    """A rate read per request from ``API_THROTTLE_RATES["<scope>_<kind>"]`` (None: no limit),
    so a view's scope and a changed setting both take effect without a restart of the class."""

    kind = ""

    def __init__(self) -> None:  # the rate depends on the view: set in allow_request
        self.rate: str | None = None

    def allow_request(self, request: Any, view: Any) -> bool:
        self.scope = f"{scope_of(view)}_{self.kind}"
        self.rate = settings.API_THROTTLE_RATES.get(self.scope)
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return bool(super().allow_request(request, view))


class CredentialThrottle(_ScopedThrottle):
    """Per credential: each named token its own budget, a session its user's; anonymous
    requests are left to the per-address limit."""

    kind = "token"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        auth, user = request.auth, request.user
        if getattr(auth, "pk", None) is not None:
            ident = f"{type(auth).__name__}-{auth.pk}"
        elif user is not None and user.is_authenticated:
            ident = f"user-{user.pk}"
        else:
            return None
        return self.cache_format % {"scope": self.scope, "ident": ident}


class AddressThrottle(_ScopedThrottle):
    """Per client address (``apps.core.net.client_ip``: behind ``TRUSTED_PROXY_COUNT``
    proxies, the address the nearest trusted proxy saw)."""

    kind = "address"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": client_ip(request)}


def _view_for(path: str) -> Any:
    try:
        func = resolve(path).func
    except Resolver404:
        return None
    return getattr(func, "cls", None)


class AddressThrottleMiddleware:
    """The per-address limit on every ``/api/`` request, before authentication: a flood of
    bad tokens or anonymous calls is counted too. The 429 is DRF's (same body and header)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith("/api/"):
            throttle = AddressThrottle()
            if not throttle.allow_request(request, _view_for(request.path_info)):
                return _too_many(throttle.wait())
        return self.get_response(request)


def _too_many(wait: float | None) -> HttpResponse:
    refused = Throttled(wait)
    response = JsonResponse({"detail": str(refused.detail)}, status=refused.status_code)
    seconds = getattr(refused, "wait", None)  # rounded up by DRF, as its own header is
    if seconds is not None:
        response["Retry-After"] = str(max(1, int(seconds)))
    return response
