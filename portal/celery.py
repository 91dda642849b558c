"""The Celery application.

Configuration comes from ``portal/settings.py`` (the ``CELERY_`` names). Without
``REDIS_URL`` the tasks run in-process (eager), which the core app logs at start-up.
"""

import os

from celery import Celery
from celery.signals import setup_logging

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def _use_django_logging(**kwargs: object) -> None:
    """Let workers log exactly as the web process does (settings.LOGGING)."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)
