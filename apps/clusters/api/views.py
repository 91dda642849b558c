from __future__ import annotations

from typing import Any

from rest_framework import viewsets

from apps.accounts.permissions import VIEW
from apps.clusters.api.serializers import ClusterSerializer
from apps.clusters.models import Cluster
from apps.core.api.strict import StrictLimitOffsetPagination


class ClusterViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Cluster.objects.none()
    serializer_class = ClusterSerializer
    pagination_class = StrictLimitOffsetPagination
    required_action = VIEW
    lookup_field = "name"

    def get_queryset(self) -> Any:
        return Cluster.objects.visible_to(self.request.user).order_by("name")
