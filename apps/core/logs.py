"""Log lines that say which request or task they belong to, readable or as JSON.

A request id comes with each web request (``RequestIdMiddleware``: the proxy's or client's
``X-Request-ID`` when it is sane, else a new one) and is echoed in the response. Tasks
published while handling that request carry it in a message header, so the worker's lines
for those tasks name the same id, beside the task's own name and id. ``BEACON_LOG_FORMAT``
chooses the format: ``plain`` (the default, for people) or ``json`` (one object per line, for
a log pipeline). Both read the context through ``ContextFilter``, installed on the handler.

Imported by ``settings.LOGGING`` before the apps load: no models here.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from celery import signals as celery_signals
from django.http import HttpRequest, HttpResponse

HEADER = "X-Request-ID"
TASK_HEADER = "beacon_request_id"  # the Celery message header that carries it
# What a request id from outside may look like: a UUID, nginx's $request_id, a trace id.
# Anything else (too long, spaces, control characters, quotes) is replaced, never logged.
_SANE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+=/-]{0,127}$")

request_id: ContextVar[str | None] = ContextVar("beacon_request_id", default=None)
current_task: ContextVar[tuple[str, str] | None] = ContextVar("beacon_task", default=None)


def sane_request_id(value: str | None) -> str:
    """``value`` when it is a sane id, else a new random one."""
    if value and _SANE.match(value):
        return value
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Give each request an id, log under it, and send it back as ``X-Request-ID``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        rid = sane_request_id(request.headers.get(HEADER))
        request.request_id = rid  # type: ignore[attr-defined]  # for views that show it
        token = request_id.set(rid)
        try:
            response = self.get_response(request)
        finally:
            request_id.reset(token)
        response[HEADER] = rid
        return response


# --- Into Celery tasks -----------------------------------------------------------------


@celery_signals.before_task_publish.connect(dispatch_uid="beacon-request-id-publish")
def _stamp_message(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """A task published under a request carries the request's id in its headers."""
    rid = request_id.get()
    if rid and headers is not None:
        headers.setdefault(TASK_HEADER, rid)


_tokens: dict[str, tuple[Any, Any]] = {}  # task id -> the context tokens to reset


@celery_signals.task_prerun.connect(dispatch_uid="beacon-request-id-prerun")
def _enter_task(task_id: str = "", task: Any = None, **_: Any) -> None:
    """The worker's lines for this task name it and the request that queued it. An eager
    task runs inside its request and keeps that id."""
    rid = getattr(getattr(task, "request", None), TASK_HEADER, None) or request_id.get()
    name = str(getattr(task, "name", "") or "")
    _tokens[task_id] = (request_id.set(rid), current_task.set((name, task_id)))


@celery_signals.task_postrun.connect(dispatch_uid="beacon-request-id-postrun")
def _leave_task(task_id: str = "", **_: Any) -> None:
    tokens = _tokens.pop(task_id, None)
    if tokens:
        request_id.reset(tokens[0])
        current_task.reset(tokens[1])


# --- Formatting ------------------------------------------------------------------------


class ContextFilter(logging.Filter):
    """Puts ``request_id``, ``task_name``, ``task_id`` and a readable ``context`` on every
    record (empty strings outside a request or task), for either formatter."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid, current = request_id.get(), current_task.get()
        record.request_id = rid or ""
        record.task_name, record.task_id = current or ("", "")
        parts = ([f"task {current[0]} {current[1]}"] if current else []) + (
            [f"req {rid}"] if rid else [])
        record.context = f" [{', '.join(parts)}]" if parts else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the request
    and task it belongs to, and the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("request_id", "task_name", "task_id"):
            if getattr(record, key, ""):
                entry[key] = getattr(record, key)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)
