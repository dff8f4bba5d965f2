"""Settings for Allot, read from the environment (django-environ) with safe local defaults.

Local default: SQLite under var/, DEBUG on, a development secret key. Production
(`ALLOT_ENV=production`) fails fast without SECRET_KEY and defaults to secure transport: HTTPS
redirect, HSTS, Secure cookies (each overridable; docs/deployment.md). DEBUG off alone needs a
SECRET_KEY too, but keeps plain HTTP (a benchmark or a local run on loopback).
"""

from pathlib import Path

import environ
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from portal.sso import mapping as sso_mapping

BASE_DIR = Path(__file__).resolve().parent.parent
# Local state (the SQLite database, file locks, the filesystem broker): made by scripts/run.sh,
# and by the code that writes there, never on import.
VAR_DIR = BASE_DIR / "var"

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False) if (BASE_DIR / ".env").exists() else None

# `production` turns DEBUG off and the transport security below on by default.
ALLOT_ENV = env.str("ALLOT_ENV", default="development")
if ALLOT_ENV not in ("development", "production"):
    raise ImproperlyConfigured(f"ALLOT_ENV={ALLOT_ENV!r}: development or production")
DEBUG = env.bool("DEBUG", default=ALLOT_ENV != "production")
_SECURE = ALLOT_ENV == "production"
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    if _SECURE or not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set in production (or when DEBUG is off)")
    SECRET_KEY = "allot-local-development-only-not-a-secret"
# Earlier keys, still accepted for what they signed (sessions, password reset links) while
# SECRET_KEY is rotated; new signatures use SECRET_KEY only (docs/operations.md).
SECRET_KEY_FALLBACKS = env.list("SECRET_KEY_FALLBACKS", default=[])

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# Transport security (django.middleware.security): on by default in production, each one
# overridable. Behind a proxy that terminates TLS, SECURE_PROXY_SSL_HEADER names the header it
# sets, e.g. "HTTP_X_FORWARDED_PROTO,https" (only if the proxy always sets or strips it).
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=_SECURE)
SECURE_REDIRECT_EXEMPT = env.list("SECURE_REDIRECT_EXEMPT", default=[])
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000 if _SECURE else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=_SECURE)
# The header's `preload` only consents to the browsers' preload list: nothing is submitted.
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=_SECURE)
_PROXY_SSL_HEADER = env.list("SECURE_PROXY_SSL_HEADER", default=[])
if _PROXY_SSL_HEADER and len(_PROXY_SSL_HEADER) != 2:
    raise ImproperlyConfigured(
        f"SECURE_PROXY_SSL_HEADER={_PROXY_SSL_HEADER!r}: a header and its value, "
        "e.g. HTTP_X_FORWARDED_PROTO,https")
SECURE_PROXY_SSL_HEADER = tuple(_PROXY_SSL_HEADER) if _PROXY_SSL_HEADER else None
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=_SECURE)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=_SECURE)

# Content-Security-Policy (django-csp): scripts, styles, images, fonts and requests from this
# site only, as the pages are built (vendored htmx and plotly, no inline script). Styles allow
# inline: the pages draw bars with style attributes, and plotly and htmx add style elements.
# ALLOT_CSP: enforce (default), report-only (the browser only reports), off.
ALLOT_CSP = env.str("ALLOT_CSP", default="enforce")
if ALLOT_CSP not in ("enforce", "report-only", "off"):
    raise ImproperlyConfigured(f"ALLOT_CSP={ALLOT_CSP!r}: enforce, report-only or off")
_CSP_DIRECTIVES: dict[str, list[str] | str] = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:"],
    "font-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
if env.str("ALLOT_CSP_REPORT_URI", default=""):
    _CSP_DIRECTIVES["report-uri"] = env.str("ALLOT_CSP_REPORT_URI")
if ALLOT_CSP == "enforce":
    CONTENT_SECURITY_POLICY = {"DIRECTIVES": _CSP_DIRECTIVES}
elif ALLOT_CSP == "report-only":
    CONTENT_SECURITY_POLICY_REPORT_ONLY = {"DIRECTIVES": _CSP_DIRECTIVES}

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
    "csp",
    "portal",
    "quotas",
    "policies",
    "quotas.capacity",
    "scheduling",
    "scheduling.backends.simulated",
    "billing",
]

MIDDLEWARE = [
    # /healthz and /readyz, answered before the HTTPS redirect, the host check and sign-in
    # (a probe speaks plain HTTP to the pod's address: portal/health.py).
    "portal.health.HealthMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # The collected static files (STATIC_ROOT), served by each web process (WhiteNoise).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # The user's own time zone for the pages' dates and times (portal/timezones.py).
    "portal.timezones.UserTimeZoneMiddleware",
    # Change history (core/history.py): who (the request's user) and by which path.
    "simple_history.middleware.HistoryRequestMiddleware",
    "core.history.HistorySourceMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, so it sees a view's exception first: a database outage is a 503 with Retry-After
    # on every path, and every error under /api/ is JSON (portal/errors.py).
    "portal.errors.ErrorMiddleware",
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
                "portal.context_processors.approvals_badge",
                "portal.context_processors.live_poll",
                "portal.context_processors.notifications_bell",
                "portal.context_processors.planner_links",
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
else:
    # SQLite ignores an index's INCLUDE columns (the pending-head index's `gpus_total`): the
    # index still serves, the position reads the heap for the sum.
    SILENCED_SYSTEM_CHECKS = ["models.W040"]
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # `make run`: the portal and the embedded worker write one file from two processes. A
    # transaction that read first and then writes could not wait for the other's write lock
    # ("database is locked" at once, the cycle failed): every transaction takes the write lock
    # as it begins, waiting up to 20 s, and readers never wait for writers (WAL).
    DATABASES["default"].setdefault("OPTIONS", {}).update({
        "transaction_mode": "IMMEDIATE", "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"})

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The cache (the sign-in limit's counters): Redis shared by every process when CACHE_URL (any
# django-environ cache URL) or REDIS_URL is set; otherwise memory of each process, enough for
# one process (`make run`), not for several (each would count failures on its own).
_CACHE_URL = env.str("CACHE_URL", default="") or env.str("REDIS_URL", default="")
CACHES = {"default": env.cache_url_config(_CACHE_URL) if _CACHE_URL else {
    "BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Single sign-on (docs/sso.md): OpenID Connect, an LDAP directory, or both; local passwords may
# be turned off. Groups (OIDC's groups claim, LDAP's groups) name teams and roles: each entry
# `GROUP=TEAM[:ROLE]` (role researcher or lead), entries separated by `;` or new lines; the
# teams named there are kept in step with the groups at each sign-in, others are left alone.
# Members of ALLOT_SSO_ADMIN_GROUPS are platform admins (staff and superuser); when it is set,
# each sign-in grants or takes away those flags.
ALLOT_LOCAL_PASSWORDS = env.bool("ALLOT_LOCAL_PASSWORDS", default=True)
ALLOT_SSO_GROUP_TEAMS = sso_mapping.parse_group_teams(
    env.str("ALLOT_SSO_GROUP_TEAMS", default=""), "ALLOT_SSO_GROUP_TEAMS")
ALLOT_SSO_ADMIN_GROUPS = sso_mapping.parse_groups(env.str("ALLOT_SSO_ADMIN_GROUPS", default=""))

# OpenID Connect (mozilla-django-oidc, portal/sso/oidc.py): on when a client id is set. The
# endpoints come from the issuer's discovery document unless given.
ALLOT_OIDC_ISSUER = env.str("ALLOT_OIDC_ISSUER", default="").rstrip("/")
ALLOT_OIDC_NAME = env.str("ALLOT_OIDC_NAME", default="single sign-on")
ALLOT_OIDC_ENDPOINTS = {
    name: env.str(f"ALLOT_OIDC_{name.upper()}", default="")
    for name in ("authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri")}
ALLOT_OIDC_USERNAME_CLAIM = env.str("ALLOT_OIDC_USERNAME_CLAIM", default="preferred_username")
ALLOT_OIDC_GROUPS_CLAIM = env.str("ALLOT_OIDC_GROUPS_CLAIM", default="groups")
OIDC_RP_CLIENT_ID = env.str("ALLOT_OIDC_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env.str("ALLOT_OIDC_CLIENT_SECRET", default="")
OIDC_RP_SCOPES = env.str("ALLOT_OIDC_SCOPES", default="openid email profile")
OIDC_RP_SIGN_ALGO = env.str("ALLOT_OIDC_SIGN_ALGO", default="RS256")
_OIDC_CLIENT_AUTH = env.str("ALLOT_OIDC_CLIENT_AUTH", default="client_secret_post")
if _OIDC_CLIENT_AUTH not in ("client_secret_post", "client_secret_basic"):
    raise ImproperlyConfigured(f"ALLOT_OIDC_CLIENT_AUTH={_OIDC_CLIENT_AUTH!r}: "
                               "client_secret_post or client_secret_basic")
OIDC_TOKEN_USE_BASIC_AUTH = _OIDC_CLIENT_AUTH == "client_secret_basic"
OIDC_TIMEOUT = env.float("ALLOT_OIDC_TIMEOUT_S", default=10.0)
OIDC_USE_PKCE = True
OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = 15 * 60
if OIDC_RP_CLIENT_ID and not ALLOT_OIDC_ISSUER:
    raise ImproperlyConfigured(
        "ALLOT_OIDC_CLIENT_ID is set but ALLOT_OIDC_ISSUER is not: every ID token is checked "
        "against the issuer, and its discovery document names the endpoints not given")

# An LDAP directory (django-auth-ldap, portal/sso/ldap.py): on when a server URI is set.
ALLOT_LDAP_SERVER_URI = env.str("ALLOT_LDAP_SERVER_URI", default="")
if ALLOT_LDAP_SERVER_URI:
    from portal.sso.ldap_settings import ldap_settings

    globals().update(ldap_settings(env))

# Who may sign in with a password: local accounts (Django's hashes) unless turned off, and the
# LDAP directory; then OpenID Connect. Each password way refuses a username or address with
# too many failed sign-ins (portal/login_limits.py): the admin's sign-in too.
AUTHENTICATION_BACKENDS = [
    *(["portal.login_limits.LimitedModelBackend"] if ALLOT_LOCAL_PASSWORDS else []),
    *(["portal.sso.ldap.LimitedLDAPBackend"] if ALLOT_LDAP_SERVER_URI else []),
    *(["portal.sso.oidc.OidcBackend"] if OIDC_RP_CLIENT_ID else []),
]
if not AUTHENTICATION_BACKENDS:
    raise ImproperlyConfigured(
        "ALLOT_LOCAL_PASSWORDS=false with neither ALLOT_OIDC_CLIENT_ID nor "
        "ALLOT_LDAP_SERVER_URI set: nobody could sign in")

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
# collectstatic also writes a gzip copy of each file, which WhiteNoise serves to browsers that
# accept it (plotly-basic.min.js: 1.2 MB, 0.4 MB gzipped). Names are not hashed, so the pages
# need no manifest and WhiteNoise lets browsers cache a file for 60 s (WHITENOISE_MAX_AGE).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

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
    "DEFAULT_PAGINATION_CLASS": "portal.pagination.PageNumberWithSize",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "portal.api_errors.exception_handler",
    # DRF's parsers with limits: JSON nested at most 64 levels, no NUL characters (PostgreSQL
    # stores none); a body over DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) is a 413.
    "DEFAULT_PARSER_CLASSES": [
        "portal.parsers.JSONParser",
        "portal.parsers.FormParser",
        "portal.parsers.MultiPartParser",
    ],
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
    # Choice sets that share a field name get names of their own (not "State953Enum").
    "ENUM_NAME_OVERRIDES": {
        "QuotaResourceEnum": "quotas.models.Resource",
        "CapacityRequestStateEnum": "quotas.capacity.models.CapacityRequestState",
    },
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
# With the watch on (ALLOT_WATCH), the periodic sync is its resync, catching what a watch
# missed: every 10 s (a full sync of three busy clusters every 2 s cost a tenth of a core).
# Without the watch it is how changes arrive: every 2 s.
_WATCH = env.bool("ALLOT_WATCH", default=True)
_SYNC_S = env.float("ALLOT_SYNC_INTERVAL_S", default=10.0 if _WATCH else 2.0)
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
                            "options": {"expires": 120.0}},
    # Objects left on the clusters by workloads gone or ended (scheduling/fleet/orphans.py).
    "scheduling-orphans": {"task": "scheduling.sweep_orphans",
                           "schedule": env.float("ALLOT_ORPHAN_SWEEP_S", default=600.0),
                           "options": {"expires": 600.0}},
    # Delivers the cluster calls of the outbox that are due (each write also nudges it), so a
    # broker outage only delays a delete, a suspend or a dispatch (docs/architecture.md).
    "scheduling-outbox": {"task": "scheduling.outbox_deliver", "schedule": _OUTBOX_S,
                          "options": {"expires": max(1.0, 2 * _OUTBOX_S)}},
    "capacity-process-due": {"task": "capacity.process_due", "schedule": 60.0},
    # Start forecasts of pending work (scheduling/workers/eta.py), stored for pages and the API.
    "scheduling-eta": {"task": "scheduling.eta_refresh",
                       "schedule": env.float("ALLOT_ETA_INTERVAL_S", default=60.0),
                       "options": {"expires": 120.0}},
    # Billing (billing/tasks.py): meter, price and check budgets after each hour; reconcile
    # the previous day and check the ledger; invoice the previous month on the 1st.
    "billing-rollup": {"task": "billing.rollup_recent_hours", "schedule": crontab(minute=5)},
    # Budgets count provisional spend (billed + metered since the last rollup): checked
    # between rollups too, so a threshold reached by work in progress fires within minutes.
    "billing-budgets": {"task": "billing.evaluate_budgets",
                        "schedule": env.float("ALLOT_BUDGET_EVALUATE_S", default=300.0),
                        "options": {"expires": 300.0}},
    "billing-reconcile": {"task": "billing.reconcile_yesterday",
                          "schedule": crontab(hour=2, minute=15)},
    "billing-invoices": {"task": "billing.issue_last_month_invoices",
                         "schedule": crontab(day_of_month=1, hour=3, minute=30)},
    # The ledger check, recorded for /metrics (allot_ledger_verify_ok and its alert).
    "billing-verify": {"task": "billing.verify_ledger", "schedule": crontab(hour=2, minute=45)},
    # Idle interactive sessions warned and stopped from GPU telemetry (scheduling/sessions.py).
    "billing-idle-sessions": {"task": "billing.cull_idle_sessions", "schedule": 60.0,
                              "options": {"expires": 120.0}},
}
# The Prometheus that scrapes dcgm-exporter (empty: no telemetry, every minute is a gap).
ALLOT_PROMETHEUS_URL = env.str("ALLOT_PROMETHEUS_URL", default="")
# The bearer token Prometheus presents to scrape the simulated clusters' DCGM endpoint
# (/sim/<cluster>/metrics); empty: only a logged-in staff user may read it. `make run` makes
# one for the Prometheus it starts.
ALLOT_SIM_METRICS_TOKEN = env.str("ALLOT_SIM_METRICS_TOKEN", default="")
# The bearer token Prometheus presents to scrape Allot's own metrics (/metrics: scheduling,
# billing, clusters; docs/operations.md); empty: only a logged-in staff user may read them.
ALLOT_METRICS_TOKEN = env.str("ALLOT_METRICS_TOKEN", default="")
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
    "watch": _WATCH,
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
    # A cycle asked for by a submission waits this many times the last cycle's duration after
    # it (scheduling/pacing.py): under a storm of submissions the cycle takes at most
    # 1 / (1 + pace) of a core and the portal keeps the rest. 0: no pacing.
    "cycle_pace": env.float("ALLOT_CYCLE_PACE", default=2.0),
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

# Start forecasts (docs/engine.md, "When will it start"): how far ahead the fast-forward looks,
# how many days of finished runs make the run-time history, the run time assumed with no
# history and no hint, the fewest runs a queue needs before its own history is used, and the
# resolution (ends within max(step_s, step_rel x time ahead) taken by one simulated cycle).
ALLOT_ETA = {
    "horizon_s": env.float("ALLOT_ETA_HORIZON_S", default=14 * 86400.0),
    "history_days": env.float("ALLOT_ETA_HISTORY_DAYS", default=30.0),
    "default_run_s": env.float("ALLOT_ETA_DEFAULT_RUN_S", default=3600.0),
    "min_samples": env.int("ALLOT_ETA_MIN_SAMPLES", default=5),
    "step_s": env.float("ALLOT_ETA_STEP_S", default=60.0),
    "step_rel": env.float("ALLOT_ETA_STEP_REL", default=0.02),
    # The request form forecasts on demand while fewer workloads than this wait.
    "preview_max_pending": env.int("ALLOT_ETA_PREVIEW_MAX_PENDING", default=2000),
    # The periodic refresh waits this many times its last duration after it (0: never).
    "pace": env.float("ALLOT_ETA_PACE", default=3.0),
    # Scale a start by how the queue's latest first forecasts came out, when their median
    # ratio actual / forecast wait is outside [1 / band, band] (scheduling/engine/calibration.py;
    # off: on the Philly replay it helps one stretch and not another, docs/engine.md §13). The
    # first forecasts are kept either way.
    "calibrate": env.bool("ALLOT_ETA_CALIBRATE", default=False),
    "calibration_samples": env.int("ALLOT_ETA_CALIBRATION_SAMPLES", default=30),
    "calibration_band": env.float("ALLOT_ETA_CALIBRATION_BAND", default=1.5),
    # The start's rule (docs/engine.md §13): running work's remaining time in the mean-run
    # fast-forward at this conditional quantile, and the levels whose starts enter the start's
    # median with it ("": all of them). Studied, not adopted: 0.5 with "0.5,0.95".
    "start_point": env.float("ALLOT_ETA_START_POINT", default=0.75),
    "start_levels": tuple(float(x) for x in env.list("ALLOT_ETA_START_LEVELS", default=[])),
    # The coming demand taken to be the recent past's: the submissions of the last
    # `arrivals_s` come again, that much later, `arrivals_repeat` times, during the forecast
    # (0: none; at most the `arrivals_max` newest). docs/engine.md §13, "Future arrivals".
    "arrivals_s": env.float("ALLOT_ETA_ARRIVALS_S", default=86400.0),  # LIVE_ARRIVALS_S
    "arrivals_repeat": env.int("ALLOT_ETA_ARRIVALS_REPEAT", default=3),  # LIVE_ARRIVALS_REPEAT
    "arrivals_max": env.int("ALLOT_ETA_ARRIVALS_MAX", default=20000),
    # A start at least this far off moves halfway to the one with the runs ahead at their
    # mean at the median level (0: never, the default: LIVE_LONG_WAIT_S). docs/engine.md §13,
    # "Long waits" and "The kept engine in lockstep".
    "long_wait_s": env.float("ALLOT_ETA_LONG_WAIT_S", default=0.0),
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
# Live pages and widgets (the dashboard, the tree, workload lists and pages) refresh at one
# rate, in seconds; a page stops polling once nothing on it can change.
ALLOT_LIVE_POLL_SECONDS = env.int("ALLOT_LIVE_POLL_SECONDS", default=10)
if ALLOT_LIVE_POLL_SECONDS < 1:
    raise ImproperlyConfigured(
        f"ALLOT_LIVE_POLL_SECONDS must be at least 1 (got {ALLOT_LIVE_POLL_SECONDS})")
# The hard depth limit of the queue tree (quotas.selectors.max_tree_depth).
ALLOT_MAX_TREE_DEPTH = env.int("ALLOT_MAX_TREE_DEPTH", default=5)
# Workloads asking for more GPUs or a longer expected duration wait for a lead's approval.
ALLOT_APPROVAL_MAX_GPUS = env.int("ALLOT_APPROVAL_MAX_GPUS", default=32)
ALLOT_APPROVAL_MAX_HOURS = env.float("ALLOT_APPROVAL_MAX_HOURS", default=72.0)
# The capacity planner's trace uploads (scheduling/planner/): the largest file and the most
# jobs (or a scenario's workloads) one replay takes; each is replayed three times.
ALLOT_PLANNER_MAX_UPLOAD_BYTES = env.int("ALLOT_PLANNER_MAX_UPLOAD_BYTES", default=10_000_000)
ALLOT_PLANNER_MAX_JOBS = env.int("ALLOT_PLANNER_MAX_JOBS", default=20_000)
# Four eyes: how many people other than the requester must approve a held workload or a
# capacity request before it takes effect (nobody approves their own request).
ALLOT_MIN_APPROVERS = env.int("ALLOT_MIN_APPROVERS", default=1)
# API tokens: the lifetime of a new token unless its creator asks for less or more (days), and
# the longest lifetime one may ask for.
ALLOT_API_TOKEN_TTL_DAYS = env.int("ALLOT_API_TOKEN_TTL_DAYS", default=90)
ALLOT_API_TOKEN_MAX_DAYS = env.int("ALLOT_API_TOKEN_MAX_DAYS", default=365)
if not 1 <= ALLOT_API_TOKEN_TTL_DAYS <= ALLOT_API_TOKEN_MAX_DAYS:
    raise ImproperlyConfigured(
        f"ALLOT_API_TOKEN_TTL_DAYS={ALLOT_API_TOKEN_TTL_DAYS} must be between 1 and "
        f"ALLOT_API_TOKEN_MAX_DAYS={ALLOT_API_TOKEN_MAX_DAYS}")
# Failed sign-ins (API and page) allowed per username and per client address within a window
# (portal/login_limits.py); then 429 until the window ends.
ALLOT_LOGIN_FAILURES = env.int("ALLOT_LOGIN_FAILURES", default=10)
ALLOT_LOGIN_WINDOW_S = env.int("ALLOT_LOGIN_WINDOW_S", default=300)
# Behind a proxy, the request header holding the client's address (e.g. HTTP_X_REAL_IP, set by
# the proxy); unset: REMOTE_ADDR.
RATELIMIT_IP_META_KEY = env.str("RATELIMIT_IP_META_KEY", default="") or None
# A cache that cannot count lets sign-ins through (logged) rather than locking everyone out.
RATELIMIT_FAIL_OPEN = True
# Whether a policy whose evaluation fails lets the request through (default: it denies).
ALLOT_POLICY_FAIL_OPEN = env.bool("ALLOT_POLICY_FAIL_OPEN", default=False)
# The time one policy expression may take on a sample request with the current fleet when it
# is saved or tried (policies/checks.py): slower ones are refused (milliseconds).
ALLOT_POLICY_EVAL_BUDGET_MS = env.int("ALLOT_POLICY_EVAL_BUDGET_MS", default=250)
# Seconds between writes of the policies' hit and denial counters (0: after each commit).
ALLOT_POLICY_COUNTS_FLUSH_S = env.float("ALLOT_POLICY_COUNTS_FLUSH_S", default=1.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}
