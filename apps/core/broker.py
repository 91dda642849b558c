"""Publishing Celery tasks where a broker outage must not become an error page.

A web request that asks a worker for something (a job page wanting fresh metrics) calls
``publish_on_commit`` instead of ``task.delay_on_commit``: when Redis is down the publish
fails with kombu's ``OperationalError`` (or a bare ``OSError`` from the socket) after
Celery's short publish retries, and the caller gets a callback to undo its claim and a
log line, never an exception. Under the embedded default (eager Celery) there is no broker:
the task runs in-process and its own errors propagate as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from django.db import transaction
from kombu.exceptions import OperationalError as KombuOperationalError

logger = logging.getLogger(__name__)

# What a publish raises when the broker cannot be reached (kombu wraps redis-py's
# connection errors in its OperationalError; a socket error can surface as OSError).
BROKER_ERRORS: tuple[type[BaseException], ...] = (KombuOperationalError, OSError)


def publish(task: Any, *args: Any, on_failure: Callable[[BaseException], object] | None = None,
            **options: Any) -> bool:
    """Send ``task(*args)`` now; False, a warning and ``on_failure(exc)`` if the broker is down.

    ``options`` go to ``apply_async`` (``countdown``, ``queue``...).
    """
    try:
        task.apply_async(args, **options)
    except BROKER_ERRORS as exc:
        if task.app.conf.task_always_eager:
            raise  # no broker: this is the task's own error, not an outage
        logger.warning("broker unavailable: %s(%s) not queued: %s: %s", task.name,
                       ", ".join(map(repr, args)), type(exc).__name__, exc)
        if on_failure is not None:
            on_failure(exc)
        return False
    return True


def publish_on_commit(task: Any, *args: Any,
                      on_failure: Callable[[BaseException], object] | None = None,
                      **options: Any) -> None:
    """``publish`` once the current transaction commits (at once in autocommit).

    Like ``delay_on_commit``, a rolled-back transaction sends nothing.
    """
    transaction.on_commit(partial(publish, task, *args, on_failure=on_failure, **options))
