"""Fixtures of the reliability suite: install test extensions here and in the worker
processes (`HOST_EXTENSIONS`), share a Redis cache with them, and the real-process fixtures of
`tests/integration`.

Real-process tests need PostgreSQL and `TEST_BROKER_URL` (Redis); the cache they share with
the workers is `RELIABILITY_CACHE_URL` (default Redis db 12 on the broker's server).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import kombu.pools
import pytest

from config.celery import app as celery_app
from extensions_host import registry
from extensions_host.runtime import forget_activations, run_frame
from extensions_host.services.roster import roster_sync
from tests.background.conftest import claimed_runs
from tests.conftest import broker_url_from_env
from tests.integration.conftest import (
    broker,
    processes,
    pytest_runtest_makereport,
    wait_until,
)

from . import exts

__all__ = ["broker", "claimed_runs", "processes", "pytest_runtest_makereport", "wait_until"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "disruptive: restarts shared services (runs only with RELIABILITY_DISRUPTIVE=1)",
    )


@pytest.fixture
def install(db: Any, settings: Any) -> Iterator[Callable[..., None]]:
    """`install("crasher", …)`: load these `exts` extensions here, name them in
    `HOST_EXTENSIONS` for every process started afterwards, and sync the roster."""
    stack = ExitStack()

    def do(*ids: str) -> None:
        settings.HOST_EXTENSIONS = exts.paths(*ids)
        stack.enter_context(registry.installed(*exts.definitions(*ids)))
        forget_activations()
        roster_sync()

    yield do
    stack.close()
    forget_activations()


@pytest.fixture
def chaos_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled `chaos` example importable here and in every process started afterwards
    (as `make run`'s `PYTHONPATH` puts the examples), so `install("chaos")` can load it."""
    folder = str(exts.CHAOS_DIR)
    monkeypatch.syspath_prepend(folder)
    inherited = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (folder, inherited) if p))


@pytest.fixture
def fresh_pools(broker: Any) -> Iterator[None]:
    """Start from an empty kombu pool registry (a closed pool of an earlier test would fail
    the next send)."""
    kombu.pools.reset()
    celery_app._pool = None
    celery_app.amqp._producer_pool = None
    yield
    kombu.pools.reset()
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


def shared_cache_url() -> str:
    return os.environ.get("RELIABILITY_CACHE_URL", "redis://127.0.0.1:6379/12")


@pytest.fixture
def shared_cache(settings: Any) -> str:
    """Point this process's cache at the Redis the worker processes use (crash counts live
    there); skipped with a visible reason when no Redis broker is configured."""
    if not broker_url_from_env().startswith("redis"):
        pytest.skip(
            "needs a Redis TEST_BROKER_URL or CELERY_BROKER_URL (real workers share its cache)"
        )
    url = shared_cache_url()
    import redis

    redis.Redis.from_url(url).flushdb()
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": url}
    }
    return url


@pytest.fixture
def files(tmp_path: Path) -> exts.Files:
    return exts.Files.under(tmp_path)


def ready(processes: Any, count: int) -> None:
    """Wait until `count` worker processes logged that they are ready."""

    def up() -> bool:
        logs = [p.read_text(errors="replace") for p in processes.log_dir.glob("worker-*.log")]
        return sum("ready." in text for text in logs) >= count

    wait_until(up, timeout=45, interval=0.2)


def set_timers(extension_id: str, timers: dict[str, int]) -> None:
    """Set these timers (key → due instant) in one frame of the extension."""

    def body(ctx: Any) -> None:
        for key, due in timers.items():
            ctx.timers.set(key, due)

    outcome = run_frame(
        extension_id=extension_id, hook="test", call=body, failures="return", boundary="worker"
    )
    assert outcome.ok, outcome
