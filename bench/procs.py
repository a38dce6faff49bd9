"""Processes the runner starts (gunicorn, Celery worker and beat, drivers, the load generator)
and stops again by their own process-group id, never by name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


class BenchError(RuntimeError):
    """A step of the bench could not run (a process died, a server never came up)."""


def wait_until(predicate: Callable[[], Any], *, timeout: float, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)


class Processes:
    """Long-running processes of one phase; `stop_all` ends exactly the ones started here."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.base_env = env
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def env(self, **extra: str) -> dict[str, str]:
        return {**self.base_env, **extra}

    def start(self, name: str, args: list[str], **env: str) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_dir / f"{name}.log", "ab")  # closed when the process ends
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=self.env(**env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped as a group, by id
        )
        self.procs[name] = proc
        return proc

    def gunicorn(self, *, port: int, workers: int = 2) -> subprocess.Popen[bytes]:
        """The API under gunicorn with sync workers, as in the production Procfile."""
        return self.start(
            "gunicorn",
            [
                PYTHON, "-m", "gunicorn", "config.wsgi",
                "--bind", f"127.0.0.1:{port}",
                "--workers", str(workers),
                "--worker-class", "sync",
                "--timeout", "60",
                "--backlog", "256",
            ],
        )  # fmt: skip

    def celery_worker(self, *, concurrency: int = 2) -> subprocess.Popen[bytes]:
        return self.start(
            "celery-worker",
            [
                PYTHON, "-m", "celery", "-A", "config", "worker",
                "--pool", "prefork", "--concurrency", str(concurrency),
                "--loglevel", os.environ.get("BENCH_WORKER_LOGLEVEL", "WARNING"),
                "--without-gossip", "--without-mingle", "--without-heartbeat",
            ],
        )  # fmt: skip

    def celery_beat(self, *, schedule: Path) -> subprocess.Popen[bytes]:
        return self.start(
            "celery-beat",
            [
                PYTHON, "-m", "celery", "-A", "config", "beat",
                "--loglevel", "WARNING", "--schedule", str(schedule),
            ],
        )  # fmt: skip

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise BenchError(f"{name} exited with {proc.returncode}: {self.tail(name)}")

    def tail(self, name: str, size: int = 1500) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-size:] if path.exists() else ""

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()


def run_json(args: list[str], *, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run a bench program to completion and parse the JSON it prints last."""
    done = subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise BenchError(f"{' '.join(args[:4])} failed: {done.stderr[-1500:]}")
    lines = [line for line in done.stdout.splitlines() if line.strip().startswith("{")]
    if not lines:
        raise BenchError(f"{' '.join(args[:4])} printed no result: {done.stderr[-1500:]}")
    return json.loads(lines[-1])


def run_many_json(
    commands: list[list[str]], *, env: dict[str, str], timeout: float
) -> list[dict[str, Any]]:
    """Run several bench programs at the same time; their JSON results in order."""
    procs = [
        subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for args in commands
    ]
    results = []
    for args, proc in zip(commands, procs, strict=True):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise BenchError(f"{' '.join(args[:4])} did not finish in {timeout:.0f}s") from None
        lines = [line for line in out.splitlines() if line.strip().startswith("{")]
        if proc.returncode != 0 or not lines:
            raise BenchError(f"{' '.join(args[:4])} failed: {err[-1500:]}")
        results.append(json.loads(lines[-1]))
    return results


def http_ready(url: str, *, timeout: float) -> bool:
    def ok() -> bool:
        try:
            return httpx.get(url, timeout=1.0).status_code < 500
        except httpx.HTTPError:
            return False

    return bool(wait_until(ok, timeout=timeout, interval=0.2))
