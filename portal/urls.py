"""The URL map: pages per app, the admin, and the API under /api/v1/."""

import sys

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerSplitView,
)

from apps.core.api.docs import docs_csp

urlpatterns = [
    path("", include("apps.shell.urls")),
    path("", include("apps.accounts.urls")),
    path("", include("apps.clusters.urls")),
    path("", include("apps.jobs.urls")),
    path("", include("apps.audit.urls")),
    path("", include("apps.chargeback.urls")),
    path("", include("apps.quotas.urls")),
    path("", include("apps.reports.urls")),
    path("", include("apps.security.urls")),
    path("", include("apps.slo.urls")),
    path("", include("apps.guardrails.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("portal.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # Swagger UI and ReDoc from the installed drf-spectacular-sidecar package (no CDN)
    path("api/docs/", docs_csp(SpectacularSwaggerSplitView.as_view(url_name="api-schema")),
         name="api-docs"),
    path("api/redoc/", docs_csp(SpectacularRedocView.as_view(
        url_name="api-schema", template_name="api/redoc.html")), name="api-redoc"),
]

if settings.OIDC_ENABLED:  # /oidc/authenticate/, /oidc/callback/, /oidc/logout/
    urlpatterns.append(path("oidc/", include("mozilla_django_oidc.urls")))


def handler400(request: HttpRequest, exception: Exception) -> HttpResponse:
    """API clients get JSON for a refused request too (a body over
    DATA_UPLOAD_MAX_MEMORY_SIZE, say), as the schema's 400 documents; people get a page."""
    if request.path.startswith("/api/"):
        detail = ("request body too large: send smaller batches"
                  if isinstance(exception, RequestDataTooBig) else "Bad request.")
        return JsonResponse({"detail": detail}, status=400)
    return defaults.bad_request(request, exception)


def handler403(request: HttpRequest, exception: Exception) -> HttpResponse:
    """People get the portal's page saying why and where to go (apps/core/error_pages.py)."""
    from apps.core.error_pages import error_page

    if request.path.startswith("/api/"):
        return JsonResponse({"detail": str(exception) or "Forbidden."}, status=403)
    return error_page(request, 403, exception)


def handler404(request: HttpRequest, exception: Exception) -> HttpResponse:
    """API clients get JSON for an unknown URL too, as the schema documents; people get a page
    in the portal's layout saying why (when known) and where to go."""
    from apps.core.error_pages import error_page

    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return error_page(request, 404, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    """A database that cannot be reached is a 503 saying so, with Retry-After; any other
    uncaught error a 500 page in the portal's layout (Django's plain one if the layout
    cannot be drawn)."""
    from apps.shell.views import database_unavailable

    error = sys.exc_info()[1]
    if isinstance(error, (OperationalError, InterfaceError)):
        return database_unavailable(request, error)
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Server error."}, status=500)
    from apps.core.error_pages import server_error

    return server_error(request)
