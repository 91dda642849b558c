"""The chargeback API: live usage, the rate card, monthly terms, statements (with finalise,
adjustments and CSV) and reconciliations. Reads follow ``visible_to``; every write needs the
``admin`` action and is audited (the service's audit event, plus the API-write event)."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from apps.accounts.permissions import ADMIN, VIEW
from apps.analysis.chargeback import Policy
from apps.audit import services as audit
from apps.audit.models import AuditEvent
from apps.chargeback import reconciliation, services
from apps.chargeback.api import serializers as s
from apps.chargeback.filters import MONTH_PATTERN, StatementFilterSet, UsageFilterSet
from apps.chargeback.models import BillingPeriod, Rate, Reconciliation, Statement
from apps.clusters.models import Cluster
from apps.core.api.parsers import BoundedJSONParser
from apps.core.api.strict import StrictLimitOffsetPagination, StrictQueryParams
from apps.core.errors import AdapterError, TransientAdapterError
from apps.jobs.models import Job

REFUSED = OpenApiResponse(description="refused: a message says why (e.g. the month is open)")
SLURM_FAILED = OpenApiResponse(description="Slurm failed or refused: its words in 'detail'")
NOT_FOUND = OpenApiResponse(description="no such cluster")


def _valid_filters(filterset_class: Any, request: Request) -> dict[str, Any]:
    """Run a FilterSet's form over the query string; an invalid value is a 400."""
    form = filterset_class(request.query_params, queryset=Job.objects.none()).form
    if not form.is_valid():
        raise ValidationError(form.errors)
    return dict(form.cleaned_data)


class UsageViewSet(viewsets.GenericViewSet):
    """Live usage of a month, priced: your own jobs; a lead's teams too; all for admins."""

    queryset = Job.objects.none()
    serializer_class = s.UsageLineSerializer
    pagination_class = StrictLimitOffsetPagination
    filterset_class = UsageFilterSet
    filter_backends = [StrictQueryParams]
    required_action = VIEW

    @extend_schema(parameters=[
        OpenApiParameter("month", str, pattern=MONTH_PATTERN, description="YYYY-MM"),
        OpenApiParameter("team", str, description="team slug: only that team's lines")])
    def list(self, request: Request) -> Response:
        self.filter_queryset(self.queryset)  # the strict parameter check
        params = _valid_filters(UsageFilterSet, request)
        month: date = params.get("month") or services.current_month()
        lines = services.compute_lines(month, Job.objects.visible_to(request.user))
        rows = [ln for team, team_lines in sorted(lines.items()) for ln in team_lines
                if not params.get("team") or team == params["team"]]
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(self.get_serializer(page, many=True).data)


@extend_schema_view(
    create=extend_schema(responses={201: s.RateSerializer, 409: REFUSED}),
    update=extend_schema(responses={200: s.RateSerializer, 409: REFUSED}),
    partial_update=extend_schema(responses={200: s.RateSerializer, 409: REFUSED}))
class RateViewSet(viewsets.ModelViewSet):
    """The rate card: every signed-in user may read prices; admins change them."""

    queryset = Rate.objects.all()
    serializer_class = s.RateSerializer
    pagination_class = StrictLimitOffsetPagination
    filter_backends = [StrictQueryParams]
    required_action = VIEW
    write_action = ADMIN
    parser_classes = [BoundedJSONParser]
    http_method_names = ["get", "post", "put", "patch", "delete"]

    def perform_create(self, serializer: Any) -> None:
        _audit(self.request, f"rate: {serializer.save()}", change="rate added")

    def perform_update(self, serializer: Any) -> None:
        _audit(self.request, f"rate: {serializer.save()}", change="rate changed")

    def perform_destroy(self, instance: Rate) -> None:
        _audit(self.request, f"rate: {instance}", change="rate deleted")
        instance.delete()


def _audit(request: Request, target: str, **details: Any) -> None:
    audit.record(AuditEvent.Action.CHARGEBACK, request, request.user, target=target[:300],
                 details=details)


class PeriodViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Each month's terms (policy and waste fee); PUT sets them (admins; refused with 409
    once a statement of the month is final)."""

    queryset = BillingPeriod.objects.all()
    serializer_class = s.PeriodSerializer
    pagination_class = StrictLimitOffsetPagination
    filter_backends = [StrictQueryParams]
    required_action = VIEW
    write_action = ADMIN
    lookup_field = "month"
    lookup_value_regex = MONTH_PATTERN.strip("^$")
    parser_classes = [BoundedJSONParser]

    def _month(self) -> date:
        try:
            return services.parse_month(self.kwargs["month"])
        except services.ChargebackError as exc:
            raise ValidationError({"month": [str(exc)]}) from None

    def retrieve(self, request: Request, month: str) -> Response:
        """A month's terms (the defaults when admins set none)."""
        day = self._month()
        period = BillingPeriod.objects.filter(month=day).first() or BillingPeriod(month=day)
        return Response(s.PeriodSerializer(period).data)

    @extend_schema(request=s.TermsSerializer,
                   responses={200: s.PeriodSerializer, 409: REFUSED})
    def update(self, request: Request, month: str) -> Response:
        terms = s.TermsSerializer(data=request.data)
        terms.is_valid(raise_exception=True)
        try:
            period = services.set_terms(self._month(), Policy(terms.validated_data["policy"]),
                                        terms.validated_data["waste_fee"], request.user)
        except services.ChargebackError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(s.PeriodSerializer(period).data)


class StatementViewSet(viewsets.ReadOnlyModelViewSet):
    """Team statements: leads see their teams', admins all (researchers: their own usage
    under ``/chargeback/usage/``)."""

    queryset = Statement.objects.none()
    serializer_class = s.StatementSerializer
    pagination_class = StrictLimitOffsetPagination
    filterset_class = StatementFilterSet
    required_action = VIEW
    write_action: str | None = None  # finalise and adjustments: admins (RolePermission)
    parser_classes = [BoundedJSONParser]

    def get_queryset(self) -> Any:
        qs = Statement.objects.visible_to(self.request.user).select_related("team", "period")
        return qs.prefetch_related("lines") if self.action != "list" else qs

    def get_serializer_class(self) -> Any:
        return s.StatementSerializer if self.action == "list" else s.StatementDetailSerializer

    @extend_schema(request=None, responses={200: s.StatementDetailSerializer, 409: REFUSED})
    @action(detail=True, methods=["post"], filter_backends=[])
    def finalise(self, request: Request, pk: str | None = None) -> Response:
        """Freeze the statement (its month must be over); it can never change again."""
        try:
            statement = services.finalise(self.get_object(), request.user)
        except services.ChargebackError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(s.StatementDetailSerializer(statement).data)

    @extend_schema(request=s.AdjustmentSerializer,
                   responses={201: s.StatementLineSerializer, 409: REFUSED})
    @action(detail=True, methods=["post"], filter_backends=[])
    def adjustments(self, request: Request, pk: str | None = None) -> Response:
        """Add a correction line (draft or final statement)."""
        body = s.AdjustmentSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            line = services.add_adjustment(self.get_object(), request.user,
                                           body.validated_data["amount"],
                                           body.validated_data["description"])
        except services.ChargebackError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(s.StatementLineSerializer(line).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={(200, "text/csv"): OpenApiTypes.STR})
    @action(detail=True, filter_backends=[], pagination_class=None)
    def csv(self, request: Request, pk: str | None = None) -> HttpResponse:
        """The statement as CSV (the same as ``manage.py chargeback --format csv``)."""
        statement = self.get_object()
        return HttpResponse(services.export_csv([statement]),
                            content_type="text/csv; charset=utf-8")


class ReconciliationViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Reconciliations with Slurm's report: admins only; POST runs one now."""

    queryset = Reconciliation.objects.none()
    serializer_class = s.ReconciliationSerializer
    pagination_class = StrictLimitOffsetPagination
    filter_backends = [StrictQueryParams]
    required_action = ADMIN
    parser_classes = [BoundedJSONParser]

    def get_queryset(self) -> Any:
        if not (self.request.user.is_active and self.request.user.is_staff):
            return Reconciliation.objects.none()
        return Reconciliation.objects.select_related("cluster")

    @extend_schema(request=s.ReconcileRequestSerializer,
                   responses={201: s.ReconciliationSerializer, 404: NOT_FOUND, 409: REFUSED,
                              502: SLURM_FAILED, 503: SLURM_FAILED})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = s.ReconcileRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        cluster = Cluster.objects.filter(name=body.validated_data["cluster"]).first()
        if cluster is None:
            raise NotFound("no such cluster")
        try:
            row = reconciliation.reconcile_month(
                cluster, services.parse_month(body.validated_data["month"]))
        except reconciliation.ReconcileError as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        except AdapterError as exc:
            code = 503 if isinstance(exc, TransientAdapterError) else 502
            return Response({"detail": str(exc)}, status=code)
        return Response(s.ReconciliationSerializer(row).data, status=status.HTTP_201_CREATED)
