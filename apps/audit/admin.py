from typing import Any

from django.contrib import admin

from apps.audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    """Read-only: the audit log is append-only, even for superusers."""

    list_display = ["at", "action", "username", "ip", "method", "path", "status", "target"]
    list_filter = ["action"]
    search_fields = ["username", "path", "target", "ip"]
    date_hierarchy = "at"

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
