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

from django.conf import settings
from django.core.exceptions import TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import Resolver404, ResolverMatch, resolve, reverse

from apps.jobs import traces

# The routes that take trace files: the job page's form and the API's traces action.
UPLOAD_ROUTES = frozenset({"jobs-traces", "api:job-traces"})


class TraceUploadLimitMiddleware:
    """413 for a POST to a trace upload route whose body is over ``TRACE_UPLOAD_MAX_MB``; 400
    with the reason for one of more than ``TRACE_UPLOAD_MAX_FILES`` files."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method == "POST":
            refusal = _refusal(request) or _too_many_files(request)
            if refusal is not None:
                return refusal
        return self.get_response(request)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    try:
        traces.check_upload_size(request.META.get("CONTENT_LENGTH"))
    except traces.UploadRefused as exc:
        # resolved only for bodies over the limit: other requests pay nothing
        match = _upload_route(request)
        return None if match is None else _refused(request, match, exc)
    return None


def _too_many_files(request: HttpRequest) -> HttpResponse | None:
    """Django's multipart parser stops at ``DATA_UPLOAD_MAX_NUMBER_FILES`` with an exception
    that becomes a bare "Bad Request" (wherever the body is first read: here, CSRF or DRF).
    On the upload routes the body is read here first, so the refusal can say why. The files
    parsed are kept on the request: CSRF and the view read them from there, not again."""
    if not request.META.get("CONTENT_TYPE", "").startswith("multipart/form-data"):
        return None
    match = _upload_route(request)
    if match is None:
        return None
    try:
        request.FILES  # noqa: B018  parse now, inside the try
    except TooManyFilesSent:
        limit = settings.TRACE_UPLOAD_MAX_FILES
        return _refused(request, match, traces.UploadRefused(
            f"more than {limit} files in one upload: at most {limit} (one per rank); for a "
            f"larger run use manage.py import_trace on its folder"))
    return None


def _upload_route(request: HttpRequest) -> ResolverMatch | None:
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return None
    return match if match.view_name in UPLOAD_ROUTES else None


def _refused(request: HttpRequest, match: ResolverMatch,
             exc: traces.UploadRefused) -> HttpResponse:
    if match.view_name.startswith("api:"):
        return JsonResponse({"detail": str(exc)}, status=exc.status)
    page = reverse("jobs-detail", kwargs=match.kwargs) + "#phases"
    return render(request, "jobs/upload_refused.html",
                  {"message": str(exc), "job_page": page}, status=exc.status)
