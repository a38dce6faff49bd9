"""Test settings: fast hashing, local-memory cache, file-backed SQLite so real worker processes
started by integration tests share the test database."""

from __future__ import annotations

import os

os.environ.setdefault("HOST_AUTO_ADMIT", "true")

from config.settings.base import *  # noqa: F403
from config.settings.base import DATABASES, REST_FRAMEWORK, VAR_DIR

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
HOST_API_TOKEN = ["test-service-token", "test-service-token-next"]
HOST_WRITE_RATE = "100000/min"
REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] = {"writes": HOST_WRITE_RATE}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # one file per test process (parallel runs never share it); removed when the run ends
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}
# A stray enqueue from a unit test never reaches a real broker. Integration tests that start
# real workers read TEST_BROKER_URL (Redis in CI; a temporary filesystem broker otherwise) and
# configure both sides themselves.
CELERY_BROKER_URL = "memory://"
CELERY_BROKER_TRANSPORT_OPTIONS = {}
