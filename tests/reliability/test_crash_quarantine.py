"""Crash quarantine (spec 02 §7), the counting logic with a faked redelivery: a hook "kills
its process" by raising `ProcessDeath` and the cache skips the clearing while it propagates
(a dead process runs no `finally`); the page's transaction rolls back as a dead connection's
would; calling the sweep (or the worker run, with the same task id) again is the broker's
redelivery. Timers, idle workers (`Worker.run`) and lifecycle hooks (`conversation_idle`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache import cache

from conversations.models import Conversation
from core import clock
from extensions_host import registry
from extensions_host.background import tasks
from extensions_host.background.declarations import Worker, WorkerWake, add_worker
from extensions_host.background.models import LifecycleDelivery, SettledCursor, Timer, WorkerState
from extensions_host.background.services.idle import conversations_detect_idle
from extensions_host.background.services.lifecycle import (
    lifecycle_deliver_all,
    lifecycle_fanout_all,
)
from extensions_host.background.services.settled import (
    settled_cursor_initialise,
    settled_deliver_all,
)
from extensions_host.background.services.timers import timers_fire_page
from extensions_host.background.services.workers import worker_run, worker_wake
from extensions_host.contributions.models import Notification
from extensions_host.models import ExtensionRecord, ExtensionStatus, RosterEntry
from extensions_host.runtime import crashes, forget_activations, run_frame
from extensions_host.runtime.crashes import delivery_counted, unfinished_deliveries
from extensions_host.sdk import Collection, Extension
from extensions_host.services.roster import extension_resume, roster_sync
from tests.background.conftest import settle_runs

from .exts import Effect, count

pytestmark = pytest.mark.django_db(transaction=True)


class ProcessDeath(KeyboardInterrupt):
    """What `os._exit` looks like from inside: nothing after it runs in this process."""


class DyingCache:
    """The real cache, except that a process dying clears nothing."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def delete(self, key: str) -> Any:
        if isinstance(sys.exc_info()[1], ProcessDeath):
            return None
        return self.real.delete(key)

    def delete_many(self, keys: list[str]) -> Any:
        if isinstance(sys.exc_info()[1], ProcessDeath):
            return None
        return self.real.delete_many(keys)


@pytest.fixture(autouse=True)
def dying_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    cache.clear()
    monkeypatch.setattr(crashes, "cache", DyingCache(cache))


def _ext(ext_id: str, on_timer: Callable[[Any, Any], None]) -> Extension:
    ext = Extension(
        id=ext_id,
        version="1.0.0",
        grants={"timers", "state"},
        collections={"effect": Collection(Effect, key=lambda e: e.key)},
    )
    ext.on_timer(on_timer)
    return ext


@pytest.fixture
def plan() -> list[str]:
    """What the next deliveries of `boomer`'s timer do: "die", "ok", "again" (ok and re-set
    the same timer); "ok" once the plan runs out."""
    return []


@pytest.fixture
def calls() -> list[str]:
    return []


@pytest.fixture
def installed(plan: list[str], calls: list[str]) -> Iterator[None]:
    def boom(ctx: Any, timer: Any) -> None:
        calls.append(timer.key)
        step = plan.pop(0) if plan else "ok"
        if step == "die":
            raise ProcessDeath
        count(ctx, timer.key)
        if step == "again":
            ctx.timers.set(timer.key, timer.due_at)

    def calm(ctx: Any, timer: Any) -> None:
        count(ctx, timer.key)

    with registry.installed(_ext("boomer", boom), _ext("calm", calm)):
        forget_activations()
        roster_sync()
        yield
    forget_activations()


def set_timer(extension_id: str, key: str, due_at: int) -> None:
    outcome = run_frame(
        extension_id=extension_id,
        hook="test",
        call=lambda ctx: ctx.timers.set(key, due_at),
        failures="return",
    )
    assert outcome.ok, outcome


def deliver() -> None:
    """One delivery of the sweep; a process death is the broker's cue to redeliver."""
    try:
        timers_fire_page()
    except ProcessDeath:
        pass


def effects(extension_id: str) -> dict[str, int]:
    rows = ExtensionRecord.objects.filter(extension_id=extension_id, collection="effect")
    return {row.key: Effect.model_validate_json(row.value).n for row in rows}


def test_a_hook_that_kills_its_process_is_quarantined_on_the_fourth_delivery(
    installed, plan, calls
):
    plan.extend(["die"] * 10)
    set_timer("boomer", "boom", 1)
    set_timer("calm", "fine", 2)  # in the same page, after the crashing timer

    for _ in range(5):
        deliver()

    assert calls == ["boom"] * 3  # three deliveries died; the fourth did not run the hook
    row = RosterEntry.objects.get(pk="boomer")
    assert row.status == ExtensionStatus.STOPPED
    assert row.reason == "on_timer crashed its worker"
    assert row.failing_hook == "on_timer"
    assert Timer.objects.filter(extension_id="boomer", key="boom").exists()  # fires on resume
    assert effects("boomer") == {}
    assert effects("calm") == {"fine": 1}  # rolled back with each dead page, then once
    assert unfinished_deliveries(extension_id="boomer", hook="on_timer", item="boom@1") == 0


def test_frames_that_finished_before_the_death_in_its_page_are_never_counted_as_crashes(
    installed, plan, calls
):
    plan.extend(["die"] * 10)
    set_timer("calm", "fine", 1)  # in the same page, before the crashing timer
    set_timer("boomer", "boom", 2)

    for _ in range(6):
        deliver()

    assert calls == ["boom"] * 3
    assert RosterEntry.objects.get(pk="boomer").status == ExtensionStatus.STOPPED
    assert RosterEntry.objects.get(pk="calm").status == ExtensionStatus.RUNNING
    assert effects("calm") == {"fine": 1}  # ran in each dead page, committed once
    assert unfinished_deliveries(extension_id="calm", hook="on_timer", item="fine@1") == 0


def test_deliveries_that_finish_reset_the_count(installed, plan, calls):
    # two deaths, a finished delivery that re-sets the same timer, two deaths, a finish
    plan.extend(["die", "die", "again", "die", "die", "ok"])
    set_timer("boomer", "boom", 1)

    for _ in range(6):
        deliver()

    assert len(calls) == 6
    assert RosterEntry.objects.get(pk="boomer").status == ExtensionStatus.RUNNING
    assert effects("boomer") == {"boom": 2}
    assert not Timer.objects.filter(extension_id="boomer").exists()


def test_a_resumed_extension_gets_three_fresh_deliveries(installed, plan, calls):
    plan.extend(["die"] * 3 + ["die", "die", "ok"])
    set_timer("boomer", "boom", 1)
    for _ in range(4):
        deliver()
    assert RosterEntry.objects.get(pk="boomer").status == ExtensionStatus.STOPPED

    extension_resume(extension_id="boomer", actor="staff")
    for _ in range(3):
        deliver()

    assert len(calls) == 6
    assert RosterEntry.objects.get(pk="boomer").status == ExtensionStatus.RUNNING
    assert effects("boomer") == {"boom": 1}


def test_a_cache_that_is_down_never_blocks_a_delivery(installed, monkeypatch):
    class Down:
        def __getattr__(self, name: str) -> Any:
            raise ConnectionError("cache is down")

    monkeypatch.setattr(crashes, "cache", Down())
    set_timer("boomer", "boom", 1)

    deliver()

    assert effects("boomer") == {"boom": 1}


def test_the_count_lives_while_the_frame_runs_and_is_cleared_when_it_finishes():
    key = {"extension_id": "x", "hook": "on_timer", "item": "k@1"}
    with delivery_counted(**key) as exhausted:
        assert not exhausted
        assert unfinished_deliveries(**key) == 1
    assert unfinished_deliveries(**key) == 0

    died = [delivery_counted(**key) for _ in range(3)]  # three deliveries that never finished
    for delivery in died:
        delivery.__enter__()
    assert unfinished_deliveries(**key) == 3
    with delivery_counted(**key) as exhausted:
        assert exhausted
    assert unfinished_deliveries(**key) == 0
    died.clear()


# --- idle workers and idle hooks --------------------------------------------------------------


@pytest.fixture
def worker_plan() -> list[str]:
    """What the next runs of `sleepy`'s worker do: "die" or "ok" ("ok" once it runs out)."""
    return []


@pytest.fixture
def woken(worker_plan: list[str], calls: list[str], sent: Any) -> Iterator[None]:
    def run(ctx: Any, wake: WorkerWake) -> None:
        calls.append(wake.conversation_id)
        if (worker_plan.pop(0) if worker_plan else "ok") == "die":
            raise ProcessDeath
        ctx.transact(lambda tx: count(tx, wake.conversation_id))

    ext = Extension(
        id="sleepy",
        version="1.0.0",
        grants={"lifecycle", "state"},
        collections={"effect": Collection(Effect, key=lambda e: e.key)},
    )
    add_worker(ext, Worker("tidy", wake_on=["conversation_archived"], run=run))
    with registry.installed(ext):
        forget_activations()
        roster_sync()
        yield
    forget_activations()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """`run_worker` tasks enqueued (recorded, not sent)."""
    record: list[tuple[str, ...]] = []
    monkeypatch.setattr(tasks.run_worker, "delay", lambda *args: record.append(args))
    return record


def wake(conversation_id: str) -> None:
    worker_wake(
        extension_id="sleepy",
        name="tidy",
        wake=WorkerWake(event="conversation_archived", conversation_id=conversation_id),
    )


def run_task(delivery: str) -> str | None:
    """One delivery of a `run_worker` task; a process death is the broker's cue to redeliver
    it (same task id)."""
    try:
        return worker_run(extension_id="sleepy", name="tidy", delivery=delivery)
    except ProcessDeath:
        return None


def state() -> WorkerState:
    return WorkerState.objects.get(extension_id="sleepy", name="tidy")


def test_a_worker_whose_runs_kill_their_process_is_stopped_after_three_dead_runs(
    woken, worker_plan, calls
):
    worker_plan.extend(["die"] * 10)
    outcomes = []
    for n in range(4):
        wake(f"c{n}")
        outcomes.append(run_task(f"task-{n}"))  # dies (the fourth: quarantined instead)
        outcomes.append(run_task(f"task-{n}"))  # the redelivery: records the dead run

    assert calls == ["c0", "c1", "c2"]  # three dead runs, no fourth run: no loop
    assert outcomes == [None, "idle"] * 3 + ["stopped", "skipped"]
    row = RosterEntry.objects.get(pk="sleepy")
    assert row.status == ExtensionStatus.STOPPED
    assert row.reason == "worker tidy crashed its worker"
    assert row.failing_hook == "worker tidy"
    worker = state()
    assert worker.pending_wake == {"event": "conversation_archived", "conversation_id": "c3"}
    assert (worker.runs, worker.last_outcome, worker.running_token) == (4, "failed", "")
    assert worker.last_error == "worker tidy crashed its worker"
    assert unfinished_deliveries(extension_id="sleepy", hook="worker tidy", item="run") == 0
    assert Notification.objects.filter(type="job.failed").count() == 4

    extension_resume(extension_id="sleepy", actor="staff")  # the kept wake runs after resume
    worker_plan.clear()
    assert run_task("after-resume") == "ok"
    assert calls[-1] == "c3" and effects("sleepy") == {"c3": 1}


def test_a_redelivery_takes_over_the_dead_runs_lease_and_runs_the_pending_wake(
    woken, worker_plan, calls
):
    worker_plan.extend(["die", "ok"])
    wake("first")
    assert run_task("task-a") is None  # died holding the lease (deadline + grace, ~90 s)
    wake("second")  # arrives while the dead run still holds the lease
    assert worker_run(extension_id="sleepy", name="tidy", delivery="task-b") == "busy"

    assert run_task("task-a") == "ok"  # the redelivery: the dead run is recorded, then the wake

    assert calls == ["first", "second"]
    assert effects("sleepy") == {"second": 1}
    worker = state()
    assert (worker.runs, worker.last_outcome, worker.running_token) == (2, "ok", "")
    assert RosterEntry.objects.get(pk="sleepy").status == ExtensionStatus.RUNNING


def test_a_worker_run_that_finishes_resets_the_count(woken, worker_plan, calls):
    worker_plan.extend(["die", "die", "ok", "die", "die", "ok"])
    for n in range(6):
        wake(f"c{n}")
        run_task(f"task-{n}")
        run_task(f"task-{n}")

    assert len(calls) == 6
    assert RosterEntry.objects.get(pk="sleepy").status == ExtensionStatus.RUNNING
    assert effects("sleepy") == {"c2": 1, "c5": 1}


def test_an_idle_hook_that_kills_its_process_is_quarantined_on_the_fourth_delivery(
    calls, fake_clock, owner, settings
):
    settings.IDLE_AFTER_SECONDS = 60

    def on_idle(ctx: Any, event: Any) -> None:
        calls.append(event.conversation_id)
        raise ProcessDeath

    ext = Extension(
        id="dozer",
        version="1.0.0",
        grants={"lifecycle", "state"},
        collections={"effect": Collection(Effect, key=lambda e: e.key)},
    )
    ext.on_lifecycle("conversation_idle")(on_idle)
    with registry.installed(ext):
        forget_activations()
        roster_sync()
        Conversation.objects.create(id="quiet", owner=owner, last_activity_at=clock.now())
        fake_clock.advance(seconds=61)
        assert conversations_detect_idle() == (1, False)
        lifecycle_fanout_all()
        for _ in range(5):  # the broker redelivers the task of each dead delivery
            try:
                lifecycle_deliver_all(extension_id="dozer")
            except ProcessDeath:
                pass

        assert calls == ["quiet"] * 3
        row = RosterEntry.objects.get(pk="dozer")
        assert row.status == ExtensionStatus.STOPPED
        assert row.reason == "conversation_idle crashed its worker"
        assert LifecycleDelivery.objects.filter(extension_id="dozer").count() == 1  # kept
    forget_activations()


def test_a_settled_consumer_dying_mid_page_is_quarantined_on_the_fourth_delivery(
    calls, owner, settings
):
    settings.HOST_SETTLED_BATCH = 2
    batches: list[list[int]] = []

    def on_settled(ctx: Any, runs: list[Any]) -> None:
        batches.append([run.sequence for run in runs])
        count(ctx, f"seen-{runs[-1].sequence}")
        if len(batches) % 2 == 0:  # the page's second batch kills the process
            raise ProcessDeath

    ext = Extension(
        id="eater",
        version="1.0.0",
        grants={"settled", "state"},
        collections={"effect": Collection(Effect, key=lambda e: e.key)},
    )
    ext.on_settled(on_settled)
    with registry.installed(ext):
        forget_activations()
        roster_sync()
        settled_cursor_initialise(extension_id="eater")
        Conversation.objects.create(id="talk", owner=owner, last_activity_at=clock.now())
        sequences = settle_runs("talk", 6)
        for _ in range(5):  # the broker redelivers the task of each dead delivery
            try:
                settled_deliver_all(extension_id="eater")
            except ProcessDeath:
                pass

        # three pages died in their second batch; the fourth delivery ran no hook
        assert batches == [sequences[0:2], sequences[2:4]] * 3
        row = RosterEntry.objects.get(pk="eater")
        assert row.status == ExtensionStatus.STOPPED
        assert row.reason == "on_settled crashed its worker"
        assert SettledCursor.objects.get(pk="eater").position == sequences[0] - 1  # replays all
        assert effects("eater") == {}
    forget_activations()


def test_a_death_later_in_one_extensions_run_of_frames_still_quarantines_it(installed, plan, calls):
    # boomer's two timers are one run of frames in the page: the first is counted for both
    plan.extend(["ok", "die"] * 3)
    set_timer("calm", "fine", 1)
    set_timer("boomer", "first", 2)
    set_timer("boomer", "boom", 3)

    for _ in range(5):
        deliver()

    assert calls == ["first", "boom"] * 3  # the fourth delivery ran none of boomer's hooks
    row = RosterEntry.objects.get(pk="boomer")
    assert row.status == ExtensionStatus.STOPPED
    assert row.reason == "on_timer crashed its worker"
    assert RosterEntry.objects.get(pk="calm").status == ExtensionStatus.RUNNING
    assert effects("calm") == {"fine": 1}
    assert effects("boomer") == {}
    assert set(Timer.objects.filter(extension_id="boomer").values_list("key", flat=True)) == {
        "first",
        "boom",
    }
