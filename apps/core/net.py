"""Who is asking: the client address, behind as many trusted proxies as the site declares."""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    """The client's address: ``REMOTE_ADDR``, or an ``X-Forwarded-For`` entry.

    With ``TRUSTED_PROXY_COUNT = n`` the client is the n-th address from the right of
    ``X-Forwarded-For`` (each trusted proxy appends one). Entries left of it are whatever
    the client chose to send, so they are never read. A malformed entry falls back to
    ``REMOTE_ADDR``. Used by login rate limiting, the audit log and ``/metrics``.
    """
    remote = request.META.get("REMOTE_ADDR", "")
    hops = settings.TRUSTED_PROXY_COUNT
    if hops:
        chain = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
        if len(chain) >= hops and _is_ip(chain[-hops]):
            return chain[-hops]
    return remote


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
