from __future__ import annotations

from typing import Any

from rest_framework import viewsets

from apps.accounts.api.serializers import TeamSerializer
from apps.accounts.models import Team
from apps.accounts.permissions import VIEW
from apps.core.api.strict import StrictLimitOffsetPagination


class TeamViewSet(viewsets.ReadOnlyModelViewSet):
    """Teams the caller belongs to (all teams for admins)."""

    queryset = Team.objects.none()
    serializer_class = TeamSerializer
    pagination_class = StrictLimitOffsetPagination
    required_action = VIEW
    lookup_field = "slug"

    def get_queryset(self) -> Any:
        return (Team.objects.visible_to(self.request.user).order_by("slug")
                .prefetch_related("memberships__user", "slurm_accounts__cluster"))
