"""Writing audit events: one row in the database and one JSON line in the log.

The JSON line goes to the ``beacon.audit`` logger so a site can ship it to syslog or Loki,
out of reach of anyone who can write to Beacon's database.
"""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar
from typing import Any

from django.http import HttpRequest

from apps.audit.models import AuditEvent
from apps.core.net import client_ip

log = logging.getLogger("beacon.audit")
# The request being served, for receivers Django gives none (set by AuditMiddleware).
CURRENT_REQUEST: ContextVar[HttpRequest | None] = ContextVar("audit_request", default=None)


def record(action: str, request: HttpRequest | None = None, user: Any = None,
           username: str = "", **fields: Any) -> AuditEvent:
    """Store one event. ``request`` supplies the address, method and path when given."""
    if user is not None and not getattr(user, "is_authenticated", False):
        user = None
    values: dict[str, Any] = {"action": action, "actor": user,
                              "username": (username or getattr(user, "username", ""))[:150]}
    if request is not None:
        values.update(ip=client_ip(request) or None, method=request.method or "",
                      path=request.path[:500])
    values.update(fields)
    event = AuditEvent.objects.create(**values)
    log.info(json.dumps(_as_json(event), sort_keys=True, default=str))
    return event


def _as_json(event: AuditEvent) -> dict[str, Any]:
    # json.dumps escapes newlines and quotes, so a hostile user name cannot forge a line.
    return {"at": event.at.isoformat(), "action": event.action, "user": event.username,
            "ip": event.ip, "method": event.method, "path": event.path,
            "status": event.status, "target": event.target, "details": event.details}
