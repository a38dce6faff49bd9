"""`HOST_AUTH=none` (local development only) warns at start and in `check --deploy` (spec 05)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from django.apps import apps

from core.apps import MSG_AUTH_NONE, auth_off_warning

ROOT = Path(__file__).resolve().parents[2]


def test_the_check_warns_only_when_authentication_is_off(settings):
    settings.HOST_AUTH = "on"
    assert auth_off_warning() == []
    settings.HOST_AUTH = "none"
    [warning] = auth_off_warning()
    assert (warning.id, warning.msg) == ("hyphae.W001", MSG_AUTH_NONE)


def test_start_up_logs_the_warning(settings, caplog):
    settings.HOST_AUTH = "none"
    with caplog.at_level(logging.WARNING, logger="core.apps"):
        apps.get_app_config("core").ready()
    assert MSG_AUTH_NONE in caplog.messages


def test_check_deploy_shows_it():
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "DJANGO_SETTINGS_MODULE": "config.settings.base",
        "HOST_AUTH": "none",
        "HOST_VAR_DIR": os.environ.get("HOST_VAR_DIR", str(ROOT / "var")),
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "hyphae.W001" in done.stdout + done.stderr
