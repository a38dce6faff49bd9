"""Reliability with real processes: PostgreSQL, Celery prefork workers, a Redis broker
(`TEST_BROKER_URL`) and a Redis cache shared with the workers. Each test is bounded (< 90 s on
2 cores) and prints the figures `docs/reliability.md` reports.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from django.db import transaction

from conversations.services import run_settle
from conversations.services.conversations import conversation_ensure
from core import clock
from extensions_host.background import tasks
from extensions_host.background.models import SettledCursor, Timer, WorkerState
from extensions_host.background.services.common import enqueue
from extensions_host.background.services.settled import core_cursor
from extensions_host.contributions.services.stores import settings_edit
from extensions_host.models import ExtensionRecord, ExtensionStatus, RosterEntry

from .conftest import claimed_runs, ready, set_timers, wait_until
from .exts import (
    FAULTY_ID,
    HEALTHY_IDS,
    NAPPER_WORKER,
    Effect,
    Files,
    chaos_extension,
    probe,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fresh_pools"),
]


def effects(extension_id: str) -> dict[str, Effect]:
    rows = ExtensionRecord.objects.filter(extension_id=extension_id, collection="effect")
    return {row.key: Effect.model_validate_json(row.value) for row in rows}


def roster(extension_id: str) -> RosterEntry:
    return RosterEntry.objects.get(pk=extension_id)


def worker_env(files: Files, cache_url: str | None = None, **extra: str) -> dict[str, str]:
    env = {"HOST_AUTO_RESUME": "false", **files.env(), **extra}
    if cache_url:
        env["CACHE_URL"] = cache_url
    return env


def test_a_hook_that_kills_its_worker_is_quarantined_after_three_deliveries(
    install, processes, shared_cache, files
):
    install("crasher", "steady")
    env = worker_env(files, shared_cache)
    processes.worker(concurrency=1, **env)
    processes.worker(concurrency=1, **env)
    processes.beat(processes.log_dir / "beat-schedule", **env)
    ready(processes, 2)
    now = clock.now_ms()
    set_timers("crasher", {"boom": now - 1000})  # first in every page until quarantined
    set_timers("crasher", {f"ok{n:02}": now + n for n in range(20)})
    set_timers("steady", {f"s{n:03}": now + n for n in range(200)})
    started = time.monotonic()
    tasks.fire_timers.delay()

    wait_until(
        lambda: roster("crasher").status == ExtensionStatus.STOPPED
        and not Timer.objects.filter(extension_id="steady").exists(),
        timeout=75,
        interval=0.2,
    )
    elapsed = time.monotonic() - started

    row = roster("crasher")
    assert row.reason == "on_timer crashed its worker"
    assert files.delivered().count("boom") == 3  # three deaths, no fourth run: no loop
    done = effects("steady")
    assert len(done) == 200 and {e.n for e in done.values()} == {1}
    assert Timer.objects.filter(extension_id="crasher", key="boom").exists()
    logs = _all_logs(processes)  # whole logs: `processes.logs()` keeps only their tails
    assert "WorkerLostError" in logs or "exited with 'exitcode 1'" in logs
    print(f"\nquarantined after 3 deaths; 200 healthy timers once; {elapsed:.1f}s")


def test_an_idle_worker_whose_runs_kill_their_process_is_quarantined_after_three(
    install, processes, shared_cache, files, owner
):
    install("napper")
    env = worker_env(files, shared_cache)
    processes.worker(concurrency=1, **env)
    processes.worker(concurrency=1, **env)
    ready(processes, 2)
    started = time.monotonic()
    woken: list[str] = []

    def worker_state() -> WorkerState | None:
        return WorkerState.objects.filter(extension_id="napper", name=NAPPER_WORKER).first()

    for n in range(3):  # one wake at a time: wakes during a run would coalesce into one
        woken.append(conversation_ensure(owner=owner, name=f"nap{n}").conversation.pk)
        # the run died; its redelivered task recorded it and released the lease at once
        wait_until(
            lambda n=n: len(files.delivered()) == n + 1
            and (state := worker_state()) is not None
            and state.runs == n + 1
            and not state.running_token,
            timeout=30,
            interval=0.1,
        )
    woken.append(conversation_ensure(owner=owner, name="nap3").conversation.pk)
    # the fourth delivery stops the extension, then records its run and puts its wake back
    wait_until(
        lambda: roster("napper").status == ExtensionStatus.STOPPED
        and (state := worker_state()) is not None
        and state.runs == 4,
        timeout=30,
        interval=0.1,
    )
    elapsed = time.monotonic() - started

    assert roster("napper").reason == f"worker {NAPPER_WORKER} crashed its worker"
    assert files.delivered() == woken[:3]  # three dead runs, no fourth run: no loop
    state = worker_state()
    assert state is not None
    assert state.pending_wake == {"event": "conversation_created", "conversation_id": woken[3]}
    assert (state.runs, state.last_outcome, state.running_token) == (4, "failed", "")
    logs = _all_logs(processes)
    assert logs.count("WorkerLostError") + logs.count("exited with 'exitcode 1'") >= 3
    print(f"\nidle worker: 3 dead runs, then quarantined; {elapsed:.1f}s")


def test_a_hook_sleeping_ten_times_its_deadline_is_stopped_and_frees_its_worker(
    install, chaos_importable, processes, files
):
    """The bundled `chaos` example, its `sleep` fault on `on_timer` set by staff."""
    install("chaos", "steady")
    deadline_s = chaos_extension().deadline_s
    assert deadline_s is not None
    sleep_s = 10 * deadline_s
    settings_edit(
        extension_id="chaos",
        value={"fault": "sleep", "hooks": ["on_timer"], "sleep_seconds": sleep_s},
        actor="staff",
    )
    processes.worker(concurrency=1, **worker_env(files))  # one slot: the next timer needs it
    ready(processes, 1)
    now = clock.now_ms()
    set_timers("chaos", {"slow": now - 10})
    set_timers("steady", {"next": now - 5})  # same page, after the slow one, same slot
    sent = time.monotonic()  # the idle worker takes the sweep at once: the hook starts then
    tasks.fire_timers.delay()

    wait_until(lambda: "next" in effects("steady"), timeout=30, interval=0.01)
    freed_after = time.monotonic() - sent
    wait_until(lambda: roster("chaos").status == ExtensionStatus.STOPPED, timeout=30, interval=0.01)

    assert roster("chaos").reason == "on_timer exceeded its deadline"
    assert not ExtensionRecord.objects.filter(extension_id="chaos").exists()  # its hit rolled back
    assert Timer.objects.filter(extension_id="chaos", key="slow").exists()  # fires on resume
    assert freed_after < sleep_s / 2  # about the deadline (1 s), far from the 10 s sleep
    print(
        f"\nchaos: deadline {deadline_s}s, sleep {sleep_s}s: stopped and the slot ran the next "
        f"timer {freed_after:.2f}s after the sweep was sent"
    )


def test_enqueue_after_commit_sends_no_task_for_a_rolled_back_write(
    install, processes, owner, files
):
    install("outbox")
    # LOG_LEVEL=DEBUG: the worker logs each task it receives (counted below)
    processes.worker(concurrency=2, **worker_env(files, LOG_LEVEL="DEBUG"))
    ready(processes, 1)
    committed, rolled_back = [], []

    class Abandon(Exception):
        pass

    for n in range(1000):
        try:
            with transaction.atomic():
                # the service of the create endpoint, in a transaction that may roll back
                conversation = conversation_ensure(owner=owner, name=f"w{n}").conversation
                enqueue(lambda cid=conversation.pk: probe.delay(cid))
                if n % 10 == 3:
                    rolled_back.append(conversation.pk)
                    raise Abandon
            committed.append(conversation.pk)
        except Abandon:
            pass

    wait_until(
        lambda: len(files.probed()) >= len(committed) and len(effects("outbox")) >= len(committed),
        timeout=75,
        interval=0.2,
    )
    time.sleep(1)  # a stray late task for a rolled-back write would land in this second

    assert len(committed) == 900 and len(rolled_back) == 100
    assert sorted(files.probed()) == sorted(committed)  # 1 task per committed write, 0 others
    assert set(effects("outbox")) == set(committed)  # lifecycle events only for committed rows
    logs = _all_logs(processes)
    assert "DoesNotExist" not in logs
    received = len(re.findall(r"Task tests\.reliability\.probe\[[^\]]+\] received", logs))
    assert received == 900
    print(f"\n1,000 writes, 100 rolled back: {received} probe tasks, 0 DoesNotExist")


def _all_logs(processes: Any) -> str:
    return "\n".join(p.read_text(errors="replace") for p in processes.log_dir.glob("*.log"))


def test_one_faulty_extension_among_ten_is_stopped_and_the_other_nine_see_no_failure(
    install, processes, files, owner, api, monkeypatch
):
    ids = [*HEALTHY_IDS, FAULTY_ID]
    install(*ids)  # every one a settled consumer: the roster sync puts its cursor at the top
    base = core_cursor()
    run_ids = claimed_runs(owner, 20, "settle")
    monkeypatch.setenv("REL_DELIVERIES", str(files.deliveries))  # commands run here
    processes.worker(concurrency=1, **worker_env(files))
    processes.worker(concurrency=1, **worker_env(files))
    processes.beat(processes.log_dir / "beat-schedule", **worker_env(files))
    ready(processes, 2)
    now = clock.now_ms()
    for extension_id in ids:  # 500 timer events (set while the faulty one still runs)
        set_timers(extension_id, {f"{n:03}": now + 10 * n for n in range(50)})
    for run_id in run_ids:  # 200 settled deliveries (20 runs × 10 consumers)
        run_settle(run_id=run_id, status="unanswered", reason="done")
    top = core_cursor()
    tasks.fire_timers.delay()
    for n in range(20):  # 200 lifecycle events
        conversation_ensure(owner=owner, name=f"c{n}")
    client = api("service")
    statuses: dict[str, list[int]] = {extension_id: [] for extension_id in ids}
    for n in range(10):  # 100 commands through the API
        for extension_id in ids:
            response = client.post(
                f"/v1/extensions/{extension_id}/commands/poke", {"key": f"p{n}"}, format="json"
            )
            statuses[extension_id].append(response.status_code)

    def healthy_done() -> bool:
        return (
            all(len(effects(e)) == 100 for e in HEALTHY_IDS)
            and not Timer.objects.filter(extension_id__in=HEALTHY_IDS).exists()
        )

    wait_until(healthy_done, timeout=75, interval=0.2)

    assert top == base + 20
    bad = roster(FAULTY_ID)
    assert bad.status == ExtensionStatus.STOPPED
    assert "faulty fails in every hook" in bad.reason
    assert effects(FAULTY_ID) == {}  # all its writes rolled back
    assert settled_position(FAULTY_ID) == base  # its on_settled never committed
    attempts = files.delivered()
    starts = [int(entry.split(":", 1)[0]) for entry in attempts]
    assert starts and max(starts) <= clock.to_ms(bad.stopped_at)  # no hook after the stop
    settled = [f"settled-{seq:06}" for seq in range(base + 1, top + 1)]
    for extension_id in HEALTHY_IDS:
        done = effects(extension_id)
        assert {e.n for e in done.values()} == {1}  # every event once, 0 failures
        assert sorted(k for k in done if k.startswith("settled-")) == settled  # every run once
        assert settled_position(extension_id) == top
        assert statuses[extension_id] == [200] * 10
        assert roster(extension_id).status == ExtensionStatus.RUNNING
    assert all(status != 500 for status in statuses[FAULTY_ID])
    print(
        f"\n1,000 events over 10 extensions (500 timers, 200 settled deliveries, 200 lifecycle, "
        f"100 commands): faulty stopped in {bad.failing_hook} ({bad.reason!r}) after "
        f"{len(starts)} hook start(s) ({', '.join(attempts)}), 0 after the stop; "
        f"9 × 100 healthy effects once, 9 × 20 settled runs once"
    )


def settled_position(extension_id: str) -> int:
    return SettledCursor.objects.get(pk=extension_id).position
