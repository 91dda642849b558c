"""Retry policies of Beacon's Celery tasks, in one place.

Every task is idempotent (STYLE.md §2.7), so a run that failed because something outside
Beacon was briefly away is simply run again, later and later (exponential backoff with
jitter, capped at ten minutes):

- ``TransientAdapterError``: Slurm or Prometheus timed out, refused, answered 503;
- ``django.db.OperationalError`` / ``InterfaceError``: PostgreSQL restarting, failing over
  or refusing connections (the connection is re-opened on the next attempt:
  ``CONN_HEALTH_CHECKS`` drops a dead persistent connection).

A run killed with its database leaves its TaskRun "running"; ``sweep_stale_runs``
(apps/core/services.py) closes it later.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import InterfaceError, OperationalError

from apps.core.errors import TransientAdapterError

DATABASE_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)

# Eight tries over about 4 minutes: longer than a PostgreSQL restart or failover.
_POLICY: dict[str, Any] = {"retry_backoff": True, "retry_backoff_max": 600,
                           "retry_jitter": True, "max_retries": 8}

# Tasks that call Slurm or Prometheus, and use the database.
RETRY: dict[str, Any] = {"autoretry_for": (TransientAdapterError, *DATABASE_ERRORS), **_POLICY}
# Per-cluster Slurm tasks: backoff without jitter (1, 2, 4, 8 ... s). There is one task per
# cluster, so there is no herd to spread, and full jitter could retry at once.
RETRY_STEADY: dict[str, Any] = {**RETRY, "retry_jitter": False}
# Tasks that use only the database (fan-outs, housekeeping, statements).
RETRY_DB: dict[str, Any] = {"autoretry_for": DATABASE_ERRORS, **_POLICY}


@contextmanager
def as_asked(task: Any) -> Iterator[None]:
    """Inside a bound task: a ``TransientAdapterError`` that carries the other side's
    Retry-After (a webhook's 429 or 503, capped by WEBHOOK_RETRY_AFTER_MAX) is retried no
    sooner than asked; one without it falls to the task's usual backoff."""
    try:
        yield
    except TransientAdapterError as exc:
        if exc.retry_after is None:
            raise
        raise task.retry(exc=exc, countdown=exc.retry_after) from exc
