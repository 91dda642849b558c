"""Beacon's one settings file, read from the environment.

With nothing set, Beacon runs the *embedded default*: SQLite in ``data/`` and Celery
tasks executed in-process (eager). Each variable below switches one part to a real
service. Bad values fail at start-up with an error that names the variable; problems
that are not fatal surface as system checks (``apps/core/checks.py``).

The readers are in ``portal/env.py``, the single sign-on settings in ``portal/sso.py``.
``python -m portal.reference`` writes docs/CONFIGURATION.md (every variable, its default and
its effect, from this file's comments): run it after adding or changing a variable.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from portal.env import (
    database_from_url,
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_rate,
    env_str,
    private_dir,
    private_file,
    secret_key,
    sqlite_database,
)
from portal.sso import ldap_settings, oidc_settings, sso_team_groups

BASE_DIR = Path(__file__).resolve().parent.parent

# --- Core ----------------------------------------------------------------------------

DATA_DIR = Path(env_str("BEACON_DATA_DIR", str(BASE_DIR / "data"))).resolve()
DEBUG = env_bool("DEBUG", False)
SECRET_KEY = secret_key(DATA_DIR)
SITE_URL = env_str("SITE_URL", "http://127.0.0.1:8000").rstrip("/")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
# Names the portal also answers to inside its deployment's network, e.g. the compose
# service name Prometheus scrapes (web:8000/metrics): docker-compose.yml sets "web".
ALLOWED_HOSTS += env_list("INTERNAL_HOSTS")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", SITE_URL)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",  # API tokens are apps.accounts' (hashed, named): no rest_framework.authtoken
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and ReDoc files, served as static files
    "axes",
    "csp",
    "apps.core",
    "apps.accounts",
    "apps.clusters",
    "apps.jobs",
    "apps.audit",
    "apps.chargeback",
    "apps.quotas",
    "apps.security",
    "apps.slo",
    "apps.guardrails",
    "apps.reports",
    "apps.shell",
    "apps.demo",
]

MIDDLEWARE = [
    "apps.core.logs.RequestIdMiddleware",  # first: every later line logs under the request's id
    "apps.core.middleware.ServerTimingMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # before sessions and auth, whose reads it routes (apps/core/replica.py)
    "apps.core.replica.ReplicaMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # per-address API rate limit, before authentication (apps/core/api/throttles.py)
    "apps.core.api.throttles.AddressThrottleMiddleware",
    # before CSRF, which parses the body to find its token: oversize trace uploads are
    # refused by Content-Length before anything is spooled (apps/jobs/middleware.py)
    "apps.jobs.middleware.TraceUploadLimitMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # --- hardening (docs/SECURITY.md): keep these together and in this order
    "csp.middleware.CSPMiddleware",
    "apps.core.middleware.PrivateCacheMiddleware",  # signed in: Cache-Control private, no-store
    "apps.core.middleware.BidiMarkerMiddleware",  # HTML: U+202E etc. shown as [U+202E]
    "apps.core.sessions.SessionTimeoutMiddleware",
    "apps.audit.middleware.AuditMiddleware",
    "apps.core.metrics.RequestMetricsMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.shell.context_processors.navigation",
            ]
        },
    }
]

# --- Database ------------------------------------------------------------------------

DATABASE_URL = env_str("DATABASE_URL")
if DATABASE_URL:
    DATABASES = {"default": database_from_url(DATABASE_URL)}
else:
    DATABASES = {"default": sqlite_database(private_dir(DATA_DIR) / "beacon.sqlite3")}
if "sqlite3" in str(DATABASES["default"]["ENGINE"]):
    private_file(Path(str(DATABASES["default"]["NAME"])))  # 0600 (apps/core/sqlite.py)
# A PostgreSQL streaming replica for page and API reads (apps/core/replica.py; unset: every
# read goes to DATABASE_URL). Same form as DATABASE_URL; the replica's connect timeout is 3 s
# unless the URL sets one.
DATABASE_REPLICA_URL = env_str("DATABASE_REPLICA_URL")
if DATABASE_REPLICA_URL:
    DATABASES["replica"] = database_from_url(DATABASE_REPLICA_URL)
    DATABASES["replica"]["OPTIONS"] = {"connect_timeout": "3",
                                       **DATABASES["replica"]["OPTIONS"]}  # type: ignore[dict-item]
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
# Behind pgbouncer in transaction pooling mode (docs/DEPLOY.md): no server-side cursors, since a
# named cursor would outlive the transaction pgbouncer lent its server connection for (Django
# already leaves psycopg's prepared statements off)
DATABASE_TRANSACTION_POOLING = env_bool("DATABASE_TRANSACTION_POOLING", False)
for _db in DATABASES.values():
    if DATABASE_TRANSACTION_POOLING and "postgresql" in str(_db["ENGINE"]):
        _db["DISABLE_SERVER_SIDE_CURSORS"] = True
DATABASE_ROUTERS = ["apps.core.replica.ReplicaRouter"]
# Seconds the replica may lag (pg_last_xact_replay_timestamp) before reads go to the primary
DATABASE_REPLICA_MAX_LAG = env_int("DATABASE_REPLICA_MAX_LAG", 5, minimum=0)
# Seconds a browser reads the primary after a request of theirs wrote (read-your-writes)
DATABASE_REPLICA_STICKY = env_int("DATABASE_REPLICA_STICKY", 15, minimum=1)
# Seconds between a process's checks of the replica's lag and reachability
DATABASE_REPLICA_CHECK_EVERY = env_int("DATABASE_REPLICA_CHECK_EVERY", 5, minimum=1)
# The archive's per-GPU and per-node tables are partitioned by month on PostgreSQL
# (apps/jobs/partitions.py): beat creates this many months of partitions ahead, daily
ARCHIVE_PARTITIONS_AHEAD = env_int("ARCHIVE_PARTITIONS_AHEAD", 3, minimum=1)
# Months of per-GPU and per-node archive kept before the current one; older months are
# detached and dropped whole (0: keep everything). Job-level figures (JobMetrics) stay.
ARCHIVE_RETENTION_MONTHS = env_int("ARCHIVE_RETENTION_MONTHS", 0, minimum=0)

# --- Auth and sessions ---------------------------------------------------------------

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "core-home"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Axes first: it refuses a locked-out login before any backend checks a password.
# The SSO sections below insert their backends before ModelBackend.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

# --- Hardening: cookies, headers, sessions (docs/SECURITY.md) -------------------------

# Cookies are Secure whenever the site is served over HTTPS (the usual production rule),
# and then carry the __Host- prefix: the browser refuses them from a subdomain or over http.
SECURE_COOKIES = env_bool("SECURE_COOKIES", SITE_URL.startswith("https://"))
SESSION_COOKIE_SECURE = SECURE_COOKIES
CSRF_COOKIE_SECURE = SECURE_COOKIES
if SECURE_COOKIES:
    SESSION_COOKIE_NAME = "__Host-sessionid"
    CSRF_COOKIE_NAME = "__Host-csrftoken"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
# Two clocks (apps/core/sessions.py): idle time since the last request, and the absolute
# lifetime since sign-in. The cookie itself dies with the absolute lifetime.
SESSION_IDLE_TIMEOUT = env_int("SESSION_IDLE_TIMEOUT", 2 * 3600, minimum=60)
SESSION_ABSOLUTE_TIMEOUT = env_int("SESSION_ABSOLUTE_TIMEOUT", 12 * 3600, minimum=60)
SESSION_COOKIE_AGE = SESSION_ABSOLUTE_TIMEOUT
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if SECURE_COOKIES:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # Health checks and Prometheus talk plain HTTP to the container, not through the proxy.
    SECURE_REDIRECT_EXEMPT = [r"^health/$", r"^metrics$"]
# Client address for rate limiting, audit and /metrics: REMOTE_ADDR, or the entry this
# many hops from the right of X-Forwarded-For when Beacon runs behind trusted proxies.
TRUSTED_PROXY_COUNT = env_int("TRUSTED_PROXY_COUNT", 0, minimum=0)

# Content security policy (django-csp 4). No inline script anywhere: pages load
# vendored files and charts read their figures from json_script blocks. Plotly draws with
# inline style attributes and adds two <style> elements whose contents are fixed per
# Plotly version: an empty one it fills through CSSOM, and its notifier rules. Their
# hashes are allowed, not 'unsafe-inline'; tests/e2e/test_csp.py fails if Plotly changes
# them. No 'unsafe-eval': the SVG traces need none (WebGL traces would).
_PLOTLY_STYLE_HASHES = [
    "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='",  # the empty <style>
    "'sha256-ji27qzEtxXZW+7dun6UwjHXJ18e6WAin1VvNtkzIE/o='",  # plotly notifier rules
]
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-elem": ["'self'", *_PLOTLY_STYLE_HASHES],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# --- Login rate limiting (django-axes) ------------------------------------------------

# N failures for one (user name, address) pair lock that pair out for a while. Locking
# on the user name alone would let anyone lock a colleague out.
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "apps.core.net.client_ip"
# The 429 page says how long is left (apps/accounts/lockout.py), and attempts during the
# lockout, even with the right password, do not restart it (axes' default does).
AXES_LOCKOUT_CALLABLE = "apps.accounts.lockout.lockout_response"
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_DISABLE_ACCESS_LOG = True  # successful sign-ins are in the audit log already
AXES_VERBOSE = False

# --- SSO: groups to teams (LDAP and OIDC alike; apps/accounts/services.py) --------------

# SSO_TEAM_GROUPS="nlp-users:nlp,nlp-leads:nlp:lead,cv-users:vision": directory groups give
# team memberships and roles; teams named here are managed by sign-in, others by hand.
# SSO_ADMIN_GROUPS="portal-admins": members are platform admins (is_staff), others are not.
SSO_TEAM_GROUPS = sso_team_groups(env_str("SSO_TEAM_GROUPS"))
SSO_ADMIN_GROUPS = env_list("SSO_ADMIN_GROUPS")

# --- SSO: LDAP (django-auth-ldap; off unless LDAP_SERVER_URI is set) -------------------

globals().update(ldap_settings())
LDAP_ENABLED = bool(env_str("LDAP_SERVER_URI"))
LDAP_SLURM_USERNAME_ATTR = env_str("LDAP_SLURM_USERNAME_ATTR", "uid")
if LDAP_ENABLED:
    AUTHENTICATION_BACKENDS.insert(1, "apps.accounts.auth.BeaconLDAPBackend")

# --- SSO: OIDC (mozilla-django-oidc; off unless OIDC_RP_CLIENT_ID is set) --------------

OIDC_ENABLED = bool(env_str("OIDC_RP_CLIENT_ID"))
OIDC_PROVIDER_NAME = env_str("OIDC_PROVIDER_NAME", "single sign-on")
OIDC_USERNAME_CLAIM = env_str("OIDC_USERNAME_CLAIM", "preferred_username")
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups")
OIDC_SLURM_USERNAME_CLAIM = env_str("OIDC_SLURM_USERNAME_CLAIM", "")
OIDC_OP_ISSUER = env_str("OIDC_OP_ISSUER")  # checked against the ID token's iss when set
globals().update(oidc_settings())
if OIDC_ENABLED:
    AUTHENTICATION_BACKENDS.insert(1, "apps.accounts.auth.BeaconOIDCBackend")
    # Re-checks the provider in the background, so a disabled account stops working
    # within OIDC_RENEW_SECONDS instead of at the session's end.
    MIDDLEWARE.insert(MIDDLEWARE.index("apps.core.sessions.SessionTimeoutMiddleware"),
                      "mozilla_django_oidc.middleware.SessionRefresh")

# --- Internationalisation ------------------------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

# --- Static files --------------------------------------------------------------------

STATIC_URL = "/static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly.min.js straight from the plotly wheel: no CDN, no copy in git
    "apps.core.staticfinders.PlotlyFinder",
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = DEBUG

# --- Cache and Celery ----------------------------------------------------------------

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                          "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

CELERY_BROKER_URL = REDIS_URL  # empty: the embedded default, tasks run in-process
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_IGNORE_RESULT = True  # run status lives in TaskRun, not a result backend
CELERY_TASK_ACKS_LATE = True  # safe only because every task is idempotent
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Time limits per kind of task (seconds; issue 27): at the soft limit the task is interrupted
# (SoftTimeLimitExceeded: its run is recorded failed); TASK_TIME_LIMIT_GRACE later the worker
# kills the child outright. A task of no kind below gets TASK_TIME_LIMIT_DEFAULT.
TASK_TIME_LIMIT_GRACE = env_int("TASK_TIME_LIMIT_GRACE", 60, minimum=5)
TASK_KINDS: dict[str, tuple[int, tuple[str, ...]]] = {
    # Slurm reads and writes; keep it under SLURM_SYNC_CLAIM_EXPIRY (a check says so)
    "sync": (env_int("TASK_TIME_LIMIT_SYNC", 600, minimum=30), (
        "apps.clusters.tasks.sync_cluster", "apps.clusters.tasks.sync_queue",
        "apps.clusters.tasks.sync_nodes", "apps.clusters.tasks.sync_shares",
        "apps.clusters.tasks.label_jobs", "apps.quotas.tasks.check_cluster")),
    # profiler traces collected from TRACE_ROOT: parsing multi-GB files
    "traces": (env_int("TASK_TIME_LIMIT_TRACES", 3600, minimum=60), (
        "apps.jobs.tasks.collect_traces", "apps.jobs.tasks.collect_all_traces",
        "apps.jobs.tasks.digest_trace_group", "apps.jobs.tasks.analyse_trace_groups")),
    # a job's metrics archived from Prometheus
    "archive": (env_int("TASK_TIME_LIMIT_ARCHIVE", 900, minimum=30), (
        "apps.jobs.tasks.archive_job", "apps.jobs.tasks.archive_pending",
        "apps.jobs.tasks.maintain_archive_partitions",
        "apps.jobs.tasks.drop_detached_partitions")),
    # security detection of a cluster; keep it under SECURITY_CLAIM_EXPIRY
    "detection": (env_int("TASK_TIME_LIMIT_DETECTION", 1500, minimum=60), (
        "apps.security.tasks.detect_cluster",)),
    # SLO evaluation, draft statements, guardrails: long passes over the database
    "reports": (env_int("TASK_TIME_LIMIT_REPORTS", 1800, minimum=60), (
        "apps.slo.tasks.evaluate_slos", "apps.chargeback.tasks.refresh_drafts",
        "apps.chargeback.tasks.refresh_month", "apps.guardrails.tasks.check_running_jobs",
        "apps.guardrails.tasks.check_simulated_cluster", "apps.guardrails.tasks.send_digests")),
}
CELERY_TASK_SOFT_TIME_LIMIT = env_int("TASK_TIME_LIMIT_DEFAULT", 300, minimum=10)
CELERY_TASK_TIME_LIMIT = CELERY_TASK_SOFT_TIME_LIMIT + TASK_TIME_LIMIT_GRACE
CELERY_TASK_ANNOTATIONS = {
    name: {"soft_time_limit": soft, "time_limit": soft + TASK_TIME_LIMIT_GRACE}
    for soft, names in TASK_KINDS.values() for name in names
}
TASK_LONGEST_SECONDS = max([CELERY_TASK_TIME_LIMIT,
                            *(limits["time_limit"] for limits in CELERY_TASK_ANNOTATIONS.values())])
# Redis redelivers a task not acknowledged within the visibility timeout (acks_late): keep it
# above the longest task, or a long trace import would run twice.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": max(3600, TASK_LONGEST_SECONDS + 600)}
# A worker child whose memory passes this (MB) is replaced once its task ends: trace parsing
# and archive batches can leave a large heap behind. Prefork pools only.
CELERY_WORKER_MAX_MEMORY_PER_CHILD = env_int("WORKER_MAX_MEMORY_MB", 2048, minimum=64) * 1024
CELERY_TASK_ROUTES = {
    "apps.clusters.tasks.*": {"queue": "sync"},
    "apps.*.tasks.*": {"queue": "analysis"},
}
CELERY_TASK_DEFAULT_QUEUE = "analysis"
TASK_RUN_KEEP_DAYS = env_int("TASK_RUN_KEEP_DAYS", 90, minimum=1)
# A run still "running" after this long lost its process (database or worker killed
# mid-run): the sweep marks it failed. Keep it above the longest import or backfill.
TASK_RUN_STALE_MINUTES = env_int("TASK_RUN_STALE_MINUTES", 120, minimum=10)
# Seconds between refreshes of the open months' draft statements: beat's period, and the age
# at which the chargeback page asks for one itself (no beat under the embedded default).
CHARGEBACK_REFRESH_EVERY = env_int("CHARGEBACK_REFRESH_EVERY", 3600, minimum=300)
# The whole timetable in one place (STYLE.md §4).
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "prune-task-runs": {"task": "apps.core.tasks.prune_task_runs", "schedule": 24 * 3600,
                        "kwargs": {"keep_days": TASK_RUN_KEEP_DAYS}},
    "sweep-stale-runs": {"task": "apps.core.tasks.sweep_stale_runs", "schedule": 900.0,
                         "kwargs": {"older_than_minutes": TASK_RUN_STALE_MINUTES}},
    # The archive's monthly partitions, ahead and past retention (apps/jobs/partitions.py)
    "archive-partitions": {"task": "apps.jobs.tasks.maintain_archive_partitions",
                           "schedule": 24 * 3600.0},
    # Safety net behind the end-of-job hook: archive finished jobs nobody archived yet.
    "archive-pending-jobs": {"task": "apps.jobs.tasks.archive_pending", "schedule": 300.0},
    # Traces from TRACE_ROOT (apps/jobs/tasks.py), per cluster; nothing to do while unset.
    "traces-collect": {"task": "apps.jobs.tasks.collect_all_traces",
                       "schedule": float(env_int("TRACE_COLLECT_EVERY", 600, minimum=60))},
    # Slurm (apps/clusters/tasks.py): each part at its own cadence, fanned out per cluster.
    # "jobs" costs one sdiag call when nothing changed; "queue" must run well within
    # slurmctld's MinJobAge (300 s) for the rest backend's exit codes.
    "slurm-jobs": {"task": "apps.clusters.tasks.sync_all_clusters", "args": ("jobs",),
                   "schedule": float(env_int("SLURM_SYNC_JOBS_EVERY", 60, minimum=5))},
    "slurm-queue": {"task": "apps.clusters.tasks.sync_all_clusters", "args": ("queue",),
                    "schedule": float(env_int("SLURM_SYNC_QUEUE_EVERY", 30, minimum=5))},
    "slurm-nodes": {"task": "apps.clusters.tasks.sync_all_clusters", "args": ("nodes",),
                    "schedule": float(env_int("SLURM_SYNC_NODES_EVERY", 60, minimum=5))},
    "slurm-shares": {"task": "apps.clusters.tasks.sync_all_clusters", "args": ("shares",),
                     "schedule": float(env_int("SLURM_SYNC_SHARES_EVERY", 300, minimum=30))},
    "slurm-labels": {"task": "apps.clusters.tasks.sync_all_clusters", "args": ("labels",),
                     "schedule": float(env_int("SLURM_LABEL_EVERY", 120, minimum=30))},
    # Reservations and QOS limits (apps/clusters/sync_limits.py): read by the live cluster view.
    "slurm-limits": {"task": "apps.clusters.tasks.sync_all_clusters", "args": ("limits",),
                     "schedule": float(env_int("SLURM_SYNC_LIMITS_EVERY", 120, minimum=30))},
    # Chargeback (apps/chargeback): the open months' draft statements, rewritten in place.
    "chargeback-drafts": {"task": "apps.chargeback.tasks.refresh_drafts",
                          "schedule": float(CHARGEBACK_REFRESH_EVERY)},
    # Quotas (apps/quotas): due scheduled quotas, drift, 80 %/100 % warnings, per cluster.
    "quotas-check": {"task": "apps.quotas.tasks.check_all_clusters",
                     "schedule": float(env_int("QUOTA_CHECK_EVERY", 600, minimum=60))},
    # Security (apps/security/tasks.py): detection per cluster, the non-critical digest.
    "security-detect": {"task": "apps.security.tasks.detect_all",
                        "schedule": float(env_int("SECURITY_DETECT_EVERY", 600, minimum=60))},
    "security-digest": {"task": "apps.security.tasks.send_digest",
                        "schedule": float(env_int("SECURITY_DIGEST_EVERY", 3600, minimum=300))},
    # SLOs (apps/slo): scorecards, monthly snapshots, breach and fast-burn notifications.
    "slo-evaluate": {"task": "apps.slo.tasks.evaluate_slos",
                     "schedule": float(env_int("SLO_EVALUATE_EVERY", 900, minimum=60))},
    # Guardrails (apps/guardrails): running jobs' alerts and the idle-job policy; the weekly
    # right-sizing digests (each user and team gets one per week, however often this runs).
    "guardrails-check": {"task": "apps.guardrails.tasks.check_running_jobs",
                         "schedule": float(env_int("GUARDRAILS_CHECK_EVERY", 600, minimum=60))},
    "guardrails-digest": {"task": "apps.guardrails.tasks.send_digests",
                          "schedule": float(env_int("GUARDRAILS_DIGEST_EVERY", 3600, minimum=300))},
}

# --- External services ---------------------------------------------------------------

# Defaults for clusters created from the environment (``manage.py setup_cluster``);
# each Cluster row carries its own copy, editable in the admin.
PROMETHEUS_URL = env_str("PROMETHEUS_URL")
PROMETHEUS_TIMEOUT = env_int("PROMETHEUS_TIMEOUT", 10, minimum=1)
# The GPU exporters a cluster runs unless its metric_labels say ("exporters"): dcgm
# (dcgm-exporter), amd (AMD Device Metrics Exporter), or both for a cluster mixing vendors;
# each one listed costs one query per measure (docs/metrics.md)
GPU_EXPORTERS = env_list("GPU_EXPORTERS", "dcgm")
# The AMD exporter's MetricsFieldPrefix ("amd_": amd_gpu_gfx_activity) unless a cluster's
# metric_labels say ("amd": {"prefix": ...})
AMD_METRICS_PREFIX = env_str("AMD_METRICS_PREFIX")
SLURM_BACKEND = env_choice("SLURM_BACKEND", "none", ("none", "cli", "rest", "pyslurm", "files"))
SLURM_FILES_DIR = env_str("SLURM_FILES_DIR")  # the files backend: saved command output
SLURM_CLUSTER = env_str("SLURM_CLUSTER")
SLURM_REST_URL = env_str("SLURM_REST_URL")
SLURM_TIMEOUT = env_int("SLURM_TIMEOUT", 30, minimum=1)
SLURM_REST_USER = env_str("SLURM_REST_USER")
SLURM_REST_TOKEN_FILE = env_str("SLURM_REST_TOKEN_FILE")  # a JWT from `scontrol token`
# slurmrestd's API version ("": the newest the server serves; apps/clusters/adapters/slurm/
# versions.py lists them, tests/clusters/test_slurm_versions.py keeps this list the same)
SLURM_REST_VERSION = env_choice("SLURM_REST_VERSION", "", (
    "", "v0.0.37", "v0.0.38", "v0.0.39", "v0.0.40", "v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44",
    "v0.0.45"))
# Job sync (apps/clusters/sync.py): seconds unless named otherwise
SLURM_SYNC_OVERLAP = env_int("SLURM_SYNC_OVERLAP", 600, minimum=0)  # re-read behind watermark
SLURM_SYNC_INITIAL_DAYS = env_int("SLURM_SYNC_INITIAL_DAYS", 30, minimum=1)  # first sync
SLURM_SYNC_SETTLE = env_int("SLURM_SYNC_SETTLE", 60, minimum=0)  # slurmdbd lags slurmctld
SLURM_SYNC_FULL_EVERY = env_int("SLURM_SYNC_FULL_EVERY", 600, minimum=1)
SLURM_SYNC_CLAIM_EXPIRY = env_int("SLURM_SYNC_CLAIM_EXPIRY", 900, minimum=60)
SLURM_SYNC_BATCH = env_int("SLURM_SYNC_BATCH", 1000, minimum=1)  # records per transaction
SLURM_IMPORT_BATCH = env_int("SLURM_IMPORT_BATCH", 5000, minimum=1)  # the same, for import_sacct
JOB_LABEL_RULES = Path(env_str("JOB_LABEL_RULES", str(BASE_DIR / "apps/jobs/label_rules.json")))

# --- Chargeback (apps/chargeback, docs/chargeback.md) ----------------------------------

# Every price on the rate card and every statement is in this one currency.
CHARGEBACK_CURRENCY = env_str("CHARGEBACK_CURRENCY", "EUR").strip().upper()[:8] or "EUR"

# --- Quotas (apps/quotas, docs/chargeback.md) ------------------------------------------

# Warnings at 80 % and 100 % of a team's quota go to its leads by e-mail and/or to a webhook
# (Slack/Mattermost-style JSON with a "text" field). Each crossing is sent once.
QUOTA_ALERT_EMAIL = env_bool("QUOTA_ALERT_EMAIL", True)
QUOTA_WEBHOOK_URL = env_str("QUOTA_WEBHOOK_URL")
QUOTA_WEBHOOK_TIMEOUT = env_int("QUOTA_WEBHOOK_TIMEOUT", 10, minimum=1)

# --- Outgoing webhooks (apps/core/webhooks.py, docs/SECURITY.md "Outgoing webhooks") ---------

# Every webhook (guardrails, SLOs, security, quotas) goes to public addresses only: loopback,
# private, link-local, CGNAT, reserved and cloud metadata addresses are refused when a URL is
# saved and again when it is sent. Names here are allowed anyway, comma-separated: host names
# (`chat.corp.example`), suffixes (`*.corp.example`), addresses and networks (`10.20.0.0/16`),
# e.g. an internal chat server. Each send to such an address is logged (logger
# `beacon.webhook`). Each sender's `*_WEBHOOK_TIMEOUT` bounds connecting and answering together.
WEBHOOK_ALLOW = env_list("BEACON_WEBHOOK_ALLOW")
# The longest Retry-After (seconds) a webhook's 429 or 5xx is obeyed for: the security tasks
# retry no sooner than asked, up to this; the other senders try again at their next pass.
WEBHOOK_RETRY_AFTER_MAX = env_int("WEBHOOK_RETRY_AFTER_MAX", 3600, minimum=0)
# A CA bundle (file) for webhook servers whose certificates a private CA signs; unset:
# certifi's bundle. The environment's `REQUESTS_CA_BUNDLE` and proxies are not used for webhooks.
WEBHOOK_CA_BUNDLE = env_str("WEBHOOK_CA_BUNDLE")

# --- E-mail (quota warnings, security notifications) ------------------------------------

# The one mail configuration. No EMAIL_HOST: messages are written to the console log (the
# embedded default). Otherwise SMTP submission: port 587 with STARTTLS unless set.
EMAIL_HOST = env_str("EMAIL_HOST")
EMAIL_BACKEND = ("django.core.mail.backends.smtp.EmailBackend" if EMAIL_HOST
                 else "django.core.mail.backends.console.EmailBackend")
EMAIL_PORT = env_int("EMAIL_PORT", 587, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", True)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "beacon@localhost")

# --- Profiler traces (apps/jobs/traces.py, docs/traces.md) ---------------------------

TRACE_MAX_FILE_MB = env_int("TRACE_MAX_FILE_MB", 1024, minimum=1)
TRACE_MAX_DECOMPRESSED_MB = env_int("TRACE_MAX_DECOMPRESSED_MB", 8192, minimum=1)
# A straggler must do this much more own work per step than the other ranks' median:
# both the absolute floor and the share of the median step (calibrated on balanced runs).
TRACE_STRAGGLER_MIN_EXCESS_MS = env_int("TRACE_STRAGGLER_MIN_EXCESS_MS", 5, minimum=0)
TRACE_STRAGGLER_MIN_EXCESS_PCT = env_int("TRACE_STRAGGLER_MIN_EXCESS_PCT", 15, minimum=0)
# Uploads through the job page and the API: one request's body, and files per request (one
# per rank). Larger traces go through `manage.py import_trace` on the server.
TRACE_UPLOAD_MAX_MB = env_int("TRACE_UPLOAD_MAX_MB", 512, minimum=1)
# Traces collected from a folder (docs/traces.md): TRACE_ROOT/<cluster>/<job id>/<files>,
# every TRACE_COLLECT_EVERY seconds (the beat entry); files changed in the last
# TRACE_COLLECT_SETTLE_S seconds wait for the next collection (the profiler may still be
# writing them). Unset: off.
TRACE_ROOT = env_str("TRACE_ROOT")
TRACE_COLLECT_SETTLE_S = env_int("TRACE_COLLECT_SETTLE_S", 120, minimum=0)
TRACE_UPLOAD_MAX_FILES = env_int("TRACE_UPLOAD_MAX_FILES", 256, minimum=1)
# A collected run of more files than this is read by several tasks, this many files each,
# in parallel on the workers, then analysed once from their digests (issue 29; docs/traces.md).
TRACE_GROUP_FILES = env_int("TRACE_GROUP_FILES", 4, minimum=1)
DATA_UPLOAD_MAX_NUMBER_FILES = TRACE_UPLOAD_MAX_FILES

# --- Security findings (apps/security, docs/security-rules.md) --------------------------

# Each scheduled run covers the last SECURITY_DETECT_WINDOW_MINUTES (it overlaps the
# previous one; findings are deduplicated) plus a look-back for what preceded a run.
SECURITY_DETECT_WINDOW_MINUTES = env_int("SECURITY_DETECT_WINDOW_MINUTES", 60, minimum=5)
SECURITY_LOOKBACK_MINUTES = env_int("SECURITY_LOOKBACK_MINUTES", 30, minimum=0)
SECURITY_MAX_CATCHUP_HOURS = env_int("SECURITY_MAX_CATCHUP_HOURS", 24, minimum=1)
SECURITY_CLAIM_EXPIRY = env_int("SECURITY_CLAIM_EXPIRY", 1800, minimum=60)
SECURITY_SCRIPT_BATCH = env_int("SECURITY_SCRIPT_BATCH", 500, minimum=1)
SECURITY_SCRIPT_LOOKBACK_DAYS = env_int("SECURITY_SCRIPT_LOOKBACK_DAYS", 7, minimum=1)
# The shortest bucket (seconds) telemetry is read at from Prometheus; never below the
# cluster's scrape interval. Tests scraping real exporters every second lower it.
SECURITY_TELEMETRY_MIN_STEP = env_int("SECURITY_TELEMETRY_MIN_STEP", 60, minimum=1)
# Critical findings at once, the rest in the digest: e-mail and/or a JSON webhook.
SECURITY_NOTIFY_EMAILS = env_list("SECURITY_NOTIFY_EMAILS")
SECURITY_WEBHOOK_URL = env_str("SECURITY_WEBHOOK_URL")
SECURITY_WEBHOOK_TIMEOUT = env_int("SECURITY_WEBHOOK_TIMEOUT", 10, minimum=1)
# Security notifications go out only to SECURITY_NOTIFY_EMAILS, through the one e-mail
# configuration above (EMAIL_*).

# Who besides platform admins may resolve a high or critical finding, or suppress any:
# "lead" (the leads of the finding's team, never for a finding about their own job), or
# "none" (admins only). Whoever sees a finding may comment on and acknowledge it.
SECURITY_CLOSE_ROLE = env_choice("SECURITY_CLOSE_ROLE", "none", ("none", "lead"))

# Ingest API: lines (sshd) or documents (inventory, probes) per request.
SECURITY_INGEST_MAX_ITEMS = env_int("SECURITY_INGEST_MAX_ITEMS", 10000, minimum=1)
# The active probe of exposed services is off unless a site opts in (docs/security-rules.md).
SECURITY_PROBE_ENABLED = env_bool("SECURITY_PROBE_ENABLED", False)
SECURITY_PROBE_TIMEOUT = env_int("SECURITY_PROBE_TIMEOUT", 3, minimum=1)
SECURITY_PROBE_PER_SECOND = env_int("SECURITY_PROBE_PER_SECOND", 5, minimum=1)

# --- SLOs (apps/slo, docs/slo.md) ----------------------------------------------------

# The open month's history snapshot is recomputed at most this often (the scorecards at
# every evaluation, SLO_EVALUATE_EVERY seconds).
SLO_SNAPSHOT_MINUTES = env_int("SLO_SNAPSHOT_MINUTES", 360, minimum=0)
# A breach resolves once this share of the error budget is back (no re-alerting while an
# SLI hovers at its target).
SLO_RESOLVE_MARGIN = env_int("SLO_RESOLVE_MARGIN_PERCENT", 5, minimum=0) / 100
# Breaches and fast burns go to the team's leads and the platform admins by e-mail, plus
# these addresses, and to a Slack or Mattermost incoming webhook.
SLO_NOTIFY_EMAILS = env_list("SLO_NOTIFY_EMAILS")
SLO_WEBHOOK_URL = env_str("SLO_WEBHOOK_URL")
SLO_WEBHOOK_FORMAT = env_choice("SLO_WEBHOOK_FORMAT", "slack", ("slack", "mattermost"))
SLO_WEBHOOK_TIMEOUT = env_int("SLO_WEBHOOK_TIMEOUT", 10, minimum=1)

# --- Idleness (apps/analysis/idleness.py: one reading for pages, findings, alerts, digests) ---

# A sample, a GPU or a job busy under this percent did no work (the efficiency split, the
# idle alert, the idle findings and the digest all read it).
# (GUARDRAILS_IDLE_BELOW_PERCENT and GUARDRAILS_MEMORY_HELD_MIB, their names before issue 26,
# are still read when the new names are unset, so an upgraded site keeps its thresholds.)
IDLE_BELOW_PERCENT = env_int("IDLE_BELOW_PERCENT",
                             env_int("GUARDRAILS_IDLE_BELOW_PERCENT", 5, minimum=1), minimum=1)
# A job busy under this percent of its run (and not idle) is "mostly idle".
MOSTLY_IDLE_BELOW_PERCENT = env_int("MOSTLY_IDLE_BELOW_PERCENT", 15, minimum=1)
# An idle GPU holding this much memory holds it (a bare CUDA context, a few hundred MiB,
# does not): the efficiency split's "idle, memory held" and the memory-held alert.
MEMORY_HELD_MIB = env_int("MEMORY_HELD_MIB", env_int("GUARDRAILS_MEMORY_HELD_MIB", 1024, minimum=1),
                          minimum=1)
# A job idle with its memory held this percent of its run "held its memory".
IDLE_HELD_PERCENT = env_int("IDLE_HELD_PERCENT", 50, minimum=1)
# A job is read as idle or mostly idle only over at least this many hours of run.
IDLE_MIN_HOURS = env_int("IDLE_MIN_HOURS", 4, minimum=0)

# --- Guardrails (apps/guardrails, docs/diagnosis.md "Guardrails") ----------------------

# Alerts to a job's owner while it runs: GPUs idle this long (interactive partitions wait
# longer: people think between notebook cells), memory held on them, a straggler GPU, an
# input stall. Once per job and kind; at most GUARDRAILS_MAX_MESSAGES_PER_DAY messages per
# user in 24 h; on for everyone unless a user or their team turns them off.
GUARDRAILS_ALERTS_DEFAULT = env_bool("GUARDRAILS_ALERTS_DEFAULT", True)
GUARDRAILS_IDLE_MINUTES = env_int("GUARDRAILS_IDLE_MINUTES", 60, minimum=10)
GUARDRAILS_INTERACTIVE_IDLE_MINUTES = env_int("GUARDRAILS_INTERACTIVE_IDLE_MINUTES", 240,
                                              minimum=10)
GUARDRAILS_INTERACTIVE_PARTITIONS = env_list("GUARDRAILS_INTERACTIVE_PARTITIONS", "interactive")
GUARDRAILS_MIN_RUN_MINUTES = env_int("GUARDRAILS_MIN_RUN_MINUTES", 30, minimum=0)
GUARDRAILS_STALL_RULES = env_list("GUARDRAILS_STALL_RULES",
                                  "input-stall,input-stall-storage,input-stall-iowait,"
                                  "input-stall-cpu")
GUARDRAILS_MAX_MESSAGES_PER_DAY = env_int("GUARDRAILS_MAX_MESSAGES_PER_DAY", 4, minimum=1)
GUARDRAILS_WEBHOOK_TIMEOUT = env_int("GUARDRAILS_WEBHOOK_TIMEOUT", 10, minimum=1)
# Who hears about a Slurm user's job (alerts, policy notices, digests): the linked portal
# user's e-mail (LDAP `mail`, OIDC `email`), else `<Slurm user>@BEACON_EMAIL_DOMAIN`
# (e.g. `example.org`); else nobody: kept "no address", named by check_guardrails and the
# Platform page.
EMAIL_DOMAIN = env_str("BEACON_EMAIL_DOMAIN").lstrip("@")
# The idle-job policy, off by default: "dry-run" records what it would do, "enforce" warns
# the owner and cancels through the Slurm backend after the grace period.
GUARDRAILS_POLICY = env_choice("GUARDRAILS_POLICY", "off", ("off", "dry-run", "enforce"))
GUARDRAILS_POLICY_IDLE_MINUTES = env_int("GUARDRAILS_POLICY_IDLE_MINUTES", 120, minimum=10)
GUARDRAILS_POLICY_GRACE_MINUTES = env_int("GUARDRAILS_POLICY_GRACE_MINUTES", 60, minimum=0)
# The weekly right-sizing digest (weeks from Monday 00:00 UTC, sent in the next week's
# first run): a user hears of their jobs when the advice would save this many GPU-hours.
GUARDRAILS_DIGEST_MIN_GPU_HOURS = env_int("GUARDRAILS_DIGEST_MIN_GPU_HOURS", 1, minimum=0)

# --- API -----------------------------------------------------------------------------

# Rate limits (apps/core/api/throttles.py): requests per named token (or signed-in user) and
# per client address, for the API as a whole and for the collectors' ingest endpoints; a
# refused request is a 429 with Retry-After. Behind a proxy, set TRUSTED_PROXY_COUNT or every
# client shares the proxy's address. One token usually serves every node's collectors: the
# ingest budget per token is the whole cluster's, per address one node's.
API_THROTTLE_RATES = {
    "api_token": env_rate("API_RATE_PER_TOKEN", "600/min"),
    "api_address": env_rate("API_RATE_PER_ADDRESS", "1200/min"),
    "ingest_token": env_rate("INGEST_RATE_PER_TOKEN", "6000/min"),
    "ingest_address": env_rate("INGEST_RATE_PER_ADDRESS", "120/min"),
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its WWW-Authenticate header turns "not signed in" into a 401
        "apps.accounts.tokens.NamedTokenAuthentication",  # named tokens, hashed (issue 27)
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["apps.accounts.permissions.RolePermission"],
    # per address: AddressThrottleMiddleware, which runs before authentication
    "DEFAULT_THROTTLE_CLASSES": ["apps.core.api.throttles.CredentialThrottle"],
    "DEFAULT_FILTER_BACKENDS": [
        "apps.core.api.strict.StrictQueryParams",  # 400 for unknown or malformed parameters
        "django_filters.rest_framework.DjangoFilterBackend",
    ],
    "DEFAULT_PAGINATION_CLASS": "apps.core.api.strict.StrictCursorPagination",
    # JSON bodies nested past a few levels are a 400 before they are decoded (issue 27)
    "DEFAULT_PARSER_CLASSES": [
        "apps.core.api.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "apps.core.api.schema.BeaconAutoSchema",
    # The browsable API runs inline scripts, which the CSP forbids: JSON only unless DEBUG.
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        *(["rest_framework.renderers.BrowsableAPIRenderer"] if DEBUG else []),
    ],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Beacon API",
    "DESCRIPTION": "GPU-cluster developer portal: jobs, teams, clusters, background runs and "
                   "security findings.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": "/api/v1",
    # Several models have a "status" or "state": name each enum so the schema stays stable.
    "ENUM_NAME_OVERRIDES": {"StatementStatusEnum": "apps.chargeback.models.Statement.Status",
                            "QuotaStateEnum": "apps.quotas.models.Quota.State",
                            "StateEnum": "apps.jobs.models.Job.State",
                            "FindingStatusEnum": "apps.security.models.Finding.Status",
                            "SloStatusEnum": "apps.slo.models.STATUS_CHOICES"},
}

# --- Portal metrics (/metrics, apps/core/metrics.py) -----------------------------------

# Closed unless one is set: a bearer token for Prometheus' ``authorization`` block, or
# addresses/CIDRs allowed without one. Behind a proxy on the same host every client looks
# like 127.0.0.1, so loopback is not allowed by default.
METRICS_TOKEN = env_str("METRICS_TOKEN")
METRICS_ALLOWED_IPS = env_list("METRICS_ALLOWED_IPS")
# The Celery worker's task outcomes (0: not served). Same token and allow-list as /metrics.
WORKER_METRICS_PORT = env_int("WORKER_METRICS_PORT", 0, minimum=0)
WORKER_METRICS_ADDRESS = env_str("WORKER_METRICS_ADDRESS", "0.0.0.0")  # noqa: S104

# --- Error reporting and traces (apps/core/observability.py, docs/DEPLOY.md) -------------

# Both off unless set, and then their package must be installed (start-up says which): off,
# neither SDK is imported. SENTRY_DSN sends errors to Sentry (no personal data), tagged with
# the request id; the share of requests also traced there, in percent.
SENTRY_DSN = env_str("SENTRY_DSN")
SENTRY_ENVIRONMENT = env_str("SENTRY_ENVIRONMENT", "production")
SENTRY_TRACES_SAMPLE_RATE = env_int("SENTRY_TRACES_PERCENT", 0, minimum=0) / 100
if SENTRY_TRACES_SAMPLE_RATE > 1:
    raise ImproperlyConfigured("SENTRY_TRACES_PERCENT: a percentage, at most 100")
# OpenTelemetry traces of requests and tasks over OTLP/HTTP to this collector, e.g.
# http://otel-collector:4318 (the exporter also reads the other OTEL_EXPORTER_OTLP_* variables).
OTEL_EXPORTER_OTLP_ENDPOINT = env_str("OTEL_EXPORTER_OTLP_ENDPOINT")
OTEL_SERVICE_NAME = env_str("OTEL_SERVICE_NAME", "beacon")

# --- Logging -------------------------------------------------------------------------

LOG_LEVEL = env_choice("LOG_LEVEL", "info", ("debug", "info", "warning", "error")).upper()
# "plain" lines for people, or "json": one object per line (time, level, logger, message,
# request_id, task_name, task_id, exception) for a log pipeline. Either way each line names
# the request it belongs to (X-Request-ID, echoed in the response) and, in workers, the task
# and the request that queued it (apps/core/logs.py).
LOG_FORMAT = env_choice("BEACON_LOG_FORMAT", "plain", ("plain", "json"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "apps.core.logs.ContextFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s%(context)s: %(message)s"},
        "json": {"()": "apps.core.logs.JsonFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT,
                             "filters": ["context"]}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "beacon": {"level": LOG_LEVEL, "propagate": True},
        "apps": {"level": LOG_LEVEL, "propagate": True},
        "celery": {"level": "WARNING", "propagate": True},
    },
}
