"""Receivers that turn Django, django-axes and admin events into audit rows."""

from __future__ import annotations

import functools
from typing import Any

from axes.signals import user_locked_out
from django.contrib.admin.models import LogEntry, LogEntryManager
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db.models.signals import post_save
from django.dispatch import receiver

from apps.audit import services
from apps.audit.models import AuditEvent

_ADMIN_FLAGS = {1: "added", 2: "changed", 3: "deleted"}


@receiver(user_logged_in)
def _logged_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    backend = getattr(user, "backend", "") or ""
    services.record(AuditEvent.Action.LOGIN, request, user,
                    details={"backend": backend.rsplit(".", 1)[-1]})


@receiver(user_logged_out)
def _logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is None:
        return  # signing out while signed out: nothing happened
    reason = getattr(request, "session_end_reason", "") if request is not None else ""
    services.record(AuditEvent.Action.LOGOUT, request, user,
                    details={"reason": reason} if reason else {})


@receiver(user_login_failed)
def _login_failed(sender: Any, credentials: dict[str, Any], request: Any = None,
                  **kwargs: Any) -> None:
    # Django has already masked the password in ``credentials``; keep only the name.
    services.record(AuditEvent.Action.LOGIN_FAILED, request,
                    username=str(credentials.get("username", "")))


@receiver(user_locked_out)
def _locked_out(sender: Any, request: Any, username: str, ip_address: str,
                **kwargs: Any) -> None:
    services.record(AuditEvent.Action.LOCKOUT, request, username=username or "")


@receiver(post_save, sender=LogEntry)
def _admin_edit(sender: Any, instance: LogEntry, created: bool, **kwargs: Any) -> None:
    if created:
        _record_admin_entry(instance)


def _record_admin_entry(entry: LogEntry) -> None:
    kind = entry.content_type.model if entry.content_type else "object"
    services.record(AuditEvent.Action.ADMIN, services.CURRENT_REQUEST.get(), user=entry.user,
                    target=f"{kind}: {entry.object_repr}"[:300],
                    details={"change": _ADMIN_FLAGS.get(entry.action_flag, "?"),
                             "object_id": str(entry.object_id),
                             "message": entry.get_change_message()})


def audit_bulk_admin_actions() -> None:
    """Give every object of a bulk admin action its audit row.

    Django 5.1+ writes the log entries of an action over two or more objects (``delete
    selected``) with ``bulk_create``, which sends no ``post_save``: without this the audit
    log would miss exactly the largest admin changes. One entry still goes through
    ``save()`` and the receiver above, so nothing is recorded twice.
    """
    original = LogEntryManager.log_actions
    if getattr(original, "beacon_audited", False):
        return

    @functools.wraps(original)
    def log_actions(self: LogEntryManager, *args: Any, **kwargs: Any) -> Any:
        entries = original(self, *args, **kwargs)
        if isinstance(entries, list) and len(entries) > 1:
            for entry in entries:
                _record_admin_entry(entry)
        return entries

    log_actions.beacon_audited = True  # type: ignore[attr-defined]
    LogEntryManager.log_actions = log_actions  # type: ignore[method-assign]
