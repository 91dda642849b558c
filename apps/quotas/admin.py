"""Quotas are set through their pages (preview, confirmation, Slurm write): the admin only
shows them and their history."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from apps.quotas.models import Quota, QuotaAlert, QuotaChange


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Quota)
class QuotaAdmin(_ReadOnly):
    list_display = ["account", "month", "gpu_minutes", "state", "drift", "version"]
    list_filter = ["state", "drift"]


@admin.register(QuotaChange)
class QuotaChangeAdmin(_ReadOnly):
    list_display = ["at", "account", "month", "kind", "actor", "old_minutes", "new_minutes"]
    list_filter = ["kind"]

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(QuotaAlert)
class QuotaAlertAdmin(_ReadOnly):
    list_display = ["account", "month", "level", "limit_minutes", "sent_at", "error"]
