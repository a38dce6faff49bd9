"""Test settings: fast hashing, local-memory cache, eager nothing (tests drive tasks directly)."""

from __future__ import annotations

import os

os.environ.setdefault("HOST_AUTO_ADMIT", "true")

from config.settings.base import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
HOST_API_TOKEN = ["test-service-token", "test-service-token-next"]
HOST_WRITE_RATE = "100000/min"
REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] = {"writes": HOST_WRITE_RATE}  # noqa: F405
# Tests use their own broker/tasks; never let a stray enqueue touch a real broker.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "memory://")
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
