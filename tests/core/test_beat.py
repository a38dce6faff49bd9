"""Beat marks itself alive for /readyz: its scheduler (core/beat.py) writes the mark, not a task a
worker runs, so stopping the workers never makes the host report a dead beat (spec 05)."""

from __future__ import annotations

import importlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from celery.beat import PersistentScheduler
from django.core.cache.backends.filebased import FileBasedCache

from config.celery import app as celery_app
from core import beat, services

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def monotonic(monkeypatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(beat.time, "monotonic", lambda: now[0])
    return now


@pytest.fixture
def scheduler(tmp_path, monkeypatch):
    # no entry of the real schedule is sent: the base scheduler would next wake in 300 s
    monkeypatch.setattr(PersistentScheduler, "tick", lambda self, *args, **kwargs: 300.0)
    made = beat.HostScheduler(app=celery_app, schedule_filename=str(tmp_path / "var" / "schedule"))
    yield made
    made.close()


def test_beat_marks_itself_alive_every_few_seconds_whatever_its_schedule(
    scheduler, monotonic, monkeypatch, settings
):
    marks: list[float] = []
    monkeypatch.setattr(services, "beat_tick", lambda: marks.append(monotonic[0]))

    assert scheduler.tick() == settings.BEAT_MARK_SECONDS  # woken for the next mark, not in 300 s
    for _ in range(10):  # ticks that send due entries come many times a second: one mark
        assert scheduler.tick() <= settings.BEAT_MARK_SECONDS
    monotonic[0] += settings.BEAT_MARK_SECONDS - 1
    assert scheduler.tick() == 1
    monotonic[0] += 1
    scheduler.tick()

    assert marks == [1000.0, 1000.0 + settings.BEAT_MARK_SECONDS]


def test_beat_keeps_scheduling_when_the_cache_is_down(scheduler, monotonic, monkeypatch, caplog):
    def cache_down() -> None:
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(services, "beat_tick", cache_down)

    assert scheduler.tick() > 0
    assert "beat could not write its liveness mark" in caplog.text


def test_the_beat_process_marks_itself_alive_with_no_worker_running(tmp_path):
    """The documented `celery -A config beat` (no option) on the embedded filesystem broker and
    file cache, with no worker: the mark appears in the cache /readyz reads, and the schedule
    file lands in HOST_VAR_DIR, not in the working directory."""
    var, workdir = tmp_path / "var", tmp_path / "cwd"
    workdir.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HOST_", "DATABASE", "CACHE", "CELERY", "PYTEST"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings.base",
        HOST_VAR_DIR=str(var),
        HOST_EXTENSIONS="",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    log = tmp_path / "beat.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO"],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    cache = FileBasedCache(str(var / "cache"), {})  # the embedded default cache (CACHE_URL unset)
    try:
        deadline = time.monotonic() + 60
        while cache.get(services.BEAT_KEY) is None:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    assert list(var.glob("celerybeat-schedule*"))
    assert not list(workdir.iterdir())


def test_the_operating_guide_lists_every_beat_entry_at_its_pace():
    """docs/operating.md's beat table is the operator's view of the schedule: every entry, none
    that is gone, each at the pace it runs."""
    from config.celery import beat_schedule

    tick = 7.0
    paces = {"hourly": 3600.0, "daily": 86400.0}
    documented = {}
    guide = (Path(__file__).resolve().parents[2] / "docs" / "operating.md").read_text()
    for names, every in re.findall(r"^\| ((?:`[a-z-]+`(?:, )?)+) \| ([^|]+) \|", guide, re.M):
        every = every.strip()
        if every.startswith("tick"):
            pace = tick
        elif every.endswith(" s"):
            pace = float(every.removesuffix(" s"))
        else:
            pace = paces[every]
        documented |= {name: pace for name in re.findall(r"`([a-z-]+)`", names)}

    schedule = beat_schedule(tick=tick)
    assert documented == {name: entry["schedule"] for name, entry in schedule.items()}


def test_every_beat_entry_names_a_task_that_exists():
    from config.celery import beat_schedule

    for name, entry in beat_schedule(tick=1.0).items():
        module, _, function = entry["task"].rpartition(".")
        task = getattr(importlib.import_module(module), function, None)
        assert task is not None, name
        assert task.name == entry["task"], name
