"""Audit context for each request, and every API write (POST, PUT, PATCH, DELETE under /api/)."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from rest_framework.permissions import SAFE_METHODS

from apps.audit import services
from apps.audit.models import AuditEvent


class AuditMiddleware:
    """Makes the request available to audit receivers that get none (admin ``LogEntry``), and
    records the caller, address, path and status of each API write, refused ones too.

    The API write is recorded after the view, when DRF has put the token- or
    session-authenticated user on the request. Request bodies are not stored: they may
    carry secrets.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = services.CURRENT_REQUEST.set(request)
        try:
            response = self.get_response(request)
        finally:
            services.CURRENT_REQUEST.reset(token)
        if request.path.startswith("/api/") and request.method not in SAFE_METHODS:
            services.record(AuditEvent.Action.API_WRITE, request, getattr(request, "user", None),
                            status=response.status_code)
        return response
