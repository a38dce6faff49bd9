"""`manage.py check --deploy` with the production settings prints no warning."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "config.settings.production",
    "SECRET_KEY": "x7Gq2vN9pL4sT8wB1mK6rY3zH5jD0cF9aE2uQ7iO4nV8gS1bW6tX3yR5kM0lP9dZ",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/test",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    "CACHE_URL": "redis://127.0.0.1:6379/1",
    "ALLOWED_HOSTS": "hyphae.example.com",
    "HOST_API_TOKEN": "a-long-random-service-token",
}


def run_check(extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **PRODUCTION_ENV, **extra}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_production_settings():
    done = run_check({})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_production_refuses_to_start_without_a_secret_key():
    done = run_check({"SECRET_KEY": ""})
    assert done.returncode != 0
    assert "SECRET_KEY must be set in production" in done.stderr
