"""The URL map: pages per app, the admin, and the API under /api/v1/."""

import sys

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path
from django.views import defaults
from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    path("", include("apps.core.urls")),
    path("", include("apps.accounts.urls")),
    path("", include("apps.clusters.urls")),
    path("", include("apps.jobs.urls")),
    path("", include("apps.audit.urls")),
    path("", include("apps.chargeback.urls")),
    path("", include("apps.quotas.urls")),
    path("", include("apps.security.urls")),
    path("", include("apps.slo.urls")),
    path("", include("apps.guardrails.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("portal.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
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


def handler404(request: HttpRequest, exception: Exception) -> HttpResponse:
    """API clients get JSON for an unknown URL too, as the schema documents; people get a page."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    """A database that cannot be reached is a 503 saying so, with Retry-After; any other
    uncaught error the usual 500. The page uses no template context (the context
    processors query the database) and no static files."""
    from apps.core.views import database_unavailable

    error = sys.exc_info()[1]
    if isinstance(error, (OperationalError, InterfaceError)):
        return database_unavailable(request, error)
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Server error."}, status=500)
    return defaults.server_error(request)
