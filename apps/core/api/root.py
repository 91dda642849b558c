"""``GET /api/v1/``: every endpoint of the API, where its schema and docs are, how to sign in.

Built from the URL map itself, so a new endpoint is listed without editing this file."""

from __future__ import annotations

import re
from typing import Any

from django.urls import URLPattern, URLResolver, reverse
from drf_spectacular.utils import extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*(?:\([^)]*\)[^)]*)*\)")


def endpoints(patterns: list[Any], prefix: str = "/api/v1/") -> list[dict[str, str]]:
    """Every route under ``prefix``: its name and path, parameters shown as ``{name}``."""
    out: list[dict[str, str]] = []
    for pattern in patterns:
        route = _GROUP.sub(r"{\1}", str(pattern.pattern)).lstrip("^").rstrip("$")
        if isinstance(pattern, URLResolver):
            out += endpoints(pattern.url_patterns, prefix + route)
        elif isinstance(pattern, URLPattern) and pattern.name:
            out.append({"name": pattern.name, "path": prefix + route})
    return out


class ApiRootView(APIView):
    """The API's front door (no sign-in needed to read it; the endpoints need one)."""

    permission_classes = [AllowAny]

    @extend_schema(exclude=True)
    def get(self, request: Request) -> Response:
        from portal import api_urls

        listed = [e for e in endpoints(api_urls.urlpatterns) if e["name"] != "root"]
        return Response({
            "version": "1",
            "authentication": "Authorization: Token <key> (make one on the 'My API tokens' "
                              f"page, {reverse('accounts-tokens')}), or the browser's session",
            "schema": reverse("api-schema") + "?format=json",
            "docs": {"swagger_ui": reverse("api-docs"), "redoc": reverse("api-redoc")},
            "endpoints": [{**e, "url": request.build_absolute_uri(e["path"])}
                          if "{" not in e["path"] else e for e in listed],
        })
