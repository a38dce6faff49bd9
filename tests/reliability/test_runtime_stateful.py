"""A Hypothesis state machine over the extension runtime (fake clock, any database): timers
are set, time moves, the sweep fires, the extension is stopped and resumed. Invariants: no
effect twice, no due timer skipped once the extension runs, a stopped extension runs no hook.
(Settled delivery order under stop/resume is covered by `tests/background/test_settled.py`.)
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from core import clock
from extensions_host import registry
from extensions_host.background.models import Timer
from extensions_host.background.services.timers import timers_fire_page
from extensions_host.models import ExtensionRecord, ExtensionStatus, RosterEntry
from extensions_host.runtime import extension_stop, forget_activations, run_frame
from extensions_host.sdk import Collection, Extension
from extensions_host.services.roster import extension_resume, roster_sync

from .exts import Effect

pytestmark = pytest.mark.django_db(transaction=True)

calls: list[str] = []


def _on_timer(ctx: Any, timer: Any) -> None:
    calls.append(timer.key)
    key = f"{timer.key}@{timer.due_at}"
    effects = ctx.collection("effect")
    current = effects.get(key)
    effects.put(Effect(key=key, n=(current.n + 1) if current else 1))


hyp = Extension(
    id="hyp",
    version="1.0.0",
    grants={"timers", "state"},
    collections={"effect": Collection(Effect, key=lambda e: e.key)},
)
hyp.on_timer(_on_timer)


class Runtime(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        Timer.objects.all().delete()
        ExtensionRecord.objects.all().delete()
        RosterEntry.objects.filter(pk="hyp").delete()
        forget_activations()
        roster_sync()
        calls.clear()
        self.pending: dict[str, int] = {}  # key -> due_at (the model)
        self.fired: set[str] = set()  # "key@due" fired in the model
        self.running = True

    @rule(key=st.sampled_from(["a", "b", "c"]), offset=st.integers(0, 3000))
    def set_timer(self, key: str, offset: int) -> None:
        due = clock.now_ms() + offset
        outcome = run_frame(
            extension_id="hyp",
            hook="test",
            call=lambda ctx: ctx.timers.set(key, due),
            failures="return",
        )
        if self.running:
            assert outcome.ok
            self.pending[key] = due
        else:
            assert outcome.status == "skipped"

    @rule(ms=st.integers(1, 2000))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms=ms)

    @rule()
    def fire(self) -> None:
        before = len(calls)
        timers_fire_page()
        if not self.running:
            assert len(calls) == before  # a stopped extension runs no hook
            return
        now = clock.now_ms()
        for key, due in list(self.pending.items()):
            if due <= now:
                self.fired.add(f"{key}@{due}")
                del self.pending[key]

    @rule()
    def stop(self) -> None:
        extension_stop(extension_id="hyp", hook="test", reason="stopped by the test")
        self.running = False

    @rule()
    def resume(self) -> None:
        if not self.running:
            extension_resume(extension_id="hyp", actor="staff")
            self.running = True

    @invariant()
    def no_effect_twice_and_none_skipped(self) -> None:
        rows = ExtensionRecord.objects.filter(extension_id="hyp", collection="effect")
        done = {row.key: Effect.model_validate_json(row.value).n for row in rows}
        assert set(done.values()) <= {1}
        assert set(done) == self.fired
        status = RosterEntry.objects.get(pk="hyp").status
        assert (status == ExtensionStatus.RUNNING) == self.running


def test_the_runtime_never_doubles_skips_or_runs_a_stopped_extension(fake_clock):
    Runtime.clock = fake_clock
    with registry.installed(hyp):
        run_state_machine_as_test(
            Runtime,
            settings=settings(
                max_examples=25,
                stateful_step_count=20,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    forget_activations()
