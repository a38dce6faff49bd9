"""Base settings: every value comes from the environment, with safe local defaults.

The defaults describe the *embedded* mode: SQLite (WAL) + the filesystem Celery broker + a file
cache, so `make run` needs nothing installed. `DATABASE_URL`, `CELERY_BROKER_URL` and
`CACHE_URL` switch to PostgreSQL and Redis/RabbitMQ. `production.py` tightens the rest.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

VAR_DIR = Path(env.str("HOST_VAR_DIR", default=str(BASE_DIR / "var")))


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    """Read an integer setting, raising ImproperlyConfigured with the variable's name."""
    try:
        value = env.int(name, default=default)
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(f"{name} must be an integer") from exc
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be >= {minimum}")
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = env.str(name, default="")
    if raw == "":
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false")


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
    "core",
    "conversations",
    "extensions_host",
    "artifacts",
]

MIDDLEWARE = [
    "core.middleware.RequestIdMiddleware",
    "core.middleware.BodyLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "corsheaders.middleware.CorsMiddleware",
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

DATABASES = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'hyphae.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env_int("CONN_MAX_AGE", 60))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
ATOMIC_REQUESTS = False  # transactions belong to services
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Cache -------------------------------------------------------------------------------------
# A file cache shared by the embedded processes; Redis in production (CACHE_URL=redis://…).

CACHES = {
    "default": env.cache_url("CACHE_URL", default=f"filecache://{VAR_DIR / 'cache'}"),
}

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

HOST_AUTH = env.str("HOST_AUTH", default="on")
if HOST_AUTH not in {"on", "none"}:
    raise ImproperlyConfigured("HOST_AUTH must be 'on' or 'none'")
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
HOST_PUBLIC_URL = env.str("HOST_PUBLIC_URL", default="")
HOST_DATA_DIR = Path(env.str("HOST_DATA_DIR", default=str(VAR_DIR / "data")))
HOST_MAX_BODY_BYTES = env_int("HOST_MAX_BODY_BYTES", 1024 * 1024, minimum=1024)
HOST_CORS_ORIGINS = env.list("HOST_CORS_ORIGINS", default=[])
HOST_WRITE_RATE = env.str("HOST_WRITE_RATE", default="600/min")
AGENT_RUNTIME = env.str("AGENT_RUNTIME", default="echo")
if AGENT_RUNTIME not in {"echo", "external"}:
    raise ImproperlyConfigured("AGENT_RUNTIME must be 'echo' or 'external'")
IDLE_AFTER_SECONDS = env_int("IDLE_AFTER_SECONDS", 900, minimum=1)
RUN_LEASE_SECONDS = env_int("RUN_LEASE_SECONDS", 300, minimum=1)
RETENTION_DAYS = env.int("RETENTION_DAYS", default=None) if env.str("RETENTION_DAYS", "") else None
BEAT_STALE_SECONDS = env_int("BEAT_STALE_SECONDS", 60, minimum=1)

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
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.errors.exception_handler",
    "DEFAULT_THROTTLE_RATES": {"writes": HOST_WRITE_RATE},
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Hyphae API",
    "DESCRIPTION": "A durable extension host for AI-agent conversation platforms.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": "/v1",
}

# --- Celery ------------------------------------------------------------------------------------
# Embedded default: the filesystem broker (one machine; polls about once a second; no
# redelivery of a task whose worker crashed). Redis or RabbitMQ give every guarantee.

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="filesystem://")
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
if CELERY_BROKER_URL.startswith("filesystem"):
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
    }
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
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = 60
CELERY_TASK_TIME_LIMIT = 90
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_INTERVAL_SECONDS = float(env.str("CELERY_BEAT_INTERVAL_SECONDS", default="1"))

# --- Logging -----------------------------------------------------------------------------------

LOG_JSON = env_bool("LOG_JSON", False)
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "core.logging.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
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
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
