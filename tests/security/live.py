"""A real gunicorn server (sync workers, as in production) on a free loopback port, serving the
test database, for tests that must go through a real HTTP stack: raw headers the Django test
client cannot express (underscore variants), chunked bodies, and the schemathesis run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx
from django.conf import settings

from tests.integration.conftest import test_database_url as database_url

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # a browser test's setting: serve as production
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.base",
        DATABASE_URL=database_url(),
        HOST_API_TOKEN=",".join(settings.HOST_API_TOKEN),
        CACHE_URL="locmemcache://",
        CELERY_BROKER_URL="memory://",
        AGENT_RUNTIME="external",  # nothing answers behind the fuzzer's back
        HOST_WRITE_RATE="1000000/min",
        HOST_EXTENSIONS="",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


@contextmanager
def gunicorn(
    log_dir: Path, *, workers: int = 2, args: tuple[str, ...] = (), **env: str
) -> Iterator[Server]:
    """`gunicorn config.wsgi` (sync workers, default header handling), as in production."""
    port = free_port()
    command = [
        *("-m", "gunicorn", "config.wsgi", "--bind", f"127.0.0.1:{port}"),
        *("--workers", str(workers), "--timeout", "60", "--error-logfile", "-"),
        *args,
    ]
    with _serve("gunicorn", port, command, log_dir, env) as server:
        yield server


@contextmanager
def uvicorn(log_dir: Path, *, args: tuple[str, ...] = (), **env: str) -> Iterator[Server]:
    """`uvicorn config.asgi` (the event stream in production, everything in `make run`)."""
    port = free_port()
    command = [
        *("-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1"),
        *("--port", str(port), "--no-access-log"),
        *args,
    ]
    with _serve("uvicorn", port, command, log_dir, env) as server:
        yield server


SERVERS = {
    "gunicorn": gunicorn,
    "uvicorn": uvicorn,
    # uvicorn without its X-Forwarded-For rewriting of the client address (see test_forward_auth)
    "uvicorn --no-proxy-headers": partial(uvicorn, args=("--no-proxy-headers",)),
}


@contextmanager
def _serve(
    name: str, port: int, command: list[str], log_dir: Path, env: dict[str, str]
) -> Iterator[Server]:
    """Start the server, wait for /healthz, and stop its whole process group at the end."""
    log_path = log_dir / f"{name}-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, *command],
            cwd=ROOT,
            env=server_env(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(url=f"http://127.0.0.1:{port}", log=log_path)
    try:
        _wait_ready(server, proc)
        yield server
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_ready(server: Server, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}:\n{server.output()}")
        try:
            if httpx.get(server.url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the server did not answer within {START_TIMEOUT_S}s:\n{server.output()}")
