"""Trace uploads over the limit are refused by their Content-Length, before the body is read.

``CsrfViewMiddleware`` reads ``request.POST`` to look for the form's token, and DRF's
``SessionAuthentication`` runs the same check: either parses the multipart body and spools
every file to disk before any view runs, so a size check inside the view came after the
whole upload was stored. This middleware sits before ``CsrfViewMiddleware`` and answers 413
without touching the body. The WSGI server never hands Django more than Content-Length
bytes, so the header is the size that would be read. (A proxy in front should refuse such
bodies itself too: nginx ``client_max_body_size``, docs/traces.md.)
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import Resolver404, resolve, reverse

from apps.jobs import traces

# The routes that take trace files: the job page's form and the API's traces action.
UPLOAD_ROUTES = frozenset({"jobs-traces", "api:job-traces"})


class TraceUploadLimitMiddleware:
    """413 for a POST to a trace upload route whose body is over ``TRACE_UPLOAD_MAX_MB``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method == "POST":
            refusal = _refusal(request)
            if refusal is not None:
                return refusal
        return self.get_response(request)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    try:
        traces.check_upload_size(request.META.get("CONTENT_LENGTH"))
    except traces.UploadRefused as exc:
        try:  # resolved only for bodies over the limit: other requests pay nothing
            match = resolve(request.path_info)
        except Resolver404:
            return None
        if match.view_name not in UPLOAD_ROUTES:
            return None
        if match.view_name.startswith("api:"):
            return JsonResponse({"detail": str(exc)}, status=exc.status)
        page = reverse("jobs-detail", kwargs=match.kwargs) + "#phases"
        return render(request, "jobs/upload_refused.html",
                      {"message": str(exc), "job_page": page}, status=exc.status)
    return None
