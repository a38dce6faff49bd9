"""Concurrency on real PostgreSQL with real threads: skip-locked claims, per-consumer locks and
job rows make concurrent sweeps and deliverers safe (each item once, nothing twice at once);
the idle emit waits for activity in flight on its conversation."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction

from conversations.models import Conversation
from core import clock
from core.models import LifecycleEvent
from core.services import lifecycle_record
from extensions_host.background.declarations import Job, JobRun, add_job
from extensions_host.background.models import (
    IdleMark,
    JobState,
    JobTrigger,
    LifecycleDelivery,
    SettledCursor,
    Timer,
)
from extensions_host.background.services import lifecycle as lifecycle_service
from extensions_host.background.services.idle import _idle_emit
from extensions_host.background.services.jobs import job_run, jobs_declared, jobs_ensure
from extensions_host.background.services.lifecycle import (
    lifecycle_deliver_all,
    lifecycle_fanout_all,
)
from extensions_host.background.services.settled import (
    settled_cursor_initialise,
    settled_deliver_all,
)
from extensions_host.background.services.timers import timers_fire_due
from tests.postgres import someone_waits_for_a_lock, wait_until

from .conftest import in_frame, settle_runs
from .exts import Effect, effects, make_ext

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def run_threads(count: int, target: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * count
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def body(n: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[n] = target(n)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=body, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    return results


def counting(ctx: Any, key: str) -> None:
    store = ctx.collection("effect")
    current = store.get(key)
    store.put(Effect(key=key, n=(current.n + 1) if current else 1))


def test_four_concurrent_sweeps_fire_each_timer_exactly_once(install, sent):
    exts = [
        make_ext(f"t{n}", on_timer=lambda ctx, timer: counting(ctx, timer.key)) for n in range(3)
    ]
    install(*exts)
    now = clock.now_ms()
    for ext in exts:
        in_frame(ext.id, lambda ctx: [ctx.timers.set(f"k{n:03}", now + n) for n in range(200)])

    run_threads(4, lambda n: timers_fire_due(budget_s=60))

    assert not Timer.objects.exists()
    for ext in exts:
        done = effects(ext.id)
        assert len(done) == 200
        assert {e.n for e in done.values()} == {1}


def test_skip_overlap_never_runs_a_job_twice_at_once(install, sent):
    running = threading.Semaphore(0)
    release = threading.Event()
    active = {"now": 0, "max": 0}
    lock = threading.Lock()

    def action(ctx: Any, run: JobRun) -> None:
        with lock:
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
        running.release()
        release.wait(timeout=10)
        with lock:
            active["now"] -= 1

    ext = make_ext("alpha")
    add_job(ext, Job("slow", every_seconds=3600, action=action))
    install(ext)
    jobs_ensure(jobs_declared())
    JobTrigger.objects.create(job_id="ext:alpha:slow", actor="staff", not_before=clock.now_ms())

    def contender(n: int) -> str:
        if n == 0:
            return job_run(job_id="ext:alpha:slow")
        running.acquire(timeout=10)  # the first run is in flight now
        results = [job_run(job_id="ext:alpha:slow") for _ in range(3)]
        release.set()
        return ",".join(results)

    first, others = run_threads(2, contender)

    assert first == "ok"
    assert others == "busy,busy,busy"
    assert active["max"] == 1
    assert JobState.objects.get(pk="ext:alpha:slow").runs == 1


def test_the_sweep_does_not_hand_out_a_job_that_is_running_right_now(install, sent):
    from extensions_host.background.services.jobs import jobs_dispatch_due

    running = threading.Event()
    release = threading.Event()

    def action(ctx: Any, run: JobRun) -> None:
        running.set()
        release.wait(timeout=10)

    ext = make_ext("alpha")
    add_job(ext, Job("slow", every_seconds=3600, action=action))
    add_job(ext, Job("quick", every_seconds=3600, action=lambda ctx, run: None))
    install(ext)
    jobs_ensure(jobs_declared())
    for name in ("slow", "quick"):
        JobTrigger.objects.create(job_id=f"ext:alpha:{name}", actor="s", not_before=clock.now_ms())

    def contender(n: int) -> Any:
        if n == 0:
            return job_run(job_id="ext:alpha:slow")
        running.wait(timeout=10)  # the slow job holds its row now
        try:
            return jobs_dispatch_due()
        finally:
            release.set()

    slow, handed_out = run_threads(2, contender)

    assert slow == "ok"
    assert handed_out == ["ext:alpha:quick"]  # the running one is not handed out again


def test_concurrent_deliverers_of_one_consumer_deliver_each_run_once_in_order(
    install, conversation, sent
):
    batches: list[list[int]] = []
    lock = threading.Lock()

    def on_settled(ctx: Any, runs: list[Any]) -> None:
        with lock:
            batches.append([run.sequence for run in runs])
        counting(ctx, f"{runs[0].sequence:09}")

    install(make_ext("alpha", on_settled=on_settled))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    sequences = settle_runs("c1", 150)

    run_threads(4, lambda n: settled_deliver_all(extension_id="alpha", budget_s=60))

    assert [seq for batch in batches for seq in batch] == sequences
    assert SettledCursor.objects.get(pk="alpha").position == sequences[-1]
    assert {e.n for e in effects("alpha").values()} == {1}


def test_concurrent_lifecycle_deliverers_deliver_each_event_once_in_order(install, sent):
    seen: list[int] = []
    lock = threading.Lock()

    def handler(ctx: Any, event: Any) -> None:
        with lock:
            seen.append(event.data["n"])
        counting(ctx, f"{event.event_id:09}")

    install(make_ext("alpha", lifecycle={"conversation_archived": handler}))
    for n in range(120):
        lifecycle_record(
            kind="conversation_archived", conversation_id=f"c{n % 3}", payload={"n": n}
        )

    run_threads(3, lambda n: lifecycle_fanout_all())
    run_threads(4, lambda n: lifecycle_deliver_all(extension_id="alpha", budget_s=60))

    assert sorted(seen) == list(range(120))
    for conversation in range(3):  # per conversation, in the order they happened
        mine = [n for n in seen if n % 3 == conversation]
        assert mine == sorted(mine)
    assert not LifecycleDelivery.objects.exists()
    assert {e.n for e in effects("alpha").values()} == {1}


def test_a_fan_out_waits_for_the_one_in_progress_so_a_conversations_events_arrive_in_order(
    install, sent, monkeypatch
):
    """Spec 03: 'Events for one conversation reach one extension in the order they happened.'
    A fan-out holds event 1 of c1 in its page, not committed yet, when event 2 of c1 commits
    and a second fan-out starts (its kick was cleared when the first started). Had the second
    fanned out event 2 past the first's page, delivery would find no pending earlier event of
    c1 and hand event 2 over first."""
    seen: list[int] = []
    install(
        make_ext(
            "alpha",
            lifecycle={"conversation_archived": lambda ctx, event: seen.append(event.data["n"])},
        )
    )
    # an event delivered before: the consumer's rows exist (first inserts would wait on each
    # other and hide the race)
    lifecycle_record(kind="conversation_archived", conversation_id="c0", payload={"n": 0})
    lifecycle_fanout_all()
    lifecycle_deliver_all(extension_id="alpha", budget_s=60)
    lifecycle_record(kind="conversation_archived", conversation_id="c1", payload={"n": 1})

    in_page, go = threading.Event(), threading.Event()
    ensure = lifecycle_service.kick_ensure

    def pausing(channel: str, extension_ids: Any) -> None:
        ensure(channel, extension_ids)
        if not in_page.is_set():  # the first fan-out's page, before it commits
            in_page.set()
            go.wait(timeout=10)

    monkeypatch.setattr(lifecycle_service, "kick_ensure", pausing)
    second: dict[str, Any] = {}

    def fan_out(n: int) -> None:
        if n == 0:
            lifecycle_fanout_all()
            return
        assert in_page.wait(timeout=10)
        lifecycle_record(kind="conversation_archived", conversation_id="c1", payload={"n": 2})
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            second["pid"] = cursor.fetchone()[0]
        try:
            lifecycle_fanout_all()
            lifecycle_deliver_all(extension_id="alpha", budget_s=60)
        finally:
            second["done"] = True

    def release_when_the_second_is_done_or_waits() -> None:
        ends = time.monotonic() + 10  # a bounded poll: the second fan-out ended or waits
        try:
            with connection.cursor() as cursor:
                while not second.get("done") and time.monotonic() < ends:
                    cursor.execute(
                        "SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted",
                        [second.get("pid")],
                    )
                    if cursor.fetchone():
                        break
                    time.sleep(0.01)
        finally:
            go.set()
            connection.close()

    releaser = threading.Thread(target=release_when_the_second_is_done_or_waits)
    releaser.start()
    try:
        run_threads(2, fan_out)
    finally:
        go.set()
        releaser.join(timeout=10)
    lifecycle_fanout_all()
    lifecycle_deliver_all(extension_id="alpha", budget_s=60)

    assert seen == [0, 1, 2], f"conversation c1's events arrived out of order: {seen}"


def test_an_idle_emit_waits_for_activity_in_flight_and_then_emits_nothing(
    install, conversation, fake_clock, settings, sent
):
    """The sweep read the conversation as idle; new activity is being written, not committed
    yet. The emit waits on the conversation row, then sees the activity: no idle event (read
    without the lock, it would emit one for a conversation that just became active)."""
    settings.IDLE_AFTER_SECONDS = 60
    install()
    conversation("quiet")
    activity_at = Conversation.objects.get(pk="quiet").last_activity_at
    fake_clock.advance(seconds=61)
    now = clock.now()
    active, release = threading.Event(), threading.Event()
    emitted: list[bool] = []

    def activity() -> None:
        try:
            with transaction.atomic():
                Conversation.objects.filter(pk="quiet").update(last_activity_at=now)
                active.set()
                assert release.wait(timeout=20)
        finally:
            connection.close()

    def emit() -> None:
        try:
            emitted.append(_idle_emit("quiet", activity_at, now - dt.timedelta(seconds=60), now))
        finally:
            connection.close()

    writer, emitter = threading.Thread(target=activity), threading.Thread(target=emit)
    writer.start()
    try:
        assert active.wait(timeout=20)
        emitter.start()
        wait_until(someone_waits_for_a_lock)  # the emit waits for the conversation row
        assert emitted == []
    finally:
        release.set()
        writer.join(timeout=30)
    emitter.join(timeout=30)

    assert emitted == [False]
    assert not LifecycleEvent.objects.filter(kind="conversation_idle").exists()
    assert not IdleMark.objects.exists()
