"""Admins edit SLOs and the ending classification here (each save is in the admin log);
scorecards, snapshots and alerts are written by the evaluation only and read-only here."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from apps.slo.models import Alert, EndingRule, Objective, Scorecard, Snapshot


@admin.register(Objective)
class ObjectiveAdmin(admin.ModelAdmin):
    list_display = ["name", "sli", "target", "wait_minutes", "window", "scope", "team",
                    "cluster", "partition", "enabled", "notify", "order"]
    list_filter = ["sli", "window", "scope", "enabled"]
    list_editable = ["target", "enabled", "notify", "order"]


@admin.register(EndingRule)
class EndingRuleAdmin(admin.ModelAdmin):
    list_display = ["order", "key", "label", "cause", "states", "started", "hardware_fault",
                    "reason_pattern", "enabled"]
    list_display_links = ["key"]
    list_editable = ["order", "cause", "enabled"]
    list_filter = ["cause", "enabled"]


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Scorecard)
class ScorecardAdmin(_ReadOnly):
    list_display = ["objective", "subject", "status", "sli", "budget_remaining",
                    "evaluated_at"]
    list_filter = ["objective", "status"]


@admin.register(Snapshot)
class SnapshotAdmin(_ReadOnly):
    list_display = ["objective", "subject", "month", "status", "sli", "budget_remaining",
                    "final"]
    list_filter = ["objective", "final"]


@admin.register(Alert)
class AlertAdmin(_ReadOnly):
    list_display = ["objective", "subject", "kind", "opened_at", "resolved_at", "sent_at",
                    "channels", "error"]
    list_filter = ["kind", "objective"]
