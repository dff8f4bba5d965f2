"""Settings for Allot, read from the environment (django-environ) with safe local defaults.

Local default: SQLite under var/, DEBUG on, a development secret key. Production (DEBUG off)
fails fast without SECRET_KEY.
"""

from pathlib import Path

import environ
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
# Local state (the SQLite database, file locks, the filesystem broker): made by scripts/run.sh,
# and by the code that writes there, never on import.
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False) if (BASE_DIR / ".env").exists() else None

DEBUG = env.bool("DEBUG", default=True)
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "allot-local-development-only-not-a-secret"

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "django_htmx",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "simple_history",
    "portal",
    "quotas",
    "policies",
    "quotas.capacity",
    "scheduling",
    "scheduling.backends.simulated",
    "billing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Change history (core/history.py): who (the request's user) and by which path.
    "simple_history.middleware.HistoryRequestMiddleware",
    "core.history.HistorySourceMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "portal.urls"

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
                "billing.context_processors.budget_banner",
            ],
        },
    },
]

WSGI_APPLICATION = "portal.wsgi.application"

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'allot.sqlite3'}"),
}
# Several test runs may share one PostgreSQL server: each may name its own test database.
if env.str("TEST_DATABASE_NAME", default=""):
    DATABASES["default"]["TEST"] = {"NAME": env.str("TEST_DATABASE_NAME")}
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=0))
# A persistent connection (CONN_MAX_AGE > 0) is checked before its first use in each request
# (one `SELECT 1`), so one the server dropped (a database restart, a failover) is replaced
# instead of failing the first request each web thread serves after it.
DATABASES["default"].setdefault("CONN_HEALTH_CHECKS",
                                env.bool("CONN_HEALTH_CHECKS", default=True))
if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    # psycopg prepares only statements sent through server-binding cursors: the few fixed
    # statements of hot paths (core.db.hot_cursor), prepared once per connection.
    # Django's own queries bind on the client and are never prepared. 0 turns it off (e.g.
    # behind a pooler that cannot keep prepared statements).
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "prepare_threshold", env.int("DATABASE_PREPARE_THRESHOLD", default=5) or None)
    # Those prepared statements are planned once, not at every run: with the default
    # plan_cache_mode the server may choose a custom plan for a statement with many
    # parameters (the submission's insert) and so plan it again at every run. Only statements
    # bound on the server are affected; Django's own queries carry no parameters to the
    # server. Not sent with preparing off (a pooler may refuse startup options).
    if DATABASES["default"]["OPTIONS"]["prepare_threshold"]:
        DATABASES["default"]["OPTIONS"].setdefault(
            "options", "-c plan_cache_mode=force_generic_plan")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# The tests add a fast (and weak) hasher in tests/settings.py.
PASSWORD_HASHERS = env.list(
    "PASSWORD_HASHERS", default=["django.contrib.auth.hashers.PBKDF2PasswordHasher"])

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = env.str("STATIC_ROOT", default=str(VAR_DIR / "staticfiles"))

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="allot@localhost")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.authentication.HashedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "portal.api_errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Allot API",
    "DESCRIPTION": "Self-service GPU capacity: queues, quotas, workloads, capacity requests, "
    "clusters, usage and billing.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Celery. With no CELERY_BROKER_URL the broker is a directory under var/ (kombu's filesystem
# transport): it needs no server, so `make run` works on a bare machine. Its folders are made
# before the first message is written or read (portal/celery.py).
BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default="") or None
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TIMEZONE = "UTC"
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "in"),
        "data_folder_out": str(BROKER_DIR / "in"),
        "data_folder_processed": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
    }

# The workers' periodic tasks (scheduling/tasks.py): the cycle is also nudged on submit/finish.
# A scheduling task that waited longer than its interval is dropped (the next one comes), so
# a busy worker never works through a backlog of stale cycles and syncs.
_CYCLE_S = env.float("ALLOT_CYCLE_INTERVAL_S", default=3.0)
_SYNC_S = env.float("ALLOT_SYNC_INTERVAL_S", default=2.0)
_OUTBOX_S = env.float("ALLOT_OUTBOX_INTERVAL_S", default=5.0)
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULE = {
    "scheduling-cycle": {"task": "scheduling.cycle", "schedule": _CYCLE_S,
                         "options": {"expires": max(1.0, 2 * _CYCLE_S)}},
    "scheduling-sync": {"task": "scheduling.sync_all", "schedule": _SYNC_S,
                        "options": {"expires": max(1.0, 2 * _SYNC_S)}},
    # Follows the clusters by watch (one watcher per cluster across workers; see tasks.py).
    "scheduling-watch": {"task": "scheduling.watch", "schedule": 10.0,
                         "options": {"expires": 10.0}},
    "scheduling-maintain": {"task": "scheduling.maintain", "schedule": 30.0,
                            "options": {"expires": 60.0}},
    # Delivers the cluster calls of the outbox that are due (each write also nudges it), so a
    # broker outage only delays a delete, a suspend or a dispatch (docs/architecture.md).
    "scheduling-outbox": {"task": "scheduling.outbox_deliver", "schedule": _OUTBOX_S,
                          "options": {"expires": max(1.0, 2 * _OUTBOX_S)}},
    "capacity-process-due": {"task": "capacity.process_due", "schedule": 60.0},
    # Billing (billing/tasks.py): meter, price and check budgets after each hour; reconcile
    # the previous day; invoice the previous month on the 1st.
    "billing-rollup": {"task": "billing.rollup_recent_hours", "schedule": crontab(minute=5)},
    "billing-reconcile": {"task": "billing.reconcile_yesterday",
                          "schedule": crontab(hour=2, minute=15)},
    "billing-invoices": {"task": "billing.issue_last_month_invoices",
                         "schedule": crontab(day_of_month=1, hour=3, minute=30)},
}
# The Prometheus that scrapes dcgm-exporter (empty: no telemetry, every minute is a gap).
ALLOT_PROMETHEUS_URL = env.str("ALLOT_PROMETHEUS_URL", default="")
ALLOT_WORKERS = {
    "dispatch_penalty_s": env.float("ALLOT_DISPATCH_PENALTY_S", default=300.0),
    "dispatch_penalty": env.float("ALLOT_DISPATCH_PENALTY", default=0.6),
    "cleanup_ttl_s": env.float("ALLOT_CLEANUP_TTL_S", default=600.0),
    "preempting_stuck_s": env.float("ALLOT_PREEMPTING_STUCK_S", default=600.0),
    # Stuck limits per non-terminal state (seconds; 0 turns one off; unset: the defaults in
    # scheduling/fleet/maintenance.py, stuck_limit_s).
    "stuck_pending_s": env.float("ALLOT_STUCK_PENDING_S", default=None),
    "stuck_reserved_s": env.float("ALLOT_STUCK_RESERVED_S", default=None),
    "stuck_running_s": env.float("ALLOT_STUCK_RUNNING_S", default=None),
    "stuck_preempting_s": env.float("ALLOT_STUCK_PREEMPTING_S", default=None),
    # Sync by watch (scheduling.watch), with the periodic sync as the resync.
    "watch": env.bool("ALLOT_WATCH", default=True),
    "watch_session_s": env.float("ALLOT_WATCH_SESSION_S", default=15.0),
    "watch_interval_s": env.float("ALLOT_WATCH_INTERVAL_S", default=0.1),
    # Clusters whose state is in this database (simulated) dispatched inside the cycle's
    # transaction (scheduling/fleet/dispatch.py, dispatch_in_cycle): the default, so the demo
    # and the benchmark run the same way; off: after commit, as other clusters.
    "dispatch_in_cycle": env.bool("ALLOT_DISPATCH_IN_CYCLE", default=True),
    # How often a waiting workload's reason message may be rewritten when only its numbers
    # moved (a new reason code is always written at once, with its event).
    "reason_refresh_s": env.float("ALLOT_REASON_REFRESH_S", default=5.0),
    "max_pending_per_queue": env.int("ALLOT_MAX_PENDING_PER_QUEUE", default=100),
    # The outbox of cluster calls (scheduling/fleet/delivery.py): a failed delivery is retried
    # after base * 2^(attempts - 1) seconds, at most max; from `outbox_alarm_attempts` failed
    # attempts on, each failure is logged at error level (and the workload gets an event once).
    # A delivery not finished within the lease is taken again by another worker.
    "outbox_backoff_base_s": env.float("ALLOT_OUTBOX_BACKOFF_BASE_S", default=2.0),
    "outbox_backoff_max_s": env.float("ALLOT_OUTBOX_BACKOFF_MAX_S", default=300.0),
    "outbox_alarm_attempts": env.int("ALLOT_OUTBOX_ALARM_ATTEMPTS", default=5),
    "outbox_lease_s": env.float("ALLOT_OUTBOX_LEASE_S", default=120.0),
    "outbox_keep_s": env.float("ALLOT_OUTBOX_KEEP_S", default=86400.0),
}

# Engine settings (QUOTA-SEMANTICS.md defaults); every one may be overridden from the env.
ALLOT_ENGINE = {
    "reclaim_cooldown_s": env.float("ALLOT_RECLAIM_COOLDOWN_S", default=120.0),
    "starvation_s": env.float("ALLOT_STARVATION_S", default=1800.0),
    "pods_ready_timeout_s": env.float("ALLOT_PODS_READY_TIMEOUT_S", default=300.0),
    "min_cluster_health": env.float("ALLOT_MIN_CLUSTER_HEALTH", default=0.5),
    "cpu_per_gpu_reserved": env.float("ALLOT_CPU_PER_GPU_RESERVED", default=4.0),
    "strategy": env.str("ALLOT_STRATEGY", default="binpack"),
}
# The hard depth limit of the queue tree (quotas.selectors.max_tree_depth).
ALLOT_MAX_TREE_DEPTH = env.int("ALLOT_MAX_TREE_DEPTH", default=5)
# Workloads asking for more GPUs or a longer expected duration wait for a lead's approval.
ALLOT_APPROVAL_MAX_GPUS = env.int("ALLOT_APPROVAL_MAX_GPUS", default=32)
ALLOT_APPROVAL_MAX_HOURS = env.float("ALLOT_APPROVAL_MAX_HOURS", default=72.0)
# Seconds an API token's lookup is cached per process (portal.authentication; 0: not cached).
ALLOT_TOKEN_CACHE_S = env.float("ALLOT_TOKEN_CACHE_S", default=10.0)
# Whether a policy whose evaluation fails lets the request through (default: it denies).
ALLOT_POLICY_FAIL_OPEN = env.bool("ALLOT_POLICY_FAIL_OPEN", default=False)
# Seconds between writes of the policies' hit and denial counters (0: after each commit).
ALLOT_POLICY_COUNTS_FLUSH_S = env.float("ALLOT_POLICY_COUNTS_FLUSH_S", default=1.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}
