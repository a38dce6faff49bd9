"""Base settings: every value comes from the environment, with safe local defaults.

The defaults describe the *embedded* mode: SQLite (WAL) + the filesystem Celery broker + a file
cache, so `make run` needs nothing installed. `DATABASE_URL`, `CELERY_BROKER_URL` and
`CACHE_URL` switch to PostgreSQL and Redis/RabbitMQ. `production.py` tightens the rest.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import re
import warnings
from pathlib import Path
from typing import overload

import environ
from django.core.exceptions import ImproperlyConfigured

from config.settings.environment import BASE_DIR, env
from extensions_host.surfaces.rates import parse_rate


def env_path(name: str, default: Path) -> Path:
    """Read a folder setting (unset or empty: `default`; an empty value is not the working
    directory)."""
    raw = env.str(name, default="").strip()
    return Path(raw) if raw else default


VAR_DIR = env_path("HOST_VAR_DIR", BASE_DIR / "var")


@overload
def env_int(name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int: ...
@overload
def env_int(
    name: str, default: None, *, minimum: int = 0, maximum: int | None = None
) -> int | None: ...
def env_int(
    name: str, default: int | None, *, minimum: int = 0, maximum: int | None = None
) -> int | None:
    """Read an integer setting (unset or empty: `default`), raising ImproperlyConfigured with
    the variable's name and its bounds."""
    raw = env.str(name, default="").strip()
    if raw == "":
        return default
    bounds = f">= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer {bounds}, got {raw!r}") from exc
    if value < minimum or (maximum is not None and value > maximum):
        raise ImproperlyConfigured(f"{name} must be an integer {bounds}, got {value}")
    return value


def env_float(name: str, default: float, *, maximum: float) -> float:
    """Read a positive number of seconds (unset or empty: `default`), raising
    ImproperlyConfigured with the variable's name and its bounds."""
    raw = env.str(name, default="").strip()
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    # NaN compares false with everything: test for a finite value explicitly
    if not (math.isfinite(value) and 0 < value <= maximum):
        raise ImproperlyConfigured(f"{name} must be a number > 0 and <= {maximum:g}, got {raw!r}")
    return value


def env_rate(name: str, default: str) -> str:
    """Read a rate like `600/min` (or `off`), normalised, raising ImproperlyConfigured with the
    variable's name and the accepted format."""
    value = env.str(name, default="").strip().lower() or default
    try:
        parse_rate(value)
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"{name} must be <count>/<s|sec|second|m|min|minute|h|hour|d|day> (like 600/min) "
            f"or off, got {value!r}"
        ) from exc
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = env.str(name, default="")
    if raw == "":
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(
        f"{name} must be true or false (also 1/0, yes/no, on/off), got {raw!r}"
    )


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """Read a setting that takes one of a few words, raising ImproperlyConfigured with the
    variable's name, the words and the value."""
    value = env.str(name, default=default)
    if value not in choices:
        words = " or ".join(repr(choice) for choice in choices)
        raise ImproperlyConfigured(f"{name} must be {words}, got {value!r}")
    return value


_URL_SCHEME_RE = re.compile(r"\A([A-Za-z][A-Za-z0-9+.-]*)://")


def url_scheme(raw: str) -> str:
    """The scheme of a `<scheme>://…` URL, lowercased; "" when the value has none.

    Every URL setting needs the `://`: without it the URL parsers read something else than was
    meant (`redis:/x` a Unix socket, `postgres:/host/db` a database named after a path,
    `rediss//host` no scheme at all)."""
    match = _URL_SCHEME_RE.match(raw)
    return match.group(1).lower() if match else ""


def shown_scheme(raw: str) -> str:
    """What an error message shows of a URL setting: its scheme only, never the rest of the
    URL (which may hold a password)."""
    scheme = url_scheme(raw)
    return f"{scheme}://" if scheme else "a value without <scheme>://"


# --- Core Django -------------------------------------------------------------------------------

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env.str("SECRET_KEY", default="insecure-local-development-key-change-me-0123456789")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "corsheaders",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served from here (no CDN)
    "core",
    "conversations",
    "extensions_host",
    "extensions_host.contributions",
    "extensions_host.background",
    "extensions_host.surfaces",
    "artifacts",
    "inspector",
]

MIDDLEWARE = [
    "core.middleware.RequestIdMiddleware",
    "core.middleware.BodyLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "corsheaders.middleware.CorsMiddleware",
    # after the security and CORS headers (its 400 carries them), before anything reads a query
    "core.middleware.QueryStringMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Body limits are enforced per path by core.middleware.BodyLimitMiddleware before parsing.
DATA_UPLOAD_MAX_MEMORY_SIZE = None

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

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
            ],
        },
    },
]

# --- Database ----------------------------------------------------------------------------------
# Embedded default: SQLite in WAL mode with a busy timeout, IMMEDIATE transactions so writers
# queue on the lock instead of failing on upgrade.

DATABASE_ENGINES = {"django.db.backends.sqlite3", "django.db.backends.postgresql"}


def env_database(name: str, default: str) -> dict:
    """Read a database URL (unset or empty: `default`): SQLite or PostgreSQL, raising
    ImproperlyConfigured with the variable's name (and only the URL's scheme: no password)."""
    raw = env.str(name, default="").strip() or default
    accepts = f"{name} must be sqlite:///<path> or postgres://user@host:port/name"
    if not url_scheme(raw):
        raise ImproperlyConfigured(f"{accepts}, got {shown_scheme(raw)}")
    try:
        with warnings.catch_warnings():  # its "not recognized" warning echoes the whole URL
            warnings.simplefilter("ignore")
            config = environ.Env.db_url_config(raw)
    except ValueError as exc:  # a port that is not a number, …
        raise ImproperlyConfigured(f"{accepts}: {exc}") from exc
    if config.get("ENGINE") not in DATABASE_ENGINES:
        raise ImproperlyConfigured(f"{accepts}, got {shown_scheme(raw)}")
    return config


DATABASES = {"default": env_database("DATABASE_URL", f"sqlite:///{VAR_DIR / 'hyphae.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # a fresh clone has no var/ yet: SQLite cannot create its file without the folder
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
else:
    # The ASGI process (config/asgi.py names itself in HYPHAE_PROCESS) pools, as Django advises
    # for ASGI: Django's psycopg pool of at most DATABASE_POOL_SIZE connections, shared by its
    # threads, in place of persistent connections, so an event stream holds one only while it
    # reads. No other process pools: a sync worker serves one request or task at a time, and a
    # prefork Celery worker (or a preloaded gunicorn) would share the pool's sockets across forks.
    _pool_size = env_int("DATABASE_POOL_SIZE", 8, maximum=1000)  # checked in every process
    DATABASE_POOL_SIZE = _pool_size if env.str("HYPHAE_PROCESS", default="") == "asgi" else 0
    if DATABASE_POOL_SIZE:
        DATABASES["default"]["CONN_MAX_AGE"] = 0
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": DATABASE_POOL_SIZE,
            "timeout": 5,  # waiting for a free connection, or for the database to come back
        }
    else:
        DATABASES["default"].setdefault("CONN_MAX_AGE", env_int("CONN_MAX_AGE", 60))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
ATOMIC_REQUESTS = False  # transactions belong to services
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache -------------------------------------------------------------------------------------
# A file cache shared by the embedded processes; Redis in production (CACHE_URL=redis://…).


def env_cache(name: str, default: str) -> dict:
    """Read a cache URL (unset or empty: `default`), raising ImproperlyConfigured with the
    variable's name (and only the URL's scheme: no password)."""
    raw = env.str(name, default="").strip() or default
    accepts = (
        f"{name} must be redis://host:port/db, rediss://…, filecache:///<path>, locmemcache:// "
        f"or another django-environ cache URL"
    )
    if not url_scheme(raw):
        raise ImproperlyConfigured(f"{accepts}, got {shown_scheme(raw)}")
    try:
        return environ.Env.cache_url_config(raw)
    except (ImproperlyConfigured, ValueError):  # an unknown scheme, a bad port, …
        # not chained: the parser's message may quote the URL, password included
        raise ImproperlyConfigured(f"{accepts}, got {shown_scheme(raw)}") from None


CACHES = {"default": env_cache("CACHE_URL", f"filecache://{VAR_DIR / 'cache'}")}
if CACHES["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache":
    # a Redis that accepts connections but never answers must not hang a request, a sweep or
    # beat's scheduling (beat writes its liveness mark here): its calls fail after this long
    _redis_options = CACHES["default"].setdefault("OPTIONS", {})
    _redis_options.setdefault("socket_connect_timeout", 2)
    _redis_options.setdefault("socket_timeout", 5)
# `save=none` artifact payloads (artifacts/ephemeral.py): never on disk, gone after a restart
# (spec 06). So local memory when the cache is the embedded file cache (the web process is the
# only one that writes or reads them: emit, projection, inspector, admin), else that cache.
CACHES["artifacts"] = (
    {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "hyphae-artifacts"}
    if CACHES["default"]["BACKEND"] == "django.core.cache.backends.filebased.FileBasedCache"
    else dict(CACHES["default"])
)

# --- Auth and i18n -----------------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/admin/login/"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

# --- Host settings (documented in README's settings table) -------------------------------------

HOST_AUTH = env_choice("HOST_AUTH", "on", ("on", "none"))
HOST_API_TOKEN = [t for t in env.list("HOST_API_TOKEN", default=[]) if t]
HOST_PROXY_AUTH = env_bool("HOST_PROXY_AUTH", False)
try:
    HOST_TRUSTED_PROXIES = [
        ipaddress.ip_network(n, strict=False) for n in env.list("HOST_TRUSTED_PROXIES", default=[])
    ]
except ValueError as exc:
    raise ImproperlyConfigured(f"HOST_TRUSTED_PROXIES: {exc}") from exc
HOST_PROXY_ADMIN_GROUP = env.str("HOST_PROXY_ADMIN_GROUP", default="admin")
HOST_AUTO_ADMIT = env_bool("HOST_AUTO_ADMIT", True)
HOST_EXTENSIONS = env.list("HOST_EXTENSIONS", default=[])
# Each web/worker process syncs the roster at start (deploys also run `manage.py sync_roster`).
HOST_SYNC_AT_START = env_bool("HOST_SYNC_AT_START", True)
HOST_PUBLIC_URL = env.str("HOST_PUBLIC_URL", default="").strip()
if HOST_PUBLIC_URL and url_scheme(HOST_PUBLIC_URL) not in {"http", "https"}:
    raise ImproperlyConfigured(
        f"HOST_PUBLIC_URL must be an http:// or https:// URL, got {HOST_PUBLIC_URL!r}"
    )
HOST_DATA_DIR = env_path("HOST_DATA_DIR", VAR_DIR / "data")
HOST_MAX_BODY_BYTES = env_int("HOST_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
HOST_CORS_ORIGINS = env.list("HOST_CORS_ORIGINS", default=[])
# Per-principal write rate ("600/min"; "off" disables), DRF's throttle rate below.
HOST_WRITE_RATE = env_rate("HOST_WRITE_RATE", "600/min")
AGENT_RUNTIME = env_choice("AGENT_RUNTIME", "echo", ("echo", "external"))
IDLE_AFTER_SECONDS = env_int("IDLE_AFTER_SECONDS", 900, minimum=1)
RUN_LEASE_SECONDS = env_int("RUN_LEASE_SECONDS", 300, minimum=1)
# Unset: keep archived conversations forever. 0 would make the daily sweep delete every one.
RETENTION_DAYS = env_int("RETENTION_DAYS", None, minimum=1)
# Beat itself writes its liveness mark every BEAT_MARK_SECONDS (core/beat.py), whatever
# CELERY_BEAT_INTERVAL_SECONDS is; /readyz fails once the mark is older than BEAT_STALE_SECONDS.
# Below three marks' interval, one slow tick (or a little clock skew between machines) would
# make every web process flap between ready and not ready: such a value is refused.
BEAT_MARK_SECONDS = 5
BEAT_STALE_SECONDS = env_int("BEAT_STALE_SECONDS", 60, minimum=3 * BEAT_MARK_SECONDS)

CORS_ALLOWED_ORIGINS = HOST_CORS_ORIGINS
CORS_ALLOW_CREDENTIALS = False

# --- Django REST framework and the OpenAPI schema ----------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "core.auth.ServiceTokenAuthentication",
        "core.auth.ApiTokenAuthentication",
        "core.auth.ProxyAuthentication",
        "core.auth.SessionPrincipalAuthentication",
        "core.auth.NoAuthDevelopmentAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["core.permissions.DenyAll"],
    "DEFAULT_PARSER_CLASSES": ["core.parsers.HostJSONParser"],
    "DEFAULT_THROTTLE_CLASSES": ["core.throttling.WriteRateThrottle"],
    "DEFAULT_RENDERER_CLASSES": ["core.renderers.HostJSONRenderer"],
    "DEFAULT_SCHEMA_CLASS": "core.schema.HostAutoSchema",
    "EXCEPTION_HANDLER": "core.errors.exception_handler",
    # DRF reads a None rate as "not throttled"
    "DEFAULT_THROTTLE_RATES": {"writes": HOST_WRITE_RATE if parse_rate(HOST_WRITE_RATE) else None},
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Hyphae API",
    "DESCRIPTION": "A durable extension host for AI-agent conversation platforms.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": "/v1",
    # /v1/docs: Swagger UI from our own static files, its script a separate request (no inline
    # script), so the docs work offline and under the same Content-Security-Policy as every page
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # the live event stream (an SSE response DRF can't describe) is added to the schema by hand
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "extensions_host.surfaces.schema.add_event_stream",
    ],
    # Several models have a `status` with its own choice set: name each enum instead of letting
    # drf-spectacular invent hashed names (and warn).
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "conversations.models.RunStatus",
        "OutcomeStatusEnum": "conversations.models.Outcome",
        "SubmissionStatusEnum": "conversations.models.SubmissionStatus",
        "ExtensionStatusEnum": "extensions_host.models.ExtensionStatus",
        "InteractionStatusEnum": "extensions_host.surfaces.models.InteractionStatus",
        # extension health and notifier health in /v1/meta
        "HealthStatusEnum": [("ok", "ok"), ("degraded", "degraded")],
    },
}

# --- Celery ------------------------------------------------------------------------------------
# Embedded default: the filesystem broker (one machine; polls about once a second; no
# redelivery of a task whose worker crashed). Redis or RabbitMQ give every guarantee.
# Every process makes the broker's folders itself, so `migrate` + `runserver` work without
# `bootstrap`; a missing folder would fail every enqueue after commit. The (empty) static root
# too: whitenoise warns on every start without it, and only production runs `collectstatic`.

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
for _url in CELERY_BROKER_URL.split(";"):  # `;` separates failover URLs
    if not url_scheme(_url.strip()):
        raise ImproperlyConfigured(
            f"CELERY_BROKER_URL must be <scheme>://… (filesystem://, redis://host:port/db, "
            f"amqp://…), got {shown_scheme(_url.strip())}"
        )
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
if CELERY_BROKER_URL.startswith("filesystem"):
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
    for _folder in (_broker_dir / "queue", _broker_dir / "processed", _broker_dir / "control"):
        _folder.mkdir(parents=True, exist_ok=True)
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
elif CELERY_BROKER_URL.startswith("redis"):
    # Precise timer wakes are scheduled at most HOST_WAKE_HORIZON_SECONDS ahead; the visibility
    # timeout must stay well above that so an eta task is never redelivered early.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# One task reserved per process on a real broker: a long task never holds others back. The
# filesystem broker has no event loop: the worker applies late acks between 2-second waits for
# messages, so one reserved task per process would cap it at about one task a second, slower
# than beat's sweeps arrive (measured: 100 queued tasks took 92 s; with 16, under a second).
CELERY_WORKER_PREFETCH_MULTIPLIER = 16 if CELERY_BROKER_URL.startswith("filesystem") else 1
CELERY_TASK_SOFT_TIME_LIMIT = 60
CELERY_TASK_TIME_LIMIT = 90
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"
# The tick of the fast sweeps in config/celery.py's beat schedule (which reads it from here).
CELERY_BEAT_INTERVAL_SECONDS = env_float("CELERY_BEAT_INTERVAL_SECONDS", 1.0, maximum=3600)
# Beat's scheduler writes beat's liveness mark for /readyz (core/beat.py), and keeps its
# schedule file in HOST_VAR_DIR rather than the working directory (`--schedule` still wins).
CELERY_BEAT_SCHEDULER = "core.beat:HostScheduler"
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- Logging -----------------------------------------------------------------------------------

LOG_JSON = env_bool("LOG_JSON", False)
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO").strip().upper()
if LOG_LEVEL not in logging.getLevelNamesMapping():
    raise ImproperlyConfigured(
        f"LOG_LEVEL must be a logging level name (DEBUG, INFO, WARNING, ERROR, CRITICAL), "
        f"got {LOG_LEVEL!r}"
    )
# A worker at `--loglevel INFO` would log two lines per task (received, succeeded): the sweeps
# run every second. Their failures are WARNING or ERROR and stay; so does the worker's "ready"
# line (`celery.apps.worker`). LOG_LEVEL=DEBUG shows them again.
_CELERY_ROUTINE_LEVEL = "DEBUG" if LOG_LEVEL == "DEBUG" else "WARNING"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_id": {"()": "core.logging.RequestIdFilter"},
        "expected_errors": {"()": "core.logging.ExpectedErrorFilter"},
    },
    "formatters": {
        # the record's `extra` fields follow the message as key=value (core.logging)
        "plain": {
            "()": "core.logging.PlainFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s",
        },
        "json": {"()": "core.logging.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["request_id"],
            "formatter": "json" if LOG_JSON else "plain",
        },
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # expected states are warnings, not errors: a 503 answering a HostError (a stopped
        # extension, a store unavailable), a request for a host not in ALLOWED_HOSTS
        "django.request": {"filters": ["expected_errors"]},
        "django.security.DisallowedHost": {"filters": ["expected_errors"]},
        "celery.app.trace": {"level": _CELERY_ROUTINE_LEVEL},
        "celery.worker.strategy": {"level": _CELERY_ROUTINE_LEVEL},
    },
}

# --- conversations: OpenAPI enum names ----------------------------------------------------------

# --- Extension host: hook deadlines, retries, auto-resume, quotas (spec 02 §1, §7) -------------
# Hook deadlines: 5 s in a request, 30 s in a worker (an extension may override, up to 300 s).
HOST_HOOK_DEADLINE_REQUEST_MS = env_int(
    "HOST_HOOK_DEADLINE_REQUEST_MS", 5_000, minimum=1, maximum=300_000
)
HOST_HOOK_DEADLINE_WORKER_MS = env_int(
    "HOST_HOOK_DEADLINE_WORKER_MS", 30_000, minimum=1, maximum=300_000
)
# How many `Retry`s one item may ask for before it counts as a defect.
HOST_RETRY_LIMIT = env_int("HOST_RETRY_LIMIT", 10, minimum=1)
# Auto-resume after 1, 5, 30 minutes (3 attempts); staff can also turn it off per extension.
HOST_AUTO_RESUME = env_bool("HOST_AUTO_RESUME", True)
# Per-extension quotas; staff may override each per extension in the admin.
HOST_QUOTAS = {
    "max_records": env_int("HOST_QUOTA_MAX_RECORDS", 100_000, minimum=1),
    "max_bytes": env_int("HOST_QUOTA_MAX_BYTES", 256 * 1024 * 1024, minimum=1),
    "max_timers": env_int("HOST_QUOTA_MAX_TIMERS", 10_000, minimum=1),
    "max_attention": env_int("HOST_QUOTA_MAX_ATTENTION", 1_024, minimum=1),
}

# --- Extension surfaces: send rate, live event stream (spec 04, spec 01 live updates) ----------
# Per-extension rate of `ctx.send` ("600/min"; "off" disables): over it → AdmissionError(throttled).
HOST_SEND_RATE = env_rate("HOST_SEND_RATE", "600/min")
# The SSE stream (served by `uvicorn config.asgi`): poll interval without / with the PostgreSQL
# LISTEN/NOTIFY wake-up hint, keep-alive comment interval, lifetime before the client
# reconnects with Last-Event-ID, and the reconnect delay suggested to clients.
HOST_SSE_POLL_SECONDS = env_float("HOST_SSE_POLL_SECONDS", 0.5, maximum=60)
HOST_SSE_POLL_HINTED_SECONDS = env_float("HOST_SSE_POLL_HINTED_SECONDS", 1.0, maximum=60)
HOST_SSE_KEEPALIVE_SECONDS = env_float("HOST_SSE_KEEPALIVE_SECONDS", 15.0, maximum=3600)
HOST_SSE_LIFETIME_SECONDS = env_float("HOST_SSE_LIFETIME_SECONDS", 300.0, maximum=86400)
HOST_SSE_RETRY_MS = env_int("HOST_SSE_RETRY_MS", 1000, minimum=100)

# --- Background work: timers, settled delivery, lifecycle outbox, jobs (spec 03) ---------------
# Precise timer wakes are scheduled (Celery eta) at most this far ahead; it must stay well below
# the broker's visibility timeout, or an eta task could be redelivered before it is due.
HOST_WAKE_HORIZON_SECONDS = env_int("HOST_WAKE_HORIZON_SECONDS", 60, minimum=1)
_VISIBILITY_TIMEOUT = CELERY_BROKER_TRANSPORT_OPTIONS.get("visibility_timeout", 3600)
if _VISIBILITY_TIMEOUT <= HOST_WAKE_HORIZON_SECONDS:
    raise ImproperlyConfigured(
        f"HOST_WAKE_HORIZON_SECONDS must be below the broker's visibility timeout "
        f"({_VISIBILITY_TIMEOUT} s), got {HOST_WAKE_HORIZON_SECONDS}"
    )
# How long one sweep task keeps taking pages before it re-enqueues itself.
HOST_SWEEP_BUDGET_SECONDS = env_int("HOST_SWEEP_BUDGET_SECONDS", 5, minimum=1, maximum=60)
# A sweep task starts pages for its budget, and its last page runs at most 300 s: every frame
# has its hook's whole deadline (up to 300 s per extension, spec 02 §1), never cut by the page
# (services/common.page_budget). The task must end before its soft time limit (`SWEEP_LIMITS`
# in extensions_host/background/tasks.py is built from this value), with headroom for the
# page's commit and the re-enqueue: a soft time limit inside a hook would read as the hook
# overrunning its deadline.
_SWEEP_PAGE_MAX_SECONDS = 300
_SWEEP_HEADROOM_SECONDS = 15
HOST_SWEEP_SOFT_TIME_LIMIT_SECONDS = (
    HOST_SWEEP_BUDGET_SECONDS + _SWEEP_PAGE_MAX_SECONDS + _SWEEP_HEADROOM_SECONDS
)
# A timer sweep that fired timers waits for the next one when it falls due within this many
# milliseconds (within its budget) instead of handing over to a new wake task (0: never).
HOST_TIMER_PUMP_MS = env_int("HOST_TIMER_PUMP_MS", 250, minimum=0)
# Settled runs per `on_settled` batch.
HOST_SETTLED_BATCH = env_int("HOST_SETTLED_BATCH", 64, minimum=1)
# A job instant older than this when the sweep sees it counts as missed (not run late).
HOST_JOB_MISFIRE_GRACE_SECONDS = env_int("HOST_JOB_MISFIRE_GRACE_SECONDS", 60, minimum=1)

# --- Extension contributions: stores, notifiers, providers, web UI, metrics, CSP (spec 05) ------
# Secrets are encrypted with a key derived from HOST_SECRET_KEY (default: SECRET_KEY). To rotate,
# set the new HOST_SECRET_KEY, list the previous value(s) in HOST_SECRET_KEYS_OLD (they still
# decrypt) and restart every process, then run `manage.py secrets_reencrypt`, drop the old
# values and restart again (docs/operating.md).
HOST_SECRET_KEY = env.str("HOST_SECRET_KEY", default="")
HOST_SECRET_KEYS_OLD = [k for k in env.list("HOST_SECRET_KEYS_OLD", default=[]) if k]
# The default model for the agent runtime; unset: the last provider proposing one wins.
HOST_DEFAULT_MODEL = env.str("HOST_DEFAULT_MODEL", default="")
# The web UI bundle served at /ui/ (by name); an unknown name is a startup error.
HOST_WEBUI_BUNDLE = env.str("HOST_WEBUI_BUNDLE", default="")
# Notifier delivery: attempts per notification (then the notifier is reported degraded),
# exponential backoff base and cap. (One notify() call has the deadline of every hook run in a
# worker: the notifier's or the extension's deadline_s, else HOST_HOOK_DEADLINE_WORKER_MS.)
HOST_NOTIFY_MAX_ATTEMPTS = env_int("HOST_NOTIFY_MAX_ATTEMPTS", 5, minimum=1)
HOST_NOTIFY_BACKOFF_SECONDS = env_int("HOST_NOTIFY_BACKOFF_SECONDS", 10, minimum=1)
HOST_NOTIFY_BACKOFF_MAX_SECONDS = env_int("HOST_NOTIFY_BACKOFF_MAX_SECONDS", 3600, minimum=1)
# Notifications whose every delivery is finished (delivered, failed, skipped) are deleted by
# the hourly prune once older than this many days; one with a delivery still due is kept.
HOST_NOTIFICATION_RETENTION_DAYS = env_int("HOST_NOTIFICATION_RETENTION_DAYS", 30, minimum=1)
# Audit entries of extension host-API calls (`host.*`): unset keeps them forever (spec 05 has
# every call attributed); N deletes those older than N days daily. Staff actions, stops and
# auto-resumes are never pruned.
HOST_AUDIT_HOST_CALLS_RETENTION_DAYS = env_int(
    "HOST_AUDIT_HOST_CALLS_RETENTION_DAYS", None, minimum=1
)
# How often ctx.host.conversations.watch polls a conversation's version.
HOST_WATCH_POLL_SECONDS = env_float("HOST_WATCH_POLL_SECONDS", 0.1, maximum=10)
# /metrics: a bearer token, and/or the networks allowed without one (loopback by default; set
# it empty behind a reverse proxy on the same machine, where every caller looks local).
HOST_METRICS_TOKEN = env.str("HOST_METRICS_TOKEN", default="")
try:
    HOST_METRICS_NETWORKS = [
        ipaddress.ip_network(n, strict=False)
        for n in env.list("HOST_METRICS_NETWORKS", default=["127.0.0.0/8", "::1/128"])
        if n
    ]
except ValueError as exc:
    raise ImproperlyConfigured(f"HOST_METRICS_NETWORKS: {exc}") from exc
# prometheus_client's multiprocess mode reads it from the environment: a folder that does not
# exist fails every request (no histogram can be written), so the start is refused instead.
PROMETHEUS_MULTIPROC_DIR = env.str("PROMETHEUS_MULTIPROC_DIR", default="")
if PROMETHEUS_MULTIPROC_DIR and not Path(PROMETHEUS_MULTIPROC_DIR).is_dir():
    raise ImproperlyConfigured(
        "PROMETHEUS_MULTIPROC_DIR must be an existing folder (create it before the processes "
        f"start), got {PROMETHEUS_MULTIPROC_DIR!r}"
    )
# Request durations for /metrics; a strict Content-Security-Policy (django-csp) on every
# response, since pages render model- and extension-produced content: scripts only from this
# origin (never inline), nothing framed, no plugins. Inline style attributes stay allowed (the
# admin uses them; styles cannot run code). The Swagger UI at /v1/docs is served from here too.
MIDDLEWARE.append("extensions_host.contributions.metrics.MetricsMiddleware")
MIDDLEWARE.append("csp.middleware.CSPMiddleware")
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    },
}
