"""Response middleware: Server-Timing (how long Django spent, for dev tools and load tests),
no caching of signed-in responses, and visible markers for bidirectional control characters."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control


class ServerTimingMiddleware:
    """Adds ``Server-Timing: app;dur=<ms>`` (time inside Django, without network or queueing)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = self.get_response(request)
        response["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
        return response


# --- Signed-in responses are never cached (issue 27) ------------------------------------


class PrivateCacheMiddleware:
    """``Cache-Control: private, no-store`` on every response to a signed-in request.

    Pages, partials, exports and API answers for a signed-in user hold that user's data; a
    shared proxy must not keep them and the browser must not write them to disk, where the
    back button or the next person at the machine finds them after sign-out. The user is
    read after the view, so API token users (whom DRF authenticates in the view) count too.
    Anonymous pages (sign-in, health) keep whatever they set.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            patch_cache_control(response, private=True, no_store=True)
        return response


# --- Bidirectional control characters from outside data (issue 27) ------------------------

# U+202A-202E (embeddings and overrides), U+2066-2069 (isolates), U+200E/F (marks), as UTF-8.
# In valid UTF-8 a lead byte 0xE2 never occurs inside another character, so the byte
# pattern matches exactly these characters.
_BIDI = re.compile(rb"\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]")


def _marker(match: re.Match[bytes]) -> bytes:
    return f"[U+{ord(match.group().decode()):04X}]".encode()


def neutralise_bidi(body: bytes) -> bytes:
    """``body`` with every bidirectional control character shown as ``[U+202E]``."""
    return _BIDI.sub(_marker, body)


class BidiMarkerMiddleware:
    """Shows bidirectional control characters in HTML as visible markers.

    Job names, user names, comments and paths come from Slurm and users; a right-to-left
    override in ``report<U+202E>gpj.exe`` makes the page show ``reportexe.jpg``, and an
    unclosed one reorders the rest of the line (Trojan Source, CVE-2021-42574). Every
    HTML response is rewritten once, here, rather than in each template that shows outside
    text: nothing can be forgotten. JSON and CSV keep the data as it is.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.streaming or not response.get("Content-Type", "").startswith("text/html"):
            return response
        body = neutralise_bidi(response.content)
        if len(body) != len(response.content):
            response.content = body
            if response.has_header("Content-Length"):
                response["Content-Length"] = str(len(body))
        return response
