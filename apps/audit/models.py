"""The audit log: one row per security-relevant event."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    def visible_to(self, user: object) -> AuditEventQuerySet:
        """Who signed in from where is sensitive: platform admins only."""
        if getattr(user, "is_active", False) and getattr(user, "is_staff", False):
            return self.all()
        return self.none()


class AuditEvent(models.Model):
    """One security-relevant event: who, what, from where, with what outcome.

    Rows are written by ``apps.audit.services.record`` only and never edited. ``username``
    keeps the name even when the user is deleted, or was never a user (a failed sign-in
    with an unknown name). Secrets (passwords, tokens, request bodies) are never stored.
    """

    class Action(models.TextChoices):
        LOGIN = "login", "Signed in"
        LOGOUT = "logout", "Signed out"
        LOGIN_FAILED = "login_failed", "Sign-in failed"
        LOCKOUT = "lockout", "Locked out"
        API_WRITE = "api_write", "API write"
        ADMIN = "admin", "Admin edit"
        CHARGEBACK = "chargeback", "Chargeback change"
        QUOTA = "quota", "Quota change"
        GUARDRAIL = "guardrail", "Idle-job policy"
        TOKEN = "api_token", "API token"
        WEBHOOK = "webhook", "Webhook to an allow-listed internal address"
        FINDING = "finding", "Security finding"
        UNLOCK = "unlock", "Sign-in lock lifted"

    at = models.DateTimeField(default=timezone.now, db_index=True)
    action = models.CharField(max_length=16, choices=Action.choices, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                              on_delete=models.SET_NULL, related_name="audit_events")
    username = models.CharField(max_length=150, blank=True, db_index=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    method = models.CharField(max_length=10, blank=True)
    path = models.CharField(max_length=500, blank=True)
    status = models.PositiveSmallIntegerField(null=True, blank=True)
    target = models.CharField(max_length=300, blank=True, help_text="What was acted on")
    details = models.JSONField(default=dict, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["action", "-at"], name="audit_action_at")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.action} {self.username}"
