"""Settings for the benchmark processes (web, workers, drivers): the base settings on the bench
database and Redis, with the bench extensions installed and the bare baseline view mounted.

Only `DJANGO_SETTINGS_MODULE=bench.settings` mounts the baseline view (`bench/urls.py`); the
product's own settings never see it.
"""

from __future__ import annotations

import os

import environ

from bench.extensions import extension_paths
from config.settings.base import *  # noqa: F403
from config.settings.base import INSTALLED_APPS, REST_FRAMEWORK

BENCH_DATABASE_URL = os.environ.get(
    "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hyphae_bench"
)
BENCH_REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/7")
# the service token the load generator sends (a bench-only value on a throwaway database)
BENCH_SERVICE_TOKEN = "bench-service-token"  # noqa: S105

DATABASES = {"default": environ.Env.db_url_config(BENCH_DATABASE_URL)}
DATABASES["default"]["CONN_MAX_AGE"] = 60
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DATABASES["default"]["ATOMIC_REQUESTS"] = False

CACHES = {"default": environ.Env.cache_url_config(BENCH_REDIS_URL)}
CELERY_BROKER_URL = BENCH_REDIS_URL
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}

ROOT_URLCONF = "bench.urls"
INSTALLED_APPS = [*INSTALLED_APPS, "bench"]  # bench.tasks: the no-op Celery baseline
HOST_EXTENSIONS = extension_paths()
HOST_AUTO_ADMIT = True
HOST_API_TOKEN = [BENCH_SERVICE_TOKEN]
# The runner syncs the roster once; processes started later must not race it.
HOST_SYNC_AT_START = False
# The load generator is the only client: throttles would measure themselves.
HOST_WRITE_RATE = "100000000/min"
HOST_SEND_RATE = "off"
REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"] = {"writes": HOST_WRITE_RATE}
LOG_LEVEL = os.environ.get("LOG_LEVEL", "WARNING")
LOGGING["root"]["level"] = LOG_LEVEL  # noqa: F405
