"""The quotas API: accounts with their quota and usage (team members and admins), preview and
apply (admins; audited), and the change history (admins)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from apps.accounts.permissions import ADMIN, VIEW
from apps.chargeback.services import parse_month
from apps.clusters.models import SlurmAccount
from apps.core.api.parsers import BoundedJSONParser
from apps.core.api.strict import StrictLimitOffsetPagination, StrictQueryParams
from apps.core.errors import AdapterError, TransientAdapterError
from apps.quotas import services
from apps.quotas.api import serializers as s
from apps.quotas.models import QuotaChange
from apps.quotas.views import visible_accounts

CONFLICT = OpenApiResponse(description="refused, nothing written: the quota or Slurm's value "
                                       "changed since the preview (look again), a past month, "
                                       "an absurd value, or an unknown Slurm account")
SLURM = OpenApiResponse(description="Slurm refused the change (502) or could not be reached "
                                    "(503): nothing applied")


def _slurm_error(exc: AdapterError) -> Response:
    code = 503 if isinstance(exc, TransientAdapterError) else 502
    return Response({"detail": str(exc)}, status=code)


class QuotaAccountViewSet(viewsets.ReadOnlyModelViewSet):
    """Slurm accounts of the caller's teams (all for admins) with quota and usage."""

    queryset = SlurmAccount.objects.none()
    serializer_class = s.AccountUsageSerializer
    pagination_class = StrictLimitOffsetPagination
    filter_backends = [StrictQueryParams]
    required_action = VIEW
    write_action: str | None = None  # preview and apply: admins (RolePermission)
    parser_classes = [BoundedJSONParser]

    def get_queryset(self) -> Any:
        return visible_accounts(self.request.user)

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        assert page is not None  # pagination_class is set
        return self.get_paginated_response(
            self.get_serializer(services.usage_for(page), many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.get_serializer(services.usage_for([self.get_object()])[0]).data)

    @extend_schema(request=s.PreviewRequestSerializer,
                   responses={200: s.PreviewSerializer, 409: CONFLICT, 502: SLURM, 503: SLURM})
    @action(detail=True, methods=["post"], filter_backends=[])
    def preview(self, request: Request, pk: str | None = None) -> Response:
        """The exact sacctmgr command and Slurm's dry run of it; nothing is written."""
        body = s.PreviewRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            shown = services.preview(self.get_object(), parse_month(body.validated_data["month"]),
                                     body.validated_data["gpu_minutes"])
        except services.QuotaError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        except AdapterError as exc:
            return _slurm_error(exc)
        return Response(s.PreviewSerializer(shown).data)

    @extend_schema(request=s.ApplyRequestSerializer,
                   responses={200: s.QuotaSerializer, 409: CONFLICT, 502: SLURM, 503: SLURM})
    @action(detail=True, methods=["post"], filter_backends=[])
    def apply(self, request: Request, pk: str | None = None) -> Response:
        """Write the previewed quota (or schedule it for a later month)."""
        body = s.ApplyRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        v = body.validated_data
        try:
            quota = services.apply(self.get_object(), parse_month(v["month"]), v["gpu_minutes"],
                                   v["seen_minutes"], v["seen_version"], v["reason"],
                                   request.user)
        except services.QuotaError as exc:  # a conflict, a past month, an absurd value
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        except AdapterError as exc:
            return _slurm_error(exc)
        return Response(s.QuotaSerializer(quota).data)


class QuotaChangeViewSet(viewsets.ReadOnlyModelViewSet):
    """Every quota change, failure, conflict and drift: admins only."""

    queryset = QuotaChange.objects.none()
    serializer_class = s.QuotaChangeSerializer
    pagination_class = StrictLimitOffsetPagination
    filter_backends = [StrictQueryParams]
    required_action = ADMIN

    def get_queryset(self) -> Any:
        return QuotaChange.objects.visible_to(self.request.user).select_related(
            "account__cluster", "actor")
