"""Precise timer wakes: one coalesced next-wake instant and one `eta` task within the horizon."""

from __future__ import annotations

from typing import Any

from core import clock
from extensions_host.background.services.timers import timers_fire_due
from extensions_host.background.services.wake import (
    LOST_WAKE_MS,
    timer_next_fire_at,
    timer_wake_mark,
    timer_wake_request,
)
from extensions_host.models import ExtensionStatus, RosterEntry

from .conftest import in_frame, resume
from .exts import make_ext, record_timer


def set_timer(extension_id: str, key: str, due: int, *, fail: bool = False) -> None:
    def body(ctx: Any) -> None:
        ctx.timers.set(key, due)
        if fail:
            raise RuntimeError("rolled back")

    in_frame(extension_id, body, failures="stop" if fail else "return")


def wakes(sent: Any) -> list[int]:
    return [kwargs["wake_at"] for _, kwargs in sent.of("fire_timers")]


def test_a_timer_within_the_horizon_schedules_one_eta_wake_after_commit(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    install(make_ext("alpha", on_timer=record_timer))
    due = fake_clock.now_ms() + 300

    with django_capture_on_commit_callbacks(execute=True):
        set_timer("alpha", "k", due)

    (_, kwargs), *rest = sent.of("fire_timers")
    assert rest == []
    assert kwargs["wake_at"] == due
    assert kwargs["eta"] == clock.from_ms(due)
    assert timer_wake_mark() == due


def test_wakes_coalesce_later_timers_ride_on_the_earlier_wake_earlier_ones_reschedule(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()

    with django_capture_on_commit_callbacks(execute=True):
        set_timer("alpha", "a", now + 5000)
        set_timer("alpha", "b", now + 9000)  # later: the 5 s wake covers it
        set_timer("alpha", "c", now + 6000)
        set_timer("alpha", "d", now + 1000)  # earlier: a new wake

    assert wakes(sent) == [now + 5000, now + 1000]
    assert timer_wake_mark() == now + 1000


def test_timers_beyond_the_horizon_rely_on_the_beat_sweep(
    install, fake_clock, sent, settings, django_capture_on_commit_callbacks
):
    settings.HOST_WAKE_HORIZON_SECONDS = 60
    install(make_ext("alpha", on_timer=record_timer))

    with django_capture_on_commit_callbacks(execute=True):
        set_timer("alpha", "far", fake_clock.now_ms() + 61_000)

    assert wakes(sent) == []
    assert timer_wake_mark() is None


def test_a_rolled_back_frame_schedules_no_wake(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    install(make_ext("alpha", on_timer=record_timer))

    with django_capture_on_commit_callbacks(execute=True):
        set_timer("alpha", "k", fake_clock.now_ms() + 100, fail=True)

    assert wakes(sent) == []


def test_a_wake_clears_its_mark_fires_and_claims_the_wake_for_the_next_timer(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    with django_capture_on_commit_callbacks(execute=True):
        set_timer("alpha", "a", now + 300)
        set_timer("alpha", "b", now + 800)
    sent.clear()

    fake_clock.advance(ms=300)
    with django_capture_on_commit_callbacks(execute=True):
        timers_fire_due(wake_at=now + 300)

    assert wakes(sent) == [now + 800]
    assert timer_wake_mark() == now + 800


def test_a_wake_that_ran_early_schedules_itself_again(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    install(make_ext("alpha", on_timer=record_timer))
    due = fake_clock.now_ms() + 300
    with django_capture_on_commit_callbacks(execute=True):
        set_timer("alpha", "a", due)
    sent.clear()

    fake_clock.advance(ms=290)  # the broker delivered it 10 ms early
    with django_capture_on_commit_callbacks(execute=True):
        timers_fire_due(wake_at=due)

    assert wakes(sent) == [due]


def test_a_lost_wake_is_replaced_and_a_duplicate_wake_is_harmless(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    with django_capture_on_commit_callbacks(execute=True):
        timer_wake_request(at_ms=now + 10)
        fake_clock.advance(ms=LOST_WAKE_MS + 100)  # its task never ran
        set_timer("alpha", "k", fake_clock.now_ms() + 500)
        # the stale task arrives after all: it only sweeps (nothing due) and re-claims nothing
        timers_fire_due(wake_at=now + 10)

    assert wakes(sent) == [now + 10, fake_clock.now_ms() + 500]
    assert timer_wake_mark() == fake_clock.now_ms() + 500


def test_stopped_extensions_timers_do_not_count_for_the_wake_and_resume_schedules_one(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    install(make_ext("alpha", on_timer=record_timer), make_ext("beta", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timer("alpha", "a", now + 100)
    set_timer("beta", "b", now + 40_000)
    RosterEntry.objects.filter(pk="alpha").update(
        status=ExtensionStatus.STOPPED, reason="stopped for the test"
    )

    assert timer_next_fire_at() == now + 40_000
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        resume("alpha")

    assert timer_next_fire_at() == now + 100
    assert wakes(sent) == [now + 100]
