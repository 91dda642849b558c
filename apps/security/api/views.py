"""The security API: findings through ``visible_to`` (an invisible one is a 404), their
lifecycle, and the ingest endpoints collectors post to (platform admins' tokens)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.exceptions import PermissionDenied as ApiPermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from apps.accounts.permissions import ADMIN, VIEW
from apps.clusters.models import Cluster
from apps.core.api.parsers import BoundedJSONParser
from apps.core.api.strict import StrictCursorPagination
from apps.security import findings, ingest
from apps.security.api.serializers import (
    FindingDetailSerializer,
    FindingSerializer,
    IngestResultSerializer,
    InventoryIngestSerializer,
    ProbesIngestSerializer,
    SshdIngestSerializer,
    TransitionSerializer,
)
from apps.security.filters import FindingFilterSet
from apps.security.models import Finding


class FindingCursor(StrictCursorPagination):
    ordering = ("-last_seen", "-id")


class FindingViewSet(viewsets.ReadOnlyModelViewSet):
    """Findings the caller may see: all (admins), their teams' (leads), their jobs'."""

    queryset = Finding.objects.none()
    serializer_class = FindingSerializer
    filterset_class = FindingFilterSet
    pagination_class = FindingCursor
    required_action = VIEW
    write_action: str | None = None

    def get_queryset(self) -> Any:
        qs = Finding.objects.visible_to(self.request.user) \
            .select_related("cluster", "team", "assignee")
        if self.action in ("retrieve", "transition"):
            qs = qs.prefetch_related("events__actor", "events__assignee")
        return qs

    def get_serializer_class(self) -> Any:
        return FindingDetailSerializer if self.action in ("retrieve", "transition") \
            else FindingSerializer

    @extend_schema(request=TransitionSerializer,
                   responses={200: FindingDetailSerializer,
                              400: OpenApiResponse(description="not allowed from this status, "
                                                               "or a reason or expiry missing")})
    @action(detail=True, methods=["post"], filter_backends=[], pagination_class=None,
            write_action=VIEW)
    def transition(self, request: Request, pk: str | None = None) -> Response:
        """Comment or acknowledge (whoever sees it); resolve (a high or critical finding:
        admins or the site's close role, never its subject); suppress (the same);
        reopen or assign (admins). Every action is in the audit log."""
        finding = self.get_object()
        body = TransitionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        assignee = None
        if data.get("assignee"):
            assignee = get_user_model().objects.filter(username=data["assignee"]).first()
        try:
            findings.transition(finding, request.user, data["action"],
                                reason=data.get("reason", ""), until=data.get("until"),
                                assignee=assignee)
        except findings.LifecycleError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
        except PermissionDenied as exc:
            raise ApiPermissionDenied(str(exc)) from exc
        finding = self.get_queryset().get(pk=finding.pk)
        return Response(FindingDetailSerializer(finding, context={"request": request}).data)


def _cluster(name: str) -> Cluster:
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise NotFound(f"no cluster named {name!r}")
    return cluster


class SecurityIngestViewSet(viewsets.GenericViewSet):
    """What node-side collectors post: sshd lines, inventories, probe results. Platform
    admins only (give the collector a service account's token). Re-posting is harmless."""

    queryset = Finding.objects.none()
    required_action = ADMIN
    write_action = ADMIN
    filter_backends: list[Any] = []
    pagination_class = None
    parser_classes = [BoundedJSONParser]  # JSON documents only (the schema says so too)
    throttle_scope = "ingest"  # INGEST_RATE_*: a whole cluster's collectors share one token

    @extend_schema(request=SshdIngestSerializer, responses={201: IngestResultSerializer})
    @action(detail=False, methods=["post"], serializer_class=SshdIngestSerializer)
    def sshd(self, request: Request) -> Response:
        """sshd syslog lines; lines too long or malformed are counted and skipped."""
        body = SshdIngestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        result = ingest.ingest_sshd(_cluster(data["cluster"]), data["lines"],
                                    data.get("reference"))
        return Response(IngestResultSerializer(result.as_dict()).data, status=201)

    @extend_schema(request=InventoryIngestSerializer, responses={201: IngestResultSerializer})
    @action(detail=False, methods=["post"], serializer_class=InventoryIngestSerializer)
    def inventory(self, request: Request) -> Response:
        """Node software inventories; a newer one replaces an older one."""
        body = InventoryIngestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        result = ingest.ingest_inventory(_cluster(data["cluster"]), data["inventories"])
        return Response(IngestResultSerializer(result.as_dict()).data, status=201)

    @extend_schema(request=ProbesIngestSerializer, responses={201: IngestResultSerializer})
    @action(detail=False, methods=["post"], serializer_class=ProbesIngestSerializer)
    def probes(self, request: Request) -> Response:
        """Probe results of allow-listed service ports on allocated nodes."""
        body = ProbesIngestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        result = ingest.ingest_probes(_cluster(data["cluster"]),
                                      {"collected_at": data.get("collected_at"),
                                       "probes": data["probes"]})
        return Response(IngestResultSerializer(result.as_dict()).data, status=201)
