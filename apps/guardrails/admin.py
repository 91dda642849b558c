from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from apps.accounts.permissions import signed_in
from apps.guardrails.models import (
    Alert,
    AlertPreference,
    Digest,
    Exemption,
    Message,
    PolicyAction,
    TeamAlertSetting,
)


@admin.register(Exemption)
class ExemptionAdmin(admin.ModelAdmin):
    list_display = ("kind", "value", "cluster", "reason", "granted_by", "created_at")
    list_filter = ("kind", "cluster")

    def save_model(self, request: HttpRequest, obj: Exemption, form: Any, change: bool) -> None:
        if obj.granted_by_id is None:
            obj.granted_by = signed_in(request)
        super().save_model(request, obj, form, change)


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ("job", "kind", "status", "since", "raised_at", "hardware")
    list_filter = ("kind", "status")
    raw_id_fields = ("job", "message")


@admin.register(PolicyAction)
class PolicyActionAdmin(admin.ModelAdmin):
    list_display = ("job", "action", "dry_run", "at", "reason")
    list_filter = ("action", "dry_run")
    raw_id_fields = ("job",)


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ("kind", "user", "subject", "created_at", "sent_at")
    list_filter = ("kind",)


admin.site.register(AlertPreference)
admin.site.register(TeamAlertSetting)
admin.site.register(Digest)
