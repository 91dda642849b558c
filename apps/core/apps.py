"""Core, the floor every app stands on: run records, retries, errors, checks, paging, metrics."""

import logging

from django.apps import AppConfig

log = logging.getLogger("beacon")


class CoreConfig(AppConfig):
    name = "apps.core"
    label = "core"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in
        from django.db.backends.signals import connection_created

        from apps.core import checks, logs, metrics  # noqa: F401  system checks; Celery signal receivers
        from apps.core.sessions import stamp_login
        from apps.core.sqlite import restrict_sqlite_files

        user_logged_in.connect(stamp_login, dispatch_uid="beacon-session-clocks")
        connection_created.connect(restrict_sqlite_files, dispatch_uid="beacon-sqlite-0600")

        from django.conf import settings

        from apps.core import observability

        observability.start(settings)  # Sentry, OpenTelemetry: only when their variable is set

        _log_modes()


def _log_modes() -> None:
    """Say once, at start-up, which parts run embedded and which talk to real services."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    database = "postgresql" if "postgresql" in str(db["ENGINE"]) else f"sqlite ({db['NAME']})"
    if settings.CELERY_TASK_ALWAYS_EAGER:
        celery = "eager: tasks run in-process (REDIS_URL unset)"
    else:
        celery = "broker " + _redact(settings.CELERY_BROKER_URL)
    log.info("database=%s; celery=%s", database, celery)


def _redact(url: str) -> str:
    """Drop a password from a URL before logging it."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
    return url
