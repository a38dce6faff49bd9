"""Production settings: no insecure defaults, strict transport security, JSON logs.

Required: SECRET_KEY, DATABASE_URL (PostgreSQL), CELERY_BROKER_URL, CACHE_URL, ALLOWED_HOSTS.
`manage.py check --deploy` is clean with these settings and SILENCED_SYSTEM_CHECKS empty.
"""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

# Production refuses the embedded defaults for what must be explicit.
for _name in ("SECRET_KEY", "DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "ALLOWED_HOSTS"):
    if not os.environ.get(_name):
        raise ImproperlyConfigured(f"{_name} must be set in production")
os.environ.setdefault("HOST_AUTO_ADMIT", "false")
os.environ.setdefault("AGENT_RUNTIME", "external")
os.environ.setdefault("LOG_JSON", "true")

from config.settings.base import *  # noqa: E402, F403
from config.settings.base import env_bool, env_int  # noqa: E402

if HOST_AUTH == "none":  # noqa: F405
    raise ImproperlyConfigured("HOST_AUTH=none is for local development only")

DEBUG = False
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
# Load balancers probe over plain HTTP inside the network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
X_FRAME_OPTIONS = "DENY"
SILENCED_SYSTEM_CHECKS: list[str] = []
