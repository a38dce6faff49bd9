"""Production settings: no insecure defaults, strict transport security, JSON logs.

Required: SECRET_KEY, DATABASE_URL (PostgreSQL), CELERY_BROKER_URL (Redis or RabbitMQ),
CACHE_URL (Redis), ALLOWED_HOSTS, from the environment or the project's `.env` (the environment
wins).
`manage.py check --deploy` is clean with these settings and SILENCED_SYSTEM_CHECKS empty, once
the deployment's own secrets are set (HOST_SECRET_KEY, tokens of 32+ characters: see
docs/operating.md).
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

# First: `.env` is in os.environ from here on, so the checks and defaults below see its values.
from config.settings.environment import env

# Production refuses the embedded defaults for what must be explicit.
for _name in ("SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "ALLOWED_HOSTS"):
    if not env.str(_name, default=""):
        raise ImproperlyConfigured(f"{_name} must be set in production")
# Redis or RabbitMQ (kombu's names for their transports, Sentinel included; `;` separates
# failover URLs; `redis+socket://` is the redis transport over a Unix socket): the embedded
# filesystem broker and the in-memory one cannot serve several machines or redeliver the task
# of a worker that died, and a typo would otherwise fall back to kombu's default transport.
_BROKER_SCHEMES = ("redis", "rediss", "sentinel", "amqp", "amqps", "pyamqp")
for _url in env.str("CELERY_BROKER_URL").split(";"):
    _scheme, _sep, _ = _url.strip().partition("://")
    if not _sep or _scheme.lower().partition("+")[0] not in _BROKER_SCHEMES:
        # the scheme only: the rest of a broker URL may hold a password
        _got = f"{_scheme}://" if _sep else "a value without <scheme>://"
        raise ImproperlyConfigured(
            "CELERY_BROKER_URL must point at Redis or RabbitMQ in production "
            f"({', '.join(f'{s}://' for s in _BROKER_SCHEMES)}), got {_got}"
        )
# Production defaults: only where neither the environment nor `.env` sets the variable.
os.environ.setdefault("HOST_AUTO_ADMIT", "false")
os.environ.setdefault("AGENT_RUNTIME", "external")
os.environ.setdefault("LOG_JSON", "true")

from config.settings.base import *  # noqa: E402, F403
from config.settings.base import CACHES, DATABASES, env_bool, env_int  # noqa: E402

if HOST_AUTH == "none":  # noqa: F405
    raise ImproperlyConfigured("HOST_AUTH=none is for local development only")
# Row locks, skip-locked claims and LISTEN/NOTIFY hints need PostgreSQL; SQLite is embedded only.
# (base.py already refuses every other engine, PostGIS's included: Hyphae has no GIS models, and
# a PostgreSQL server with the PostGIS extension is reached with postgres:// like any other.)
if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
    raise ImproperlyConfigured(
        "DATABASE_URL must point at PostgreSQL in production (postgres://user@host:5432/name)"
    )
# Every process must share the cache, above all the `save=none` artifact payloads: with the
# file cache their `artifacts` alias is each process's local memory (base.py), so a panel would
# show or vanish depending on which web process answers.
if CACHES["default"]["BACKEND"] not in {
    "django.core.cache.backends.redis.RedisCache",
    "django_redis.cache.RedisCache",
}:
    raise ImproperlyConfigured(
        "CACHE_URL must point at Redis in production (redis://host:6379/1): every process shares it"
    )

DEBUG = False
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
# Load balancers probe over plain HTTP inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
# On by default, so that `check --deploy` is clean with these settings (spec 08). Both reach
# beyond this host (every subdomain; browsers' preload lists, hard to leave): a deployment whose
# subdomains are not all HTTPS-only turns them off (and `check --deploy` then says so,
# security.W005 and security.W021).
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
X_FRAME_OPTIONS = "DENY"
SILENCED_SYSTEM_CHECKS: list[str] = []
