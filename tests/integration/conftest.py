"""Real processes for integration tests: Celery workers (and beat) against the test database.

The broker is `TEST_BROKER_URL` (Redis in CI) or, when unset, a filesystem broker in a temporary
folder (the embedded default). Both this test process and the worker processes are pointed at
it, so an enqueue after commit here is consumed by a real worker there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import kombu.pools
import pytest
from django.conf import settings
from django.db import connection

from config.celery import app as celery_app
from tests.conftest import broker_url_from_env

ROOT = Path(__file__).resolve().parents[2]


def wait_until(predicate: Callable[[], object], *, timeout: float, interval: float = 0.05):
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def test_database_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    host = s.get("HOST") or "127.0.0.1"
    port = s.get("PORT") or 5432
    user = s.get("USER") or "postgres"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{host}:{port}/{s['NAME']}"


@dataclass
class Broker:
    url: str
    transport_options: dict
    env: dict[str, str] = field(default_factory=dict)


@pytest.fixture
def broker(tmp_path) -> Iterator[Broker]:
    url = broker_url_from_env()
    if url:
        broker = Broker(
            url=url, transport_options={"visibility_timeout": 3600}, env={"CELERY_BROKER_URL": url}
        )
        if url.startswith("redis"):
            import redis

            redis.Redis.from_url(url).flushdb()
    else:
        var = tmp_path / "var"
        queue, processed = var / "broker" / "queue", var / "broker" / "processed"
        queue.mkdir(parents=True)
        processed.mkdir(parents=True)
        broker = Broker(
            url="filesystem://",
            transport_options={
                "data_folder_in": str(queue),
                "data_folder_out": str(queue),
                "processed_folder": str(processed),
                "store_processed": False,
                "control_folder": str(var / "broker" / "control"),
            },
            env={"CELERY_BROKER_URL": "filesystem://", "HOST_VAR_DIR": str(var)},
        )
    # the app reads Django settings with the CELERY_ namespace, so override those keys
    previous = (celery_app.conf.broker_url, celery_app.conf.broker_transport_options)
    _point_celery_at(broker.url, broker.transport_options)
    yield broker
    _point_celery_at(*previous)


def _point_celery_at(url: str, transport_options: dict) -> None:
    celery_app.conf.update(CELERY_BROKER_URL=url, CELERY_BROKER_TRANSPORT_OPTIONS=transport_options)
    # drop pooled connections/producers bound to the previous broker
    kombu.pools.reset()
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


class Processes:
    """Start and stop real host processes with the test database and broker."""

    def __init__(self, broker: Broker, log_dir: Path) -> None:
        self.broker = broker
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        env.update(
            DJANGO_SETTINGS_MODULE="config.settings.base",
            DATABASE_URL=test_database_url(),
            HOST_API_TOKEN=",".join(settings.HOST_API_TOKEN),
            CACHE_URL="locmemcache://",
            AGENT_RUNTIME=settings.AGENT_RUNTIME,
            HOST_EXTENSIONS=",".join(settings.HOST_EXTENSIONS),
            PYTHONUNBUFFERED="1",
        )
        env.update(self.broker.env)
        env.update(extra)
        return env

    def start(self, name: str, args: list[str], **env: str) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}-{len(self.procs)}.log", "wb")
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=self.env(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def worker(self, *, concurrency: int = 2, **env: str) -> subprocess.Popen:
        return self.start(
            "worker",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "--pool",
                "prefork",
                "--concurrency",
                str(concurrency),
                "--loglevel",
                "INFO",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            **env,
        )

    def beat(self, schedule: Path, **env: str) -> subprocess.Popen:
        return self.start(
            "beat",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(schedule),
            ],
            **env,
        )

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name} ---\n{p.read_text(errors='replace')[-4000:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def processes(broker, tmp_path, request) -> Iterator[Processes]:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    procs = Processes(broker, log_dir)
    yield procs
    procs.stop_all()
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        print(procs.logs())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
