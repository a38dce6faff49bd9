"""Timer, wake and settled-delivery rules a mutation sweep found unprotected: an upsert moving
the fire instant, one wake per frame for its earliest timer, the pump's bounds (the gathering
wait, the window, the budget, the lease), helper sweeps, pages a shared page left alone, the
lateness a page reports, retry instants, the timers summary; wake instants and leases; settled
retries, pauses, cursors and page size; kicks going stale, page re-runs, after-commit enqueueing;
the backlog figures."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from conversations.models import Outcome, Run, RunStatus, SettledCounter
from conversations.selectors import SETTLED_BATCH_MAX
from core import clock
from core.errors import HostError
from core.services import lifecycle_record
from extensions_host.background.models import Kick, SettledCursor, Timer
from extensions_host.background.services import common, settled, timers
from extensions_host.background.services.backlog import backlog_figures
from extensions_host.background.services.common import (
    CHANNEL_SETTLED,
    KICK_STALE_MS,
    PAGE_ATTEMPTS,
    kick,
    kick_ensure,
    page_budget,
)
from extensions_host.background.services.lifecycle import lifecycle_fanout
from extensions_host.background.services.settled import (
    core_cursor,
    settled_consumers_behind,
    settled_cursor_initialise,
    settled_deliver,
    settled_deliver_all,
    settled_lag,
    settled_notify,
    settled_notify_extension,
)
from extensions_host.background.services.timers import (
    HELP_LATE_MS,
    LEASE_MARGIN_MS,
    PAGE,
    PUMP_GATHER_MS,
    TimerGroups,
    timer_groups,
    timers_fire_due,
    timers_fire_page,
    timers_summary,
)
from extensions_host.background.services.wake import (
    HELP,
    LOST_WAKE_MS,
    PUMP,
    lease_claim,
    lease_release,
    timer_wake_for_extension,
    timer_wake_mark,
    timer_wake_request,
)
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import current_frame
from extensions_host.runtime.deadlines import MAX_DEADLINE_SECONDS
from extensions_host.sdk import Retry

from .conftest import pending, roster, set_timers, settle_runs
from .exts import effects, make_ext, record_timer


def wakes(sent: Any) -> list[int]:
    return [kwargs["wake_at"] for _, kwargs in sent.of("fire_timers") if "wake_at" in kwargs]


def helpers(sent: Any) -> list[int]:
    return [kwargs["help_until"] for _, kwargs in sent.of("fire_timers") if "help_until" in kwargs]


class PageRows:
    """An `on_timer` hook recording, per extension, the roster rows its frame's page holds."""

    def __init__(self) -> None:
        self.held: dict[str, list[set[str]]] = {}

    def __call__(self, ctx: Any, timer: Any) -> None:
        frame = current_frame()
        assert frame is not None and frame.page is not None
        self.held.setdefault(ctx.extension_id, []).append(set(frame.page.rows))


# --- ctx.timers and wakes ---------------------------------------------------------------------


def test_a_timer_set_again_later_does_not_fire_at_its_old_instant(install, fake_clock):
    """An upsert moves the instant the timer fires at, not only the one it reports."""
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", k=now + 1000)
    set_timers("alpha", k=now + 5000)

    fake_clock.advance(ms=1000)
    assert timers_fire_page().claimed == 0
    fake_clock.advance(ms=4000)
    assert timers_fire_page().fired == 1


@pytest.mark.parametrize("order", [("late", "early"), ("early", "late")])
def test_a_frame_setting_several_timers_schedules_one_wake_for_its_earliest(
    install, fake_clock, sent, django_capture_on_commit_callbacks, order
):
    """One wake per frame, for the earliest instant it set, whatever the order of its sets."""
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    due = {"early": now + 1000, "late": now + 5000}

    with django_capture_on_commit_callbacks(execute=True):
        set_timers("alpha", **{key: due[key] for key in order})

    assert wakes(sent) == [now + 1000]
    assert timer_wake_mark() == now + 1000


# --- the pump ---------------------------------------------------------------------------------


def test_a_timer_falling_due_exactly_as_a_page_ends_fires_without_a_gathering_wait(
    install, fake_clock, settings
):
    """`_next_wait`: a timer due at this very instant is due (0), not gathered for 5 ms."""
    settings.HOST_TIMER_PUMP_MS = 200

    def slow(ctx: Any, timer: Any) -> None:
        record_timer(ctx, timer)
        if timer.key == "t0":
            fake_clock.advance(ms=20)

    install(make_ext("alpha", on_timer=slow))
    now = fake_clock.now_ms()
    set_timers("alpha", t0=now, t1=now + 20)

    timers_fire_due(budget_s=30)

    assert effects("alpha")["t1"].data == [now + 20, now + 20]


def test_a_timer_falling_due_within_the_gathering_wait_fires_after_it(
    install, fake_clock, settings
):
    """The pump waits at least `PUMP_GATHER_MS`, so a dense stream fires a few per page."""
    settings.HOST_TIMER_PUMP_MS = 200
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", t0=now, t1=now + 2)

    timers_fire_due(budget_s=30)

    assert effects("alpha")["t1"].data == [now + 2, now + PUMP_GATHER_MS]


def test_a_timer_falling_due_exactly_at_the_end_of_the_pump_window_is_waited_for(
    install, fake_clock, settings
):
    """The window is inclusive: a timer `HOST_TIMER_PUMP_MS` away is waited for."""
    settings.HOST_TIMER_PUMP_MS = 200
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", t0=now, t1=now + 200)

    timers_fire_due(budget_s=30)

    assert set(effects("alpha")) == {"t0", "t1"}
    assert fake_clock.now_ms() == now + 200


def test_the_pump_does_not_wait_past_its_sweeps_budget(install, fake_clock, settings):
    """A wait that would end after the sweep's budget is not taken: the timer is left to its
    wake."""
    settings.HOST_TIMER_PUMP_MS = 1000
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", t0=now, t1=now + 500)

    timers_fire_due(budget_s=0.1)

    assert set(effects("alpha")) == {"t0"}
    assert fake_clock.now_ms() == now
    assert timer_wake_mark() == now + 500


def test_the_pump_lease_outlives_the_sweeps_budget_by_the_lease_margin(
    install, fake_clock, settings, monkeypatch
):
    """The lease a pumping sweep takes lasts its budget plus `LEASE_MARGIN_MS` (the task's
    limit past its budget): no other sweep takes it while this one may still run."""
    settings.HOST_TIMER_PUMP_MS = 200
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", t0=now, t1=now + 100)
    claims: list[tuple[str, int]] = []

    def spying(name: str, *, until_ms: int) -> bool:
        claims.append((name, until_ms))
        return lease_claim(name, until_ms=until_ms)

    monkeypatch.setattr(timers, "lease_claim", spying)

    timers_fire_due(budget_s=30)

    assert set(effects("alpha")) == {"t0", "t1"}
    assert claims == [(PUMP, now + 30_000 + LEASE_MARGIN_MS)]


def test_without_the_pump_a_sweep_still_fires_page_after_page_while_timers_are_due(
    install, fake_clock, settings
):
    """`HOST_TIMER_PUMP_MS = 0` only stops the waiting: a sweep behind goes on to its next
    page at once."""
    settings.HOST_TIMER_PUMP_MS = 0
    install(make_ext("alpha", on_timer=record_timer))
    set_timers("alpha", **{f"t{n:03}": n for n in range(PAGE + 5)})

    assert timers_fire_due(budget_s=30) is False

    assert pending("alpha") == {}


def test_a_sweep_that_fired_only_timers_due_this_instant_does_not_ask_to_run_again(
    install, fake_clock
):
    """A page is behind only when it fired late timers (more may have fallen due meanwhile):
    one on time out of budget does not re-enqueue the task."""
    install(make_ext("alpha", on_timer=record_timer))
    set_timers("alpha", k=fake_clock.now_ms())

    assert timers_fire_due(budget_s=0) is False

    assert set(effects("alpha")) == {"k"}


# --- helper sweeps ------------------------------------------------------------------------------


def sweep(capture: Any, **options: Any) -> None:
    with capture(execute=True):
        timers_fire_due(budget_s=30, **options)


def test_a_page_exactly_help_late_ms_late_sends_no_helper_one_ms_more_does(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    """A helper is sent for timers more than `HELP_LATE_MS` late."""
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()

    set_timers("alpha", edge=now - HELP_LATE_MS)
    sweep(django_capture_on_commit_callbacks)
    assert helpers(sent) == []

    set_timers("alpha", late=now - HELP_LATE_MS - 1)
    sweep(django_capture_on_commit_callbacks)
    assert len(helpers(sent)) == 1


def test_a_page_is_as_late_as_its_oldest_timer(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    """The lateness of a page is its oldest claimed timer's, not its last one's: a late timer
    sharing a page with an on-time one still sends a helper."""
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", late=now - HELP_LATE_MS - 1, on_time=now)

    sweep(django_capture_on_commit_callbacks)

    assert len(helpers(sent)) == 1
    assert set(effects("alpha")) == {"late", "on_time"}


def test_the_pages_of_one_call_report_the_lateness_of_the_latest_of_them(install, fake_clock):
    """`PageResult.add` keeps the largest lateness, not the last page's."""
    install(make_ext("alpha", on_timer=record_timer), make_ext("beta", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", late=now - 50)
    set_timers("beta", on_time=now)

    result = timers_fire_page(groups=TimerGroups(shared=("alpha",), alone=("beta",)))

    assert (result.fired, result.late_ms) == (2, 50)


def test_a_helper_sweep_pumps_though_another_sweep_holds_the_pump_lease(
    install, fake_clock, settings
):
    """A helper waits for the next timer on its own `timer_help` lease."""
    settings.HOST_TIMER_PUMP_MS = 200
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", t0=now, t1=now + 100)
    assert lease_claim(PUMP, until_ms=now + 60_000)
    assert lease_claim(HELP, until_ms=now + 90_000)  # as `timer_help_request` took it

    timers_fire_due(budget_s=30, help_until=now + 90_000)

    assert set(effects("alpha")) == {"t0", "t1"}
    assert fake_clock.now_ms() == now + 100


def test_a_helper_sweep_that_found_nothing_due_still_waits_for_the_next_timer(
    install, fake_clock, settings
):
    """A helper pumps for its budget even when the pump took the due timers before it."""
    settings.HOST_TIMER_PUMP_MS = 200
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", t1=now + 100)
    assert lease_claim(HELP, until_ms=now + 90_000)

    timers_fire_due(budget_s=30, help_until=now + 90_000)

    assert set(effects("alpha")) == {"t1"}


# --- pages and groups ------------------------------------------------------------------------


def test_a_sweep_fires_the_timers_a_shared_page_left_alone_in_pages_of_their_own(
    install, fake_clock, monkeypatch
):
    """A shared page that finds an extension's deadline raised past the budget leaves its
    timers; the same sweep fires them, a page each, instead of ending or claiming them again
    in shared pages."""
    hook = PageRows()
    install(make_ext("alpha", on_timer=hook))
    monkeypatch.setattr(timers, "timer_groups", lambda: TimerGroups(shared=("alpha",)))
    RosterEntry.objects.filter(pk="alpha").update(deadline_seconds=120)  # since the groups
    set_timers("alpha", t1=1, t2=2)

    assert timers_fire_due(budget_s=0.5) is False

    assert pending("alpha") == {}
    assert hook.held == {"alpha": [{"alpha"}, {"alpha"}]}


def test_a_shared_page_of_two_timers_leaves_the_one_past_the_budget_alone(install, fake_clock):
    """Every shared page of more than one timer checks its extensions' deadlines."""
    hook = PageRows()
    install(make_ext("aalong", on_timer=hook), make_ext("zzquick", on_timer=hook))
    groups = timer_groups()
    RosterEntry.objects.filter(pk="aalong").update(deadline_seconds=120)
    set_timers("aalong", t=1)
    set_timers("zzquick", t=2)

    assert timers_fire_page(groups=groups).fired == 2

    assert hook.held == {"aalong": [{"aalong"}], "zzquick": [{"aalong", "zzquick"}]}


def test_a_deadline_equal_to_the_page_budget_shares_pages(install, fake_clock, settings):
    """The page budget is inclusive under the page's lock too: a deadline of exactly the
    budget fires in a shared page."""
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 30_000  # the page's budget: 60 s
    hook = PageRows()
    install(make_ext("alpha", on_timer=hook, deadline_s=60), make_ext("beta", on_timer=hook))
    set_timers("alpha", t=1)
    set_timers("beta", t=2)

    assert timers_fire_page().fired == 2

    assert hook.held == {"alpha": [{"alpha", "beta"}], "beta": [{"alpha", "beta"}]}


# --- retries ------------------------------------------------------------------------------------


def test_a_retry_of_less_than_a_millisecond_is_not_due_again_at_once(install, fake_clock):
    """The retry delay is rounded up to whole milliseconds, never down to none."""

    def hook(ctx: Any, timer: Any) -> None:
        raise Retry(0.0005, "soon")

    install(make_ext("alpha", on_timer=hook))
    now = fake_clock.now_ms()
    set_timers("alpha", k=now)

    assert timers_fire_page().retried == 1
    assert Timer.objects.get(extension_id="alpha").fire_at == now + 1
    assert timers_fire_page().claimed == 0


def test_a_late_timers_retry_delay_counts_from_its_failure_not_its_due_instant(install, fake_clock):
    """`Retry(2)` of a timer fired 10 s late: offered again 2 s after the failure."""

    def hook(ctx: Any, timer: Any) -> None:
        raise Retry(2, "later")

    install(make_ext("alpha", on_timer=hook))
    now = fake_clock.now_ms()
    set_timers("alpha", k=now - 10_000)

    assert timers_fire_page().retried == 1

    assert Timer.objects.get(extension_id="alpha").fire_at == now + 2000
    assert timers_fire_page().claimed == 0


# --- the summary --------------------------------------------------------------------------------


def test_the_timers_summary_counts_a_timer_due_this_instant_as_due(install, fake_clock):
    """Due is `fire_at <= now`, for the count and the oldest due age alike."""
    install(make_ext("alpha", on_timer=record_timer))
    set_timers("alpha", k=fake_clock.now_ms())

    summary = timers_summary(extension_id="alpha")

    assert (summary["pending"], summary["due"], summary["oldest_due_age_ms"]) == (1, 1, 0)


def test_the_timers_summary_gives_the_age_of_the_oldest_due_timer_and_the_rosters_quota(
    install, fake_clock
):
    """The age is the oldest due timer's; `max_timers` is the extension's own quota."""
    install(make_ext("alpha", on_timer=record_timer))
    RosterEntry.objects.filter(pk="alpha").update(quotas={"max_timers": 7})
    now = fake_clock.now_ms()
    set_timers("alpha", a=now - 5, b=now - 900, c=now - 40, d=now + 1)

    assert timers_summary(extension_id="alpha") == {
        "pending": 4,
        "due": 3,
        "oldest_due_age_ms": 900,
        "max_timers": 7,
    }


# --- wake instants and leases -------------------------------------------------------------------


def test_a_timer_exactly_at_the_wake_horizon_gets_a_precise_wake(
    install, fake_clock, sent, settings, django_capture_on_commit_callbacks
):
    """The horizon is inclusive: only timers past it are left to the beat sweep."""
    settings.HOST_WAKE_HORIZON_SECONDS = 60
    install(make_ext("alpha", on_timer=record_timer))
    due = fake_clock.now_ms() + 60_000

    with django_capture_on_commit_callbacks(execute=True):
        set_timers("alpha", edge=due)

    assert wakes(sent) == [due]


def test_a_wake_for_an_overdue_timer_is_scheduled_for_now_and_not_taken_for_a_lost_one(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    """The wake instant is never in the past: a mark at the overdue instant would look lost
    (`LOST_WAKE_MS`) and be replaced by the next timer's wake, a second task."""
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()

    with django_capture_on_commit_callbacks(execute=True):
        set_timers("alpha", overdue=now - 2 * LOST_WAKE_MS)
    with django_capture_on_commit_callbacks(execute=True):
        set_timers("alpha", soon=now + 100)

    (_, kwargs), *rest = sent.of("fire_timers")
    assert rest == []
    assert (kwargs["wake_at"], kwargs["eta"]) == (now, clock.from_ms(now))
    assert timer_wake_mark() == now


def test_a_wake_a_little_overdue_is_not_replaced_its_task_is_on_its_way(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    """Only a mark more than `LOST_WAKE_MS` in the past belongs to a lost task; one that is
    late by less (or exactly that) stays, and its task claims the next wake."""
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    with django_capture_on_commit_callbacks(execute=True):
        assert timer_wake_request(at_ms=now + 10)

    fake_clock.set(now + 10 + LOST_WAKE_MS)
    with django_capture_on_commit_callbacks(execute=True):
        set_timers("alpha", k=fake_clock.now_ms() + 500)
    assert wakes(sent) == [now + 10]
    assert timer_wake_mark() == now + 10

    fake_clock.advance(ms=1)
    assert timer_wake_request(at_ms=fake_clock.now_ms() + 500)


def test_a_stale_wake_task_leaves_the_mark_that_replaced_its_own(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    """A wake task clears the mark only if it is still its own instant: a lost task arriving
    after its mark was replaced schedules no second wake."""
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    with django_capture_on_commit_callbacks(execute=True):
        timer_wake_request(at_ms=now + 10)
    fake_clock.advance(ms=LOST_WAKE_MS + 100)
    with django_capture_on_commit_callbacks(execute=True):
        set_timers("alpha", k=fake_clock.now_ms() + 500)
    sent.clear()

    with django_capture_on_commit_callbacks(execute=True):
        timers_fire_due(wake_at=now + 10)  # the lost task after all

    assert wakes(sent) == []
    assert timer_wake_mark() == fake_clock.now_ms() + 500


def test_a_resume_schedules_no_wake_for_an_extension_whose_timers_may_not_fire(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    """`timer_wake_for_extension` counts the extension's timers only while it is eligible."""
    install(make_ext("alpha", on_timer=record_timer), make_ext("beta", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", a=now + 100)
    set_timers("beta", b=now + 200)
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.STOPPED, reason="x")

    with django_capture_on_commit_callbacks(execute=True):
        assert timer_wake_for_extension("alpha") is False

    assert wakes(sent) == []


def test_a_lease_is_held_up_to_and_including_its_instant(db, fake_clock):
    """A lease runs out only after `until_ms`."""
    now = fake_clock.now_ms()
    assert lease_claim(PUMP, until_ms=now + 1000)

    fake_clock.advance(ms=1000)
    assert not lease_claim(PUMP, until_ms=now + 60_000)
    fake_clock.advance(ms=1)
    assert lease_claim(PUMP, until_ms=now + 60_000)


def test_a_sweep_ending_after_its_lease_ran_out_leaves_the_lease_another_took(db, fake_clock):
    """A lease is given back only if it is still the one taken (its `until_ms`)."""
    now = fake_clock.now_ms()
    assert lease_claim(PUMP, until_ms=now + 1000)
    fake_clock.advance(ms=1001)
    assert lease_claim(PUMP, until_ms=now + 70_000)  # another sweep took it over

    lease_release(PUMP, until_ms=now + 1000)  # the first sweep ends late

    assert not lease_claim(PUMP, until_ms=now + 80_000)


# --- settled delivery ---------------------------------------------------------------------------


class Consumer:
    """An `on_settled` hook that remembers the sequences it committed (and fails on demand)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.fail: BaseException | None = None

    def __call__(self, ctx: Any, runs: list[Any]) -> None:
        if self.fail is not None:
            raise self.fail
        self.received.extend(run.sequence for run in runs)


def test_the_core_cursor_of_a_database_without_the_settled_counter_is_the_highest_sequence(
    install, conversation
):
    """A fresh or flushed database has no counter row: the core cursor is read from the runs."""
    conversation("c1")
    sequences = settle_runs("c1", 2)
    SettledCounter.objects.all().delete()

    assert core_cursor() == sequences[-1]


def test_settled_retries_are_bounded_and_then_count_as_a_defect(
    install, conversation, fake_clock, settings
):
    """Each `Retry` of the same batch counts: past `HOST_RETRY_LIMIT` the consumer stops."""
    settings.HOST_RETRY_LIMIT = 2
    consumer = Consumer()
    consumer.fail = Retry(1, "still down")
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    settle_runs("c1", 1)

    for _ in range(3):
        settled_deliver_all(extension_id="alpha")
        fake_clock.advance(seconds=1)

    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert roster("alpha").reason == "on_settled defect: retried 2 times: still down"


def test_a_delivery_after_a_retry_pause_ends_the_pause(install, conversation, fake_clock):
    """The batch delivered after a `Retry` clears the cursor's `not_before` and its count."""
    consumer = Consumer()
    consumer.fail = Retry(5, "busy")
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    sequences = settle_runs("c1", 1)
    settled_deliver_all(extension_id="alpha")
    assert SettledCursor.objects.get(pk="alpha").not_before == fake_clock.now_ms() + 5000

    consumer.fail = None
    fake_clock.advance(seconds=5)
    settled_deliver_all(extension_id="alpha")

    cursor = SettledCursor.objects.get(pk="alpha")
    assert (cursor.position, cursor.not_before, cursor.retry_attempt) == (sequences[-1], None, 0)


def test_a_delivery_with_nothing_to_deliver_leaves_the_cursor_row_alone(
    install, conversation, fake_clock
):
    """The cursor row is written only when it moves or pauses: its `updated_at` is when it
    last did."""
    install(make_ext("alpha", on_settled=Consumer()))
    settled_cursor_initialise(extension_id="alpha")
    before = SettledCursor.objects.get(pk="alpha").updated_at
    fake_clock.advance(seconds=3600)

    assert settled_deliver(extension_id="alpha") is False

    assert SettledCursor.objects.get(pk="alpha").updated_at == before


def test_a_delivery_to_a_consumer_without_a_cursor_gives_it_one_at_the_core_cursor(
    install, conversation
):
    """A consumer whose cursor row is missing starts at the core cursor (no history), and
    receives what settles from then on."""
    consumer = Consumer()
    install(make_ext("alpha", on_settled=consumer))
    conversation("c1")
    before = settle_runs("c1", 2)
    SettledCursor.objects.filter(pk="alpha").delete()

    assert settled_deliver(extension_id="alpha") is False

    assert SettledCursor.objects.get(pk="alpha").position == before[-1]
    after = settle_runs("c1", 1)
    settled_deliver_all(extension_id="alpha")
    assert consumer.received == after


def test_beats_sweep_gives_a_consumer_without_a_cursor_one_at_the_core_cursor(
    install, conversation
):
    """`settled_consumers_behind` creates the missing cursor at the core cursor: the runs
    settled before are not owed."""
    install(make_ext("alpha", on_settled=Consumer()))
    conversation("c1")
    sequences = settle_runs("c1", 2)
    SettledCursor.objects.filter(pk="alpha").delete()

    assert settled_consumers_behind() == []

    assert SettledCursor.objects.get(pk="alpha").position == sequences[-1]


def test_a_delivery_gives_no_cursor_to_a_consumer_that_may_not_run(install, conversation):
    """Only an eligible consumer gets a cursor from a delivery: a stopped one gets its own
    when it runs again."""
    install(make_ext("alpha", on_settled=Consumer()))
    SettledCursor.objects.filter(pk="alpha").delete()
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.STOPPED, reason="x")

    assert settled_deliver(extension_id="alpha") is False

    assert not SettledCursor.objects.filter(pk="alpha").exists()


def test_a_delivery_task_out_of_budget_with_runs_left_asks_to_run_again(
    install, conversation, settings, monkeypatch
):
    """`settled_deliver_all` ends at its budget and returns True while runs are waiting."""
    settings.HOST_SETTLED_BATCH = 2
    monkeypatch.setattr(settled, "PAGE_FRAMES", 1)
    consumer = Consumer()
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    sequences = settle_runs("c1", 3)

    assert settled_deliver_all(extension_id="alpha", budget_s=0) is True

    assert consumer.received == sequences[:2]


def test_a_failing_settled_kick_never_raises_into_the_committed_settle(
    install, monkeypatch, caplog
):
    """`settled_after_commit` logs a failed kick; beat's sweep is the safety net."""

    def broken() -> list[str]:
        raise RuntimeError("broker down")

    monkeypatch.setattr(settled, "settled_notify", broken)

    settled.settled_after_commit()

    assert "settled delivery kick failed" in caplog.text


def test_a_resume_kicks_no_settled_consumer_that_may_not_run(
    install, sent, django_capture_on_commit_callbacks
):
    """`settled_notify_extension` enqueues only an eligible consumer."""
    install(make_ext("alpha", on_settled=Consumer()))
    RosterEntry.objects.filter(pk="alpha").update(status=ExtensionStatus.STOPPED, reason="x")

    with django_capture_on_commit_callbacks(execute=True):
        assert settled_notify_extension("alpha") == []

    assert sent.of("deliver_settled") == []


def test_a_resume_kicks_a_consumer_whose_kick_row_is_missing(
    install, sent, django_capture_on_commit_callbacks
):
    """The resume's kick creates the consumer's kick row first (one created before kicks
    existed, or lost)."""
    install(make_ext("alpha", on_settled=Consumer()))
    Kick.objects.filter(channel=CHANNEL_SETTLED, extension_id="alpha").delete()

    with django_capture_on_commit_callbacks(execute=True):
        assert settled_notify_extension("alpha") == ["alpha"]

    assert [args for args, _ in sent.of("deliver_settled")] == [("alpha",)]


def test_a_cursor_ahead_of_the_core_cursor_has_no_negative_lag(install, conversation):
    """Lag is never below zero (a restored counter behind a consumer's cursor); a consumer
    without a cursor has none."""
    install(make_ext("alpha", on_settled=Consumer()))
    core = core_cursor()
    SettledCursor.objects.filter(pk="alpha").update(position=core + 5)

    assert settled_lag(extension_id="alpha") == {"cursor": core + 5, "core_cursor": core, "lag": 0}
    SettledCursor.objects.filter(pk="alpha").delete()
    assert settled_lag(extension_id="alpha") == {"cursor": None, "core_cursor": core, "lag": None}


def settled_in_bulk(conversation_id: str, count: int) -> list[int]:
    """`count` runs settled unanswered in the conversation, written in bulk (the test is about
    delivery pages, not settling); returns their sequences."""
    now, start = clock.now(), core_cursor()
    sequences = list(range(start + 1, start + count + 1))
    Run.objects.bulk_create(
        [
            Run(
                conversation_id=conversation_id,
                status=RunStatus.SETTLED,
                claimed_at=now,
                lease_expires_at=now,
                settled_at=now,
                outcome=Outcome.UNANSWERED,
                reason="bulk",
                settled_sequence=sequence,
            )
            for sequence in sequences
        ]
    )
    SettledCounter.objects.filter(pk=1).update(value=sequences[-1])
    return sequences


def test_a_delivery_page_reads_no_more_runs_than_one_read_may_return(
    install, conversation, settings
):
    """Frames per page are cut to `SETTLED_BATCH_MAX // batch`: a page never asks for more
    runs than the read returns, so a full page still reports that more are waiting."""
    settings.HOST_SETTLED_BATCH = 600
    consumer = Consumer()
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    sequences = settled_in_bulk("c1", SETTLED_BATCH_MAX + 1)

    assert settled_deliver(extension_id="alpha", frames=2) is True
    assert consumer.received == sequences[:600]
    assert settled_deliver(extension_id="alpha", frames=2) is False

    assert consumer.received == sequences


# --- shared pieces: kicks, pages, enqueueing ----------------------------------------------------


def test_a_kick_is_sent_again_only_once_it_is_more_than_kick_stale_ms_old(
    install, fake_clock, sent, django_capture_on_commit_callbacks
):
    """A pending kick whose task has not cleared it is taken for lost strictly after
    `KICK_STALE_MS`: the next trigger enqueues again."""
    install(make_ext("alpha", on_settled=Consumer()))
    with django_capture_on_commit_callbacks(execute=True):
        assert settled_notify() == ["alpha"]

    fake_clock.advance(ms=KICK_STALE_MS)
    assert kick(CHANNEL_SETTLED) == []
    fake_clock.advance(ms=1)
    assert kick(CHANNEL_SETTLED) == ["alpha"]


def test_kicks_return_the_consumers_they_flipped_in_id_order(install):
    """`kick` returns sorted ids whatever order the rows were made in."""
    install(make_ext("zeta", on_settled=Consumer()), make_ext("alpha", on_settled=Consumer()))
    Kick.objects.filter(channel=CHANNEL_SETTLED).delete()
    kick_ensure(CHANNEL_SETTLED, ["zeta", "beta", "alpha"])

    assert kick(CHANNEL_SETTLED) == ["alpha", "beta", "zeta"]


def test_the_page_budget_is_twice_the_worker_deadline_at_most_300_seconds(settings):
    """`page_budget()`: `PAGE_BUDGET_DEADLINES` worker deadlines, capped at the longest
    deadline."""
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 100_000
    assert page_budget() == 200
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 200_000
    assert page_budget() == MAX_DEADLINE_SECONDS == 300


def unavailable() -> HostError:
    return HostError("store", "unavailable", "could not write the stop")


def test_a_background_page_is_run_again_after_a_stop_it_could_not_write(monkeypatch):
    """`page_with_retries` runs the page again on `store/unavailable`, `PAGE_ATTEMPTS` times
    in all, then raises it."""
    calls: list[int] = []
    failures = {"left": PAGE_ATTEMPTS - 1}

    def flaky(fn: Any, **options: Any) -> str:
        calls.append(1)
        if failures["left"]:
            failures["left"] -= 1
            raise unavailable()
        return "done"

    monkeypatch.setattr(common, "run_page", flaky)
    monkeypatch.setattr(common.time, "sleep", lambda seconds: None)

    assert common.page_with_retries(lambda page: None) == "done"
    assert len(calls) == PAGE_ATTEMPTS

    calls.clear()
    failures["left"] = PAGE_ATTEMPTS
    with pytest.raises(HostError):
        common.page_with_retries(lambda page: None)
    assert len(calls) == PAGE_ATTEMPTS


def test_a_background_page_failing_for_another_cause_is_not_run_again(monkeypatch):
    """Only `unavailable` is retried."""
    calls: list[int] = []

    def conflict(fn: Any, **options: Any) -> None:
        calls.append(1)
        raise HostError("store", "conflict", "no")

    monkeypatch.setattr(common, "run_page", conflict)

    with pytest.raises(HostError):
        common.page_with_retries(lambda page: None)
    assert calls == [1]


def test_a_failing_enqueue_after_commit_is_not_raised(db, django_capture_on_commit_callbacks):
    """`enqueue`: a broker failure never raises into the committed operation."""

    def broker_down() -> None:
        raise RuntimeError("broker down")

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        common.enqueue(broker_down)

    assert len(callbacks) == 1


# --- the backlog figures ------------------------------------------------------------------------


def test_the_backlog_figures_count_a_timer_due_this_instant_and_no_oldest_when_none_is_due(
    install, fake_clock
):
    """Due is `fire_at <= now`; with no timer due there is no oldest due one."""
    install(make_ext("alpha", on_timer=record_timer))
    now = fake_clock.now_ms()
    set_timers("alpha", later=now + 1)
    assert backlog_figures()["timers"] == {
        "pending": 1,
        "due": 0,
        "oldest_due_at": None,
        "oldest_due_age_ms": None,
    }

    set_timers("alpha", edge=now)
    assert backlog_figures()["timers"] == {
        "pending": 2,
        "due": 1,
        "oldest_due_at": now,
        "oldest_due_age_ms": 0,
    }


def test_the_backlog_lag_of_consumers_is_never_negative_and_none_without_a_cursor(
    install, conversation
):
    """Per consumer: no cursor, no lag (not 0); a cursor ahead of the core cursor, lag 0; the
    largest lag is over every consumer."""
    install(
        make_ext("alpha", on_settled=Consumer()),
        make_ext("beta", on_settled=Consumer()),
        make_ext("gamma", on_settled=Consumer()),
    )
    conversation("c1")
    settle_runs("c1", 2)
    core = core_cursor()
    SettledCursor.objects.filter(pk="alpha").update(position=core + 5)
    SettledCursor.objects.filter(pk="beta").delete()
    SettledCursor.objects.filter(pk="gamma").update(position=core - 2)

    figures = backlog_figures()["settled"]

    assert figures["consumers"] == {
        "alpha": {"cursor": core + 5, "core_cursor": core, "lag": 0},
        "beta": {"cursor": None, "core_cursor": core, "lag": None},
        "gamma": {"cursor": core - 2, "core_cursor": core, "lag": 2},
    }
    assert figures["max_lag"] == 2


def test_the_backlog_counts_outbox_events_not_fanned_out_yet(install):
    """`unfanned`: events with no fan-out row."""
    install(make_ext("alpha", lifecycle={"conversation_created": lambda ctx, event: None}))
    with transaction.atomic():
        for cid in ("c1", "c2"):
            lifecycle_record(kind="conversation_created", conversation_id=cid, payload={})
    assert backlog_figures()["outbox"]["unfanned"] == 2

    lifecycle_fanout()

    assert backlog_figures()["outbox"]["unfanned"] == 0
