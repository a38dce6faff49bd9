"""Every process starts while the database is down, and none starts with extensions it cannot
load: one rule (config/startup.py) for gunicorn (config/wsgi.py), uvicorn (config/asgi.py) and
the Celery worker (config/celery.py).

The servers are fresh processes under the production settings, importing the entry point the
way gunicorn and uvicorn do; a closed port stands in for the database that is down.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import OperationalError

from extensions_host.runtime.transient import store_unavailable

ROOT = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def start(entry_point: str, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOST_", "DATABASE", "CACHE"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.production",
        SECRET_KEY="x7Gq2vN9pL4sT8wB1mK6rY3zH5jD0cF9aE2uQ7iO4nV8gS1bW6tX3yR5kM0lP9dZ",
        ALLOWED_HOSTS="hyphae.local",
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed_port()}/nowhere",
        CELERY_BROKER_URL=f"redis://127.0.0.1:{closed_port()}/0",
        CACHE_URL=f"redis://127.0.0.1:{closed_port()}/1",
        HOST_VAR_DIR=str(tmp_path / "var"),
        HOST_SYNC_AT_START="true",
        LOG_JSON="false",
        PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-c", f"import {entry_point}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("entry_point", ["config.wsgi", "config.asgi"])
def test_a_web_process_starts_while_the_database_is_down_and_says_so(tmp_path, entry_point):
    done = start(entry_point, tmp_path)

    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "WARNING extensions_host.roster" in done.stderr
    assert "database not ready at start" in done.stderr
    assert "Extension store" not in done.stderr  # the database's trouble, named as such


@pytest.mark.parametrize("entry_point", ["config.wsgi", "config.asgi"])
def test_a_web_process_refuses_to_start_with_an_extension_it_cannot_load(tmp_path, entry_point):
    done = start(entry_point, tmp_path, HOST_EXTENSIONS="no_such_package.extension:ext")

    assert done.returncode != 0
    assert "ExtensionLoadError" in done.stderr


def test_the_start_sync_tolerates_a_database_that_stays_unreachable(monkeypatch, caplog):
    """What `with_transient_retries` raises once its retries are spent (`store/unavailable`)."""
    from extensions_host.services import roster as roster_service

    def unreachable() -> None:
        cause = OperationalError("connection to server at 127.0.0.1 failed: Connection refused")
        raise store_unavailable() from cause

    monkeypatch.setattr(roster_service, "roster_sync", unreachable)
    with caplog.at_level(logging.WARNING, logger="extensions_host.roster"):
        assert roster_service.roster_sync_at_start() is None

    (warning,) = caplog.records
    assert "database not ready at start" in warning.getMessage()
    assert "Connection refused" in warning.getMessage()


def test_a_worker_starts_while_the_database_is_down(monkeypatch, settings):
    from config.celery import _sync_roster_at_worker_start
    from extensions_host.services import roster as roster_service

    def unreachable() -> None:
        raise store_unavailable()

    settings.HOST_SYNC_AT_START = True
    monkeypatch.setattr(roster_service, "roster_sync", unreachable)
    _sync_roster_at_worker_start()  # no exception: the worker starts


def test_a_worker_refuses_to_start_with_an_extension_it_cannot_load(monkeypatch, settings):
    """Celery would log what a `worker_init` handler raises and start the worker anyway."""
    from config.celery import _sync_roster_at_worker_start
    from extensions_host.registry import ExtensionLoadError
    from extensions_host.services import roster as roster_service

    def load_error() -> None:
        raise ExtensionLoadError("Extension 'no_such_package.extension:ext' cannot be imported")

    settings.HOST_SYNC_AT_START = True
    monkeypatch.setattr(roster_service, "roster_sync", load_error)
    with pytest.raises(SystemExit, match="ExtensionLoadError"):
        _sync_roster_at_worker_start()
