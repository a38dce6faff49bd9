"""Timers: `ctx.timers` bounds and guards, the fire sweep (order, pages, group commit,
failures, retries) — fast logic tests on the fake clock."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core import clock
from extensions_host.background.models import Timer
from extensions_host.background.services.timers import (
    HELP_LATE_MS,
    PAGE,
    TimerGroups,
    timers_fire_due,
    timers_fire_page,
)
from extensions_host.background.services.wake import (
    HELP,
    PUMP,
    lease_claim,
    lease_release,
    timer_wake_mark,
)
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import HookContext
from extensions_host.sdk import ExtensionStop, Retry, StateError

from .conftest import in_frame, pending, resume, roster, set_timers
from .exts import Effect, effects, make_ext, record_timer

# --- ctx.timers -------------------------------------------------------------------------------


def test_set_upserts_read_returns_the_due_instant_and_cancel_removes_it(install, fake_clock):
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", a=now + 1000, b=now + 2000)
    set_timers("alpha", a=now + 5000)  # same key: moved, not duplicated

    seen: dict[str, Any] = {}

    def body(ctx: Any) -> None:
        seen["a"], seen["missing"] = ctx.timers.read("a"), ctx.timers.read("nope")
        seen["cancelled"] = ctx.timers.cancel("b")
        seen["again"] = ctx.timers.cancel("b")

    assert in_frame("alpha", body).ok
    assert seen == {"a": now + 5000, "missing": None, "cancelled": True, "again": False}
    assert pending("alpha") == {"a": now + 5000}


@pytest.mark.parametrize(
    ("key", "due"),
    [
        ("", 1),
        ("k" * 257, 1),
        ("k", -1),
        ("k", 1.5),
        ("k", True),
        ("k", "1"),
        ("k", 2**63),
        # past 9999-12-31T23:59:59.999Z no datetime holds it (the console shows due times)
        ("k", clock.MAX_MS + 1),
    ],
)
def test_set_refuses_a_key_or_instant_out_of_bounds_with_state_error_bound(install, key, due):
    install(make_ext("alpha", on_timer=record_timer))

    outcome = in_frame("alpha", lambda ctx: ctx.timers.set(key, due))

    assert outcome.status == "failed"
    assert isinstance(outcome.error, StateError)
    assert outcome.error.kind == "bound"
    assert pending("alpha") == {}


def test_a_key_of_256_characters_and_instants_zero_and_the_last_a_datetime_holds_are_accepted(
    install,
):
    install(make_ext("alpha", on_timer=record_timer))
    set_timers("alpha", **{"k" * 256: 0, "last": clock.MAX_MS})
    assert pending("alpha") == {"k" * 256: 0, "last": clock.MAX_MS}


def test_a_timer_write_outside_the_frame_is_a_defect_that_stops_the_extension(install):
    install(make_ext("alpha", on_timer=record_timer))
    from extensions_host import registry

    ctx = HookContext(loaded=registry.get("alpha"), hook="route", grants=frozenset({"timers"}))

    with pytest.raises(ExtensionStop):
        ctx.timers.set("k", 1)

    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert "outside its own core transaction" in roster("alpha").reason
    assert pending("alpha") == {}


def test_reads_work_outside_a_frame(install, fake_clock):
    install(make_ext("alpha", on_timer=record_timer))
    set_timers("alpha", k=fake_clock.now_ms() + 10)
    from extensions_host import registry

    ctx = HookContext(loaded=registry.get("alpha"), hook="route", grants=frozenset({"timers"}))

    assert ctx.timers.read("k") == fake_clock.now_ms() + 10
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_write_in_a_read_only_hook_stops_the_extension(install):
    install(make_ext("alpha", on_timer=record_timer))

    outcome = in_frame("alpha", lambda ctx: ctx.timers.set("k", 1), mode="read", failures="stop")

    assert outcome.status == "stopped"
    assert "read-only" in outcome.reason
    assert pending("alpha") == {}


def test_timers_inside_update_are_unavailable_and_without_the_grant_closed(install):
    install(make_ext("alpha", on_timer=record_timer), make_ext("beta", grants={"state"}))

    in_update = in_frame("alpha", lambda ctx: ctx.timers.set("k", 1), mode="state")
    ungranted = in_frame("beta", lambda ctx: ctx.timers.set("k", 1))

    assert in_update.error is not None and in_update.error.kind == "unavailable"
    assert ungranted.error is not None and ungranted.error.kind == "closed"
    assert "not granted timers" in ungranted.error.message


def test_the_pending_timer_quota_refuses_the_timer_past_it(install):
    install(make_ext("alpha", on_timer=record_timer))
    RosterEntry.objects.filter(pk="alpha").update(quotas={"max_timers": 3})
    set_timers("alpha", a=1, b=2, c=3)

    over = in_frame("alpha", lambda ctx: ctx.timers.set("d", 4))
    moved = in_frame("alpha", lambda ctx: ctx.timers.set("a", 9))  # an upsert is not a new one

    assert over.error is not None and over.error.kind == "bound"
    assert "max_timers (3)" in over.error.message
    assert moved.ok
    assert pending("alpha") == {"a": 9, "b": 2, "c": 3}


def test_a_timer_cancelled_after_a_set_in_the_frame_frees_its_place_in_the_quota(install):
    install(make_ext("alpha", on_timer=record_timer))
    RosterEntry.objects.filter(pk="alpha").update(quotas={"max_timers": 3})
    set_timers("alpha", a=1, b=2)

    def body(ctx: Any) -> None:
        ctx.timers.set("c", 3)  # the frame's count is taken here: 2 pending, 3 with this one
        assert ctx.timers.cancel("a")
        ctx.timers.set("d", 4)  # in a's place

    outcome = in_frame("alpha", body)

    assert outcome.ok, outcome
    assert pending("alpha") == {"b": 2, "c": 3, "d": 4}


def test_a_frame_that_cancels_before_it_sets_stays_within_the_quota(install):
    # the cancel is the frame's first timer write: its count, taken after the deletion,
    # already leaves the cancelled timer out (it must not be taken off a second time)
    install(make_ext("alpha", on_timer=record_timer))
    RosterEntry.objects.filter(pk="alpha").update(quotas={"max_timers": 3})
    set_timers("alpha", a=1, b=2, c=3)

    def body(ctx: Any) -> None:
        assert ctx.timers.cancel("a")
        ctx.timers.set("d", 4)  # in a's place
        ctx.timers.set("e", 5)  # a fourth pending timer: past the quota

    outcome = in_frame("alpha", body)

    assert outcome.error is not None and outcome.error.kind == "bound"
    assert "max_timers (3)" in outcome.error.message
    assert pending("alpha") == {"a": 1, "b": 2, "c": 3}  # the failed frame changed nothing


def test_the_default_quota_is_ten_thousand(settings):
    assert settings.HOST_QUOTAS["max_timers"] == 10_000


# --- firing -----------------------------------------------------------------------------------


def test_due_timers_fire_oldest_first_with_their_event_and_are_deleted(install, fake_clock):
    order: list[str] = []

    def hook(ctx: Any, timer: Any) -> None:
        order.append(timer.key)
        record_timer(ctx, timer)

    install(make_ext("alpha", on_timer=hook))
    now = fake_clock.now_ms()
    set_timers("alpha", late=now - 10, early=now - 500, future=now + 100)
    fake_clock.advance(ms=7)

    result = timers_fire_page()

    assert result.fired == 2
    assert order == ["early", "late"]
    assert effects("alpha")["early"].data == [now - 500, now + 7]
    assert pending("alpha") == {"future": now + 100}


def test_the_sweep_works_in_pages_of_64_and_reports_more_while_more_are_due(install, fake_clock):
    install(make_ext("alpha", on_timer=record_timer))
    set_timers("alpha", **{f"t{n:03}": n for n in range(PAGE + 5)})

    first = timers_fire_page()
    second = timers_fire_page()

    assert (first.claimed, first.fired) == (PAGE, PAGE)
    assert (second.claimed, second.fired) == (5, 5)
    assert len(effects("alpha")) == PAGE + 5
    assert pending("alpha") == {}


def test_fire_due_loops_until_no_timer_is_due(install, fake_clock):
    install(make_ext("alpha", on_timer=record_timer))
    set_timers("alpha", **{f"t{n:03}": n for n in range(3 * PAGE)})

    assert timers_fire_due(budget_s=30) is False
    assert len(effects("alpha")) == 3 * PAGE


def test_a_failing_hook_stops_its_extension_keeps_its_timers_and_others_still_fire(
    install, fake_clock
):
    calls: list[str] = []

    def failing(ctx: Any, timer: Any) -> None:
        calls.append(timer.key)
        ctx.collection("effect").put(Effect(key=timer.key))  # rolled back with its savepoint
        raise RuntimeError("boom")

    install(make_ext("alpha", on_timer=record_timer), make_ext("bad", on_timer=failing))
    set_timers("alpha", a1=1, a2=3)
    set_timers("bad", b1=2, b2=4)

    result = timers_fire_page()  # one page: a1, b1 (fails), a2, b2 (skipped: stopped)

    assert calls == ["b1"]  # no later frame of the stopped extension ran in the page
    assert (result.fired, result.stopped) == (2, 1)
    assert set(effects("alpha")) == {"a1", "a2"}
    assert effects("bad") == {}
    bad = roster("bad")
    assert bad.status == ExtensionStatus.STOPPED
    assert bad.reason == "on_timer defect: boom"
    assert pending("bad") == {"b1": 2, "b2": 4}
    assert pending("alpha") == {}


def test_after_resume_the_stopped_extensions_timers_fire_once_each(install, fake_clock):
    failing = {"on": True}

    def hook(ctx: Any, timer: Any) -> None:
        if failing["on"]:
            raise RuntimeError("down")
        record_timer(ctx, timer)

    install(make_ext("alpha", on_timer=hook))
    set_timers("alpha", a=1, b=2)
    timers_fire_page()
    assert timers_fire_page().claimed == 0  # stopped: its timers are not even claimed

    failing["on"] = False
    resume("alpha")
    timers_fire_due(budget_s=30)
    timers_fire_due(budget_s=30)

    assert set(effects("alpha")) == {"a", "b"}
    assert pending("alpha") == {}


def test_a_hook_that_resets_its_own_timer_keeps_it_with_the_new_instant(install, fake_clock):
    def hook(ctx: Any, timer: Any) -> None:
        record_timer(ctx, timer)
        if timer.key == "repeat":
            ctx.timers.set("repeat", timer.due_at + 60_000)

    install(make_ext("alpha", on_timer=hook))
    now = fake_clock.now_ms()
    set_timers("alpha", repeat=now)

    timers_fire_page()

    assert pending("alpha") == {"repeat": now + 60_000}


def test_a_fired_timer_is_gone_while_its_hook_runs_so_re_arming_unless_pending_keeps_it_going(
    install, fake_clock
):
    """Spec 03: 'delete it and call on_timer' (the page deletes its rows in one statement
    later, which the hook must not see)."""
    seen: list[tuple[int | None, bool]] = []

    def hook(ctx: Any, timer: Any) -> None:
        seen.append((ctx.timers.read(timer.key), ctx.timers.cancel(timer.key)))
        if ctx.timers.read(timer.key) is None:  # re-arm only when not pending
            ctx.timers.set(timer.key, timer.due_at + 1000)

    install(make_ext("alpha", on_timer=hook))
    now = fake_clock.now_ms()
    set_timers("alpha", tick=now)

    assert timers_fire_page().fired == 1
    fake_clock.advance(ms=1000)
    assert timers_fire_page().fired == 1

    assert seen == [(None, False), (None, False)]
    assert pending("alpha") == {"tick": now + 2000}


def test_a_timer_fired_earlier_in_the_page_is_gone_for_the_later_frames(install, fake_clock):
    seen: dict[str, tuple[int | None, int | None]] = {}

    def hook(ctx: Any, timer: Any) -> None:
        seen[timer.key] = (ctx.timers.read("first"), ctx.timers.read("second"))

    install(make_ext("alpha", on_timer=hook))
    set_timers("alpha", first=1, second=2)

    assert timers_fire_page().fired == 2

    assert seen == {"first": (None, 2), "second": (None, None)}
    assert pending("alpha") == {}


def test_a_timer_fired_in_the_page_and_set_again_by_a_later_frame_keeps_the_new_instant(
    install, fake_clock
):
    def hook(ctx: Any, timer: Any) -> None:
        if timer.key == "second":
            ctx.timers.set("first", 10**12)

    install(make_ext("alpha", on_timer=hook))
    set_timers("alpha", first=1, second=2)

    assert timers_fire_page().fired == 2

    assert pending("alpha") == {"first": 10**12}


def test_a_fired_timer_does_not_count_toward_the_quota_during_its_hook(install, fake_clock):
    outcomes: list[str] = []
    far = fake_clock.now_ms() + 10**9

    def hook(ctx: Any, timer: Any) -> None:
        try:
            ctx.timers.set("next", far)
            outcomes.append("set")
            ctx.timers.set(timer.key, far)  # a new timer again: over the quota now
        except StateError as exc:
            outcomes.append(exc.kind)

    install(make_ext("alpha", on_timer=hook))
    RosterEntry.objects.filter(pk="alpha").update(quotas={"max_timers": 2})
    set_timers("alpha", due=1, far=far)

    assert timers_fire_page().fired == 1

    assert outcomes == ["set", "bound"]
    assert pending("alpha") == {"far": far, "next": far}


def test_a_hook_that_re_arms_its_timer_and_then_fails_leaves_it_at_its_instant(install, fake_clock):
    """The failed frame's re-set is rolled back: the timer stays for the resume (a stop), or
    moves to the retry instant (`Retry`), with the due_at it fired for."""

    def hook(ctx: Any, timer: Any) -> None:
        ctx.timers.set(timer.key, 10**12)
        if timer.key == "retried":
            raise Retry(2, "later")
        raise RuntimeError("boom")

    install(make_ext("alpha", on_timer=hook), make_ext("beta", on_timer=hook))
    now = fake_clock.now_ms()
    set_timers("alpha", retried=now)
    set_timers("beta", stopped=now)

    result = timers_fire_page()

    assert (result.retried, result.stopped) == (1, 1)
    assert pending("alpha") == {"retried": now}
    assert Timer.objects.get(extension_id="alpha").fire_at == now + 2000
    assert pending("beta") == {"stopped": now}
    assert Timer.objects.get(extension_id="beta").fire_at == now


def test_a_timer_cancelled_or_reset_by_an_earlier_frame_of_the_page_is_not_fired(
    install, fake_clock
):
    fired: list[str] = []

    def hook(ctx: Any, timer: Any) -> None:
        fired.append(timer.key)
        if timer.key == "first":
            ctx.timers.cancel("second")
            ctx.timers.set("third", 10**12)

    install(make_ext("alpha", on_timer=hook))
    set_timers("alpha", first=1, second=2, third=3)

    timers_fire_page()

    assert fired == ["first"]
    assert pending("alpha") == {"third": 10**12}


def test_a_missing_on_timer_handler_stops_with_the_capability_reason(install):
    install(make_ext("alpha"))
    set_timers("alpha", k=1)

    timers_fire_page()

    assert roster("alpha").reason == "timers: granted capability has no handler"
    assert pending("alpha") == {"k": 1}


def test_timers_firing_alone_go_on_with_other_extensions_after_one_stops(install):
    # extensions whose timers fire in pages of one timer each: the one that stopped is left
    # out of the following pages, so its remaining timers do not end the pass for the others
    def fail(ctx: Any, timer: Any) -> None:
        raise ExtensionStop("broken")

    install(make_ext("alpha", on_timer=fail), make_ext("beta", on_timer=record_timer))
    set_timers("alpha", a1=1, a2=2)
    set_timers("beta", b=3)

    result = timers_fire_page(groups=TimerGroups(alone=("alpha", "beta")))

    assert (result.stopped, result.fired) == (1, 1)
    assert set(effects("beta")) == {"b"}
    assert pending("alpha") == {"a1": 1, "a2": 2}


def test_a_full_page_of_timers_that_could_not_fire_does_not_keep_the_sweep_going(
    install, monkeypatch
):
    # the extension stopped after the sweep read its groups: a page of its timers is claimed,
    # none fires, and the sweep ends instead of claiming them again until its budget is spent
    install(make_ext("alpha", on_timer=record_timer))
    set_timers("alpha", **{f"k{n}": n for n in range(PAGE)})
    monkeypatch.setattr(
        "extensions_host.background.services.timers.timer_groups",
        lambda: TimerGroups(shared=("alpha",)),
    )
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.STOPPED, reason="x")

    assert timers_fire_due(budget_s=0) is False
    assert len(pending("alpha")) == PAGE


def test_stopped_and_ungranted_extensions_timers_do_not_fire(install):
    install(make_ext("alpha", on_timer=record_timer), make_ext("beta", on_timer=record_timer))
    set_timers("alpha", a=1)
    set_timers("beta", b=1)
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.STOPPED)
    RosterEntry.objects.filter(pk="beta").update(admitted_grants=["state"])

    assert timers_fire_page().claimed == 0
    assert pending("alpha") == {"a": 1} and pending("beta") == {"b": 1}


def test_retry_leaves_the_timer_and_offers_it_again_after_the_delay(install, fake_clock):
    attempts: list[int] = []

    def hook(ctx: Any, timer: Any) -> None:
        attempts.append(fake_clock.now_ms())
        if len(attempts) < 3:
            raise Retry(2, "upstream down")
        record_timer(ctx, timer)

    install(make_ext("alpha", on_timer=hook))
    now = fake_clock.now_ms()
    set_timers("alpha", k=now)

    assert timers_fire_page().retried == 1
    assert timers_fire_page().claimed == 0  # not before the delay
    fake_clock.advance(ms=2000)
    assert timers_fire_page().retried == 1
    fake_clock.advance(ms=2000)
    assert timers_fire_page().fired == 1

    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert effects("alpha")["k"].data == [now, now + 4000]  # due_at kept across retries
    assert pending("alpha") == {}


def test_retries_are_bounded_and_then_count_as_a_defect(install, fake_clock, settings):
    settings.HOST_RETRY_LIMIT = 2

    def hook(ctx: Any, timer: Any) -> None:
        raise Retry(1, "still down")

    install(make_ext("alpha", on_timer=hook))
    set_timers("alpha", k=0)
    for _ in range(3):
        timers_fire_page()
        fake_clock.advance(ms=1000)

    alpha = roster("alpha")
    assert alpha.status == ExtensionStatus.STOPPED
    assert alpha.reason == "on_timer defect: retried 2 times: still down"
    assert pending("alpha") == {"k": 0}


def test_a_resume_gives_a_timer_that_used_up_its_retries_a_fresh_budget(
    install, fake_clock, settings
):
    # the upstream is down past the retry budget, then comes back: after the resume the timer
    # may `Retry` again (it is not stopped at its first one) and then fires
    settings.HOST_RETRY_LIMIT = 2
    upstream = {"up": False}

    def hook(ctx: Any, timer: Any) -> None:
        if not upstream["up"]:
            raise Retry(1, "still down")
        record_timer(ctx, timer)

    install(make_ext("alpha", on_timer=hook))
    set_timers("alpha", k=0)
    for _ in range(3):
        timers_fire_page()
        fake_clock.advance(ms=1000)
    assert roster("alpha").status == ExtensionStatus.STOPPED

    resume("alpha")
    assert Timer.objects.get(extension_id="alpha", key="k").retry_attempt == 0
    assert timers_fire_page().retried == 1
    assert roster("alpha").status == ExtensionStatus.RUNNING
    upstream["up"] = True
    fake_clock.advance(ms=1000)
    assert timers_fire_page().fired == 1
    assert pending("alpha") == {}


def test_setting_a_retrying_timer_again_gives_it_a_fresh_retry_budget(
    install, fake_clock, settings
):
    # a timer that used up part of its retries is moved by a later frame: it is a new timer,
    # whose own `Retry`s count from zero (not a defect at the first one)
    settings.HOST_RETRY_LIMIT = 2

    def hook(ctx: Any, timer: Any) -> None:
        raise Retry(1, "still down")

    install(make_ext("alpha", on_timer=hook))
    set_timers("alpha", k=0)
    for _ in range(2):
        assert timers_fire_page().retried == 1
        fake_clock.advance(ms=1000)
    assert Timer.objects.get(extension_id="alpha", key="k").retry_attempt == 2

    set_timers("alpha", k=fake_clock.now_ms())
    assert Timer.objects.get(extension_id="alpha", key="k").retry_attempt == 0
    assert timers_fire_page().retried == 1
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_sweep_that_fired_waits_for_timers_falling_due_within_the_pump_window(
    install, fake_clock, settings
):
    settings.HOST_TIMER_PUMP_MS = 200
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", t0=now, t1=now + 150, t2=now + 300, far=now + 600)

    assert timers_fire_due(budget_s=30) is False

    # t1 fell due 150 ms after t0 fired: waited for; t2 150 ms after that: waited for too;
    # `far` was 300 ms away, past the window: left to its wake
    assert set(effects("alpha")) == {"t0", "t1", "t2"}
    assert fake_clock.now_ms() == now + 300
    assert pending("alpha") == {"far": now + 600}
    assert timer_wake_mark() == now + 600


def test_a_timer_that_fell_due_while_a_page_ran_fires_without_a_gathering_wait(
    install, fake_clock, settings
):
    settings.HOST_TIMER_PUMP_MS = 200

    def slow(ctx: Any, timer: Any) -> None:
        record_timer(ctx, timer)
        if timer.key == "t0":
            fake_clock.advance(ms=50)  # the page takes 50 ms

    install(make_ext("alpha", on_timer=slow))
    now = fake_clock.now_ms()
    set_timers("alpha", t0=now, t1=now + 20, t2=now + 100)

    timers_fire_due(budget_s=30)

    # t1 was overdue when the first page ended: fired at once (no PUMP_GATHER_MS sleep), then
    # the pump waited exactly until t2
    assert set(effects("alpha")) == {"t0", "t1", "t2"}
    assert effects("alpha")["t1"].data[1] == now + 50
    assert fake_clock.now_ms() == now + 100


def test_only_the_sweep_holding_the_pump_lease_waits_for_the_next_timer(
    install, fake_clock, settings
):
    settings.HOST_TIMER_PUMP_MS = 200
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", t0=now, t1=now + 100, t2=now + 200)
    assert lease_claim(PUMP, until_ms=now + 60_000)  # another sweep is pumping

    timers_fire_due(budget_s=30)

    # it fired what was due and ended (no wait), leaving t1 to the pump and its wake
    assert set(effects("alpha")) == {"t0"}
    assert fake_clock.now_ms() == now
    assert timer_wake_mark() == now + 100

    lease_release(PUMP, until_ms=now + 60_000)
    fake_clock.advance(ms=100)
    timers_fire_due(budget_s=30)

    assert set(effects("alpha")) == {"t0", "t1", "t2"}  # the lease was free: it pumped
    assert lease_claim(PUMP, until_ms=now + 60_000)  # and gave it back when it ended


def test_a_lease_that_ran_out_is_taken_again(db, fake_clock):
    now = fake_clock.now_ms()
    assert lease_claim(PUMP, until_ms=now + 1000)  # its sweep died holding it
    assert not lease_claim(PUMP, until_ms=now + 60_000)
    fake_clock.advance(ms=1001)
    assert lease_claim(PUMP, until_ms=now + 60_000)


def test_timers_falling_behind_send_one_helper_sweep(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()

    def sweep(**options: Any) -> list[int]:
        with django_capture_on_commit_callbacks(execute=True):
            timers_fire_due(budget_s=30, **options)
        return [k["help_until"] for _, k in sent.of("fire_timers") if "help_until" in k]

    set_timers("alpha", on_time=now)
    assert sweep() == []  # on time: no help

    set_timers("alpha", late1=now - HELP_LATE_MS - 1)
    (help_until,) = sweep()
    set_timers("alpha", late2=now - HELP_LATE_MS - 1)
    assert sweep() == [help_until]  # the helper holds the `timer_help` lease: no second one
    assert not lease_claim(HELP, until_ms=help_until)

    set_timers("alpha", late3=now - HELP_LATE_MS - 1)
    assert sweep(help_until=help_until) == [help_until]  # the helper sends no other

    assert set(effects("alpha")) == {"on_time", "late1", "late2", "late3"}
    assert lease_claim(HELP, until_ms=help_until)  # it gave the lease back when it ended


def test_a_pump_reads_the_eligible_extensions_once_a_second_not_per_page(
    install, fake_clock, settings
):
    settings.HOST_TIMER_PUMP_MS = 200
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", t0=now, t1=now + 100, t2=now + 200)

    with CaptureQueriesContext(connection) as queries:
        timers_fire_due(budget_s=30)

    assert set(effects("alpha")) == {"t0", "t1", "t2"}  # three pages
    eligibility = [q for q in queries if "SELECT id, revision, admitted_grants" in q["sql"]]
    assert len(eligibility) == 1


def test_a_sweep_behind_the_stream_ends_at_its_budget_and_asks_to_run_again(
    install, fake_clock, settings
):
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", late=now - 50, next=now + 1000)

    assert timers_fire_due(budget_s=0) is True  # the task re-enqueues itself

    assert set(effects("alpha")) == {"late"}


def test_without_the_pump_a_sweep_fires_only_what_is_due(install, fake_clock, settings):
    settings.HOST_TIMER_PUMP_MS = 0
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", t0=now, t1=now + 150)

    timers_fire_due(budget_s=30)

    assert set(effects("alpha")) == {"t0"}
    assert fake_clock.now_ms() == now


def test_a_sweep_that_fired_nothing_never_waits(install, fake_clock, settings):
    settings.HOST_TIMER_PUMP_MS = 200
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", soon=now + 100)

    timers_fire_due(budget_s=30)

    assert effects("alpha") == {}
    assert fake_clock.now_ms() == now
