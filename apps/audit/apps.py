"""Audit: an append-only record of sign-ins, sign-outs, failures, lockouts, API writes and
admin edits, readable by platform admins only."""

from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "apps.audit"
    label = "audit"

    def ready(self) -> None:
        from apps.audit import signals  # connects the auth and admin receivers

        signals.audit_bulk_admin_actions()
