"""The rate card and billing periods are edited here (each save is audited through the admin
log); statements are read-only: they change through their pages and services only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from apps.chargeback.models import BillingPeriod, Rate, Reconciliation, Statement


@admin.register(Rate)
class RateAdmin(admin.ModelAdmin):
    list_display = ["__str__", "partition", "gpu_model", "price", "valid_from", "valid_until"]
    list_filter = ["gpu_model", "partition"]


@admin.register(BillingPeriod)
class BillingPeriodAdmin(admin.ModelAdmin):
    """Terms are changed through ``services.set_terms`` (refused once a statement is final)."""

    list_display = ["month", "policy", "waste_fee"]

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Statement)
class StatementAdmin(admin.ModelAdmin):
    list_display = ["team", "period", "status", "allocated_hours", "amount"]
    list_filter = ["status", "period"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Reconciliation)
class ReconciliationAdmin(admin.ModelAdmin):
    list_display = ["cluster", "month", "ok", "created_at"]

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False
