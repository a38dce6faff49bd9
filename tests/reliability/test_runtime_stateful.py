"""A Hypothesis state machine over the extension runtime (fake clock, any database): timers
are set, time moves, the sweep fires, runs settle, settled delivery runs, the extension is
stopped and resumed. Invariants: no effect twice; no due timer and no settled run skipped once
the extension runs (settled runs reach it once each, in sequence order, and a resumed one
catches up on exactly what it missed); a stopped extension runs no hook.
"""

from __future__ import annotations

import secrets
from collections import Counter
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from conversations.models import Conversation
from conversations.services import Origin, run_claim, run_settle, submission_admit
from core import clock
from extensions_host import registry
from extensions_host.background.models import SettledCursor, Timer
from extensions_host.background.services.settled import (
    core_cursor,
    settled_cursor_initialise,
    settled_deliver_all,
)
from extensions_host.background.services.timers import timers_fire_page
from extensions_host.models import ExtensionRecord, ExtensionStatus, RosterEntry
from extensions_host.runtime import extension_stop, forget_activations, run_frame
from extensions_host.sdk import Collection, Extension
from extensions_host.services.roster import extension_resume, roster_sync

from .exts import Effect

pytestmark = pytest.mark.django_db(transaction=True)

CONVERSATION = "hyp-c"
SETTLED_BATCH = 2  # small batches: order and catch-up cross batch boundaries

calls: list[str] = []  # every hook call, in order: "<timer key>" or "settled:<sequence>"


def _count(ctx: Any, key: str) -> None:
    effects = ctx.collection("effect")
    current = effects.get(key)
    effects.put(Effect(key=key, n=(current.n + 1) if current else 1))


def _on_timer(ctx: Any, timer: Any) -> None:
    calls.append(timer.key)
    _count(ctx, f"{timer.key}@{timer.due_at}")


def _on_settled(ctx: Any, runs: list[Any]) -> None:
    for run in runs:
        calls.append(f"settled:{run.sequence}")
        _count(ctx, f"settled-{run.sequence:09}")


hyp = Extension(
    id="hyp",
    version="1.0.0",
    grants={"timers", "settled", "state"},
    collections={"effect": Collection(Effect, key=lambda e: e.key)},
)
hyp.on_timer(_on_timer)
hyp.on_settled(_on_settled)


def _settle_one() -> int:
    """Admit an input, claim it and settle the run (as the agent runtime would); returns the
    run's settled sequence."""
    with transaction.atomic():
        submission_admit(
            conversation_id=CONVERSATION,
            parts=[{"type": "text", "text": "hi"}],
            origin=Origin.of_extension("tests"),
            request_id=f"hyp-{secrets.token_hex(6)}",
        )
    claim = run_claim(conversation_id=CONVERSATION)
    assert claim is not None
    settled = run_settle(run_id=claim.run.pk, status="unanswered", reason="done")
    return settled.run.settled_sequence


class Runtime(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        Timer.objects.all().delete()
        ExtensionRecord.objects.all().delete()
        SettledCursor.objects.filter(pk="hyp").delete()
        RosterEntry.objects.filter(pk="hyp").delete()
        owner, _ = get_user_model().objects.get_or_create(username="hyp-owner")
        Conversation.objects.get_or_create(
            id=CONVERSATION, defaults={"owner": owner, "last_activity_at": clock.now()}
        )
        forget_activations()
        roster_sync()
        settled_cursor_initialise(extension_id="hyp")  # starts at the core cursor
        calls.clear()
        self.pending: dict[str, int] = {}  # key -> due_at (the model)
        # "key@due" -> how often it fired in the model: a timer set again at the same instant
        # after it fired is a new timer, and fires again
        self.fired: Counter[str] = Counter()
        self.base = core_cursor()
        self.settled: list[int] = []  # sequences settled since the consumer started
        self.delivered: list[int] = []  # sequences the consumer got, in order (the model)
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
                self.fired[f"{key}@{due}"] += 1
                del self.pending[key]

    @rule(runs=st.integers(1, 3))
    def settle(self, runs: int) -> None:
        # settling is the core's, never the consumer's: it works whether the consumer runs
        before = len(calls)
        for _ in range(runs):
            self.settled.append(_settle_one())
        assert len(calls) == before  # delivery is the sweep's, never inside the settle
        assert self.settled == list(range(self.base + 1, self.base + len(self.settled) + 1))

    @rule()
    def deliver(self) -> None:
        before = len(calls)
        settled_deliver_all(extension_id="hyp", budget_s=30)
        if not self.running:
            assert len(calls) == before  # a stopped extension runs no hook
            return
        # every run settled so far, each once, in sequence order (a resumed consumer catches
        # up on exactly what it missed)
        got = [int(c.split(":")[1]) for c in calls[before:] if c.startswith("settled:")]
        assert got == self.settled[len(self.delivered) :]
        self.delivered = list(self.settled)

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
        assert {k: n for k, n in done.items() if not k.startswith("settled-")} == self.fired
        assert {k: n for k, n in done.items() if k.startswith("settled-")} == {
            f"settled-{seq:09}": 1 for seq in self.delivered
        }
        status = RosterEntry.objects.get(pk="hyp").status
        assert (status == ExtensionStatus.RUNNING) == self.running

    @invariant()
    def settled_runs_arrive_in_order_and_the_cursor_follows(self) -> None:
        got = [int(c.split(":")[1]) for c in calls if c.startswith("settled:")]
        assert got == self.delivered  # no gap, no repeat, in order
        position = SettledCursor.objects.get(pk="hyp").position
        assert position == (self.delivered[-1] if self.delivered else self.base)


def test_the_runtime_never_doubles_skips_or_runs_a_stopped_extension(fake_clock, settings):
    settings.HOST_SETTLED_BATCH = SETTLED_BATCH
    Runtime.clock = fake_clock
    with registry.installed(hyp):
        run_state_machine_as_test(
            Runtime,
            settings=hypothesis_settings(
                max_examples=25,
                stateful_step_count=20,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    forget_activations()


def test_a_timer_set_again_at_the_instant_it_fired_fires_again_and_the_model_counts_it(
    fake_clock, settings
):
    """The sequence Hypothesis once found: the second timer is a new one (the first was
    deleted when it fired), so its effect at the same `key@due` is its second, not a double."""
    Runtime.clock = fake_clock
    with registry.installed(hyp):
        machine = Runtime()
        for _ in range(2):
            machine.set_timer(key="a", offset=0)
            machine.fire()
        machine.no_effect_twice_and_none_skipped()
        machine.teardown()
    forget_activations()

    assert calls == ["a", "a"]
    assert machine.fired == {f"a@{clock.now_ms()}": 2}
