"""The SLO API: objectives (read by every signed-in user, written by admins), scorecards
and monthly snapshots through ``visible_to`` (team members see their teams'; admins all),
and the ending classification. Worst jobs are only those the caller may see."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import viewsets

from apps.accounts.permissions import ADMIN, VIEW
from apps.core.api.fields import Conflict
from apps.core.api.parsers import BoundedJSONParser
from apps.core.api.strict import StrictLimitOffsetPagination
from apps.jobs.models import Job
from apps.slo.api import serializers as s
from apps.slo.filters import ObjectiveFilterSet, ScorecardFilterSet, SnapshotFilterSet
from apps.slo.models import EndingRule, Objective, Scorecard, Snapshot

REFUSED = OpenApiResponse(description="refused: the field named says why (an unknown team "
                                      "or cluster, a taken name, a rule across fields)")


@extend_schema_view(
    create=extend_schema(responses={201: s.ObjectiveSerializer, 409: REFUSED}),
    update=extend_schema(responses={200: s.ObjectiveSerializer, 409: REFUSED}),
    partial_update=extend_schema(responses={200: s.ObjectiveSerializer, 409: REFUSED}))
class ObjectiveViewSet(viewsets.ModelViewSet):
    """SLOs: target, window and scope. Everyone reads them; admins change them."""

    queryset = Objective.objects.none()
    serializer_class = s.ObjectiveSerializer
    pagination_class = StrictLimitOffsetPagination
    filterset_class = ObjectiveFilterSet
    required_action = VIEW
    write_action = ADMIN
    parser_classes = [BoundedJSONParser]
    http_method_names = ["get", "post", "put", "patch", "delete"]

    def get_queryset(self) -> Any:
        return Objective.objects.visible_to(self.request.user).select_related("team", "cluster")

    def perform_create(self, serializer: Any) -> None:
        self._save(serializer)

    def perform_update(self, serializer: Any) -> None:
        self._save(serializer)

    @staticmethod
    def _save(serializer: Any) -> None:
        try:
            with transaction.atomic():
                serializer.save()
        except IntegrityError:  # a concurrent request took the name first
            raise Conflict({"name": "another SLO has this name"}) from None


class _VisibleJobsMixin:
    """Serializer context: the ids of the worst jobs the caller may see."""

    request: Any

    def visible_jobs(self, cards: Any) -> set[int]:
        pks = {w["job"] for card in cards for w in getattr(card, "worst_jobs", None) or []}
        return set(Job.objects.visible_to(self.request.user).filter(pk__in=pks)
                   .values_list("pk", flat=True))


class ScorecardViewSet(_VisibleJobsMixin, viewsets.ReadOnlyModelViewSet):
    """The latest scorecards: SLI, budget left, burn rates, alerts, trend, worst jobs.
    Least budget first."""

    queryset = Scorecard.objects.none()
    serializer_class = s.ScorecardSerializer
    pagination_class = StrictLimitOffsetPagination
    filterset_class = ScorecardFilterSet
    required_action = VIEW

    def get_queryset(self) -> Any:
        return (Scorecard.objects.visible_to(self.request.user)
                .select_related("objective", "team")
                .order_by("budget_remaining", "objective__order", "subject", "pk"))

    def get_serializer(self, *args: Any, **kwargs: Any) -> Any:
        if args:  # a page of scorecards (many=True) or one
            cards = list(args[0]) if kwargs.get("many") else [args[0]]
            kwargs["context"] = {**self.get_serializer_context(),
                                 "visible_jobs": self.visible_jobs(cards)}
        return super().get_serializer(*args, **kwargs)


class SnapshotViewSet(viewsets.ReadOnlyModelViewSet):
    """History: one snapshot per SLO, subject and calendar month, newest first."""

    queryset = Snapshot.objects.none()
    serializer_class = s.SnapshotSerializer
    pagination_class = StrictLimitOffsetPagination
    filterset_class = SnapshotFilterSet
    required_action = VIEW

    def get_queryset(self) -> Any:
        return (Snapshot.objects.visible_to(self.request.user)
                .select_related("objective", "team")
                .order_by("-month", "objective__order", "subject", "pk"))


class EndingRuleViewSet(viewsets.ReadOnlyModelViewSet):
    """How job endings are classified (first matching rule wins); admins edit the rules."""

    queryset = EndingRule.objects.none()
    serializer_class = s.EndingRuleSerializer
    pagination_class = StrictLimitOffsetPagination
    required_action = VIEW
    lookup_field = "key"

    def get_queryset(self) -> Any:
        return EndingRule.objects.visible_to(self.request.user).order_by("order", "key")
