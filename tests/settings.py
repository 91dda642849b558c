"""Test settings: the real settings, made fast (MD5 hashing, eager Celery, locmem cache)."""

from portal.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
LOGGING["loggers"]["beacon"]["level"] = "WARNING"  # noqa: F405
STATIC_ROOT = None  # pages use finders in tests; no collectstatic folder needed
WHITENOISE_USE_FINDERS = True
if "sqlite3" in DATABASES["default"]["ENGINE"]:  # noqa: F405
    # A file, not the in-memory default: the real-worker tests write from another thread,
    # and SQLite's shared in-memory cache locks whole tables across threads.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}  # noqa: F405
# Throttle counts live in the cache, which outlives a test: off here, on in
# tests/api/test_throttles.py, which sets its own rates.
API_THROTTLE_RATES = dict.fromkeys(API_THROTTLE_RATES)  # noqa: F405
