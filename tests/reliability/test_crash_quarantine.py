"""Crash quarantine (spec 02 §7), the counting logic with a faked redelivery: a hook "kills
its process" by raising `ProcessDeath` and the cache skips the clearing while it propagates
(a dead process runs no `finally`); the page's transaction rolls back as a dead connection's
would; calling the sweep again is the broker's redelivery."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache import cache

from extensions_host import registry
from extensions_host.background.models import Timer
from extensions_host.background.services.timers import timers_fire_page
from extensions_host.models import ExtensionRecord, ExtensionStatus, RosterEntry
from extensions_host.runtime import crashes, forget_activations, run_frame
from extensions_host.runtime.crashes import delivery_counted, unfinished_deliveries
from extensions_host.sdk import Extension
from extensions_host.services.roster import extension_resume, roster_sync

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


from extensions_host.sdk import Collection  # noqa: E402


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
