"""Error pages inside the portal's layout: what happened, why (when the code said so) and where
to go next. API paths keep their JSON answers (portal/urls.py)."""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import Resolver404, reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import defaults

log = logging.getLogger(__name__)
HEADINGS = {403: "You cannot open this page", 404: "Nothing to see here",
            500: "Something went wrong on our side"}
DEFAULT_REASONS = {
    403: "Your role does not include this page.",
    404: "This page does not exist, or it belongs to a team you are not in.",
    500: "The error was logged for the platform team. Try again in a minute; if it happens "
         "again, tell them what you did and when",
}


def reason_of(exception: BaseException | None) -> str:
    """The message the code raised with, when it is one written for people: not a URL
    resolver's report, not get_object_or_404's "No Job matches the given query."."""
    if exception is None or isinstance(exception, Resolver404) or not exception.args:
        return ""
    message = exception.args[0]
    if not isinstance(message, str) or message.endswith("matches the given query."):
        return ""
    return message[:1].upper() + message[1:]


def _links(request: HttpRequest) -> list[tuple[str, str]]:
    links = []
    back = request.META.get("HTTP_REFERER", "")
    if back and back != request.build_absolute_uri() and url_has_allowed_host_and_scheme(
            back, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        links.append(("Back to the page you came from", back))
    if getattr(request, "user", None) is not None and request.user.is_authenticated:
        links += [("My jobs", reverse("core-home")), ("All jobs you may see", reverse("jobs-list")),
                  ("SLOs of your teams", reverse("slo-list"))]
    else:
        links.append(("Sign in", f"{reverse('login')}?next={request.path}"))
    return links


def error_page(request: HttpRequest, status: int, exception: BaseException | None = None,
               **extra: Any) -> HttpResponse:
    reason = reason_of(exception) or DEFAULT_REASONS[status]
    return render(request, "errors/error.html", {
        "status": status, "heading": HEADINGS[status], "reason": reason.rstrip(".") + ".",
        "links": _links(request), **extra}, status=status)


def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 page in the layout; if the layout itself cannot be drawn (the error may be
    in what it needs), Django's plain page."""
    try:
        return error_page(request, 500, when=timezone.now())
    except Exception:  # any failure here must still answer 500
        log.exception("the 500 page could not be drawn in the layout")
        return defaults.server_error(request)
