from __future__ import annotations

from typing import Any

from rest_framework import viewsets

from apps.accounts.permissions import ADMIN
from apps.core.api.strict import StrictLimitOffsetPagination
from apps.core.models import TaskRun
from apps.shell.api.serializers import TaskRunSerializer


class TaskRunViewSet(viewsets.ReadOnlyModelViewSet):
    """Background runs (syncs, archives, detections): platform admins only."""

    queryset = TaskRun.objects.none()
    serializer_class = TaskRunSerializer
    pagination_class = StrictLimitOffsetPagination
    required_action = ADMIN

    def get_queryset(self) -> Any:
        return TaskRun.objects.visible_to(self.request.user).select_related("cluster")
