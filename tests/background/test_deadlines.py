"""Deadlines of background hooks (spec 02 §1, spec 03 group commit): every frame of a page has
its hook's whole deadline — the extension's `deadline_s`, the staff override, else the worker
default — never cut to what is left of the page; a page with no time left for a frame's whole
deadline leaves its item to the next page; a timer whose deadline is past a page's budget fires
in a page of its own, holding no other extension's timers or roster rows; the sweep tasks' time
limits cover the longest page.

The pages' clock is a fake one the hooks advance, so no test sleeps."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection, transaction

from core.services import lifecycle_record
from extensions_host.background import tasks
from extensions_host.background.models import Timer
from extensions_host.background.services import timers
from extensions_host.background.services.common import eligible_ids
from extensions_host.background.services.lifecycle import (
    lifecycle_deliver,
    lifecycle_deliver_all,
    lifecycle_fanout,
)
from extensions_host.background.services.settled import (
    settled_cursor_initialise,
    settled_deliver,
    settled_deliver_all,
)
from extensions_host.background.services.timers import (
    TimerGroups,
    timer_groups,
    timers_fire_due,
    timers_fire_page,
)
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import current_frame, pages
from extensions_host.runtime.deadlines import MAX_DEADLINE_SECONDS

from .conftest import in_frame, roster, settle_runs
from .exts import make_ext


class PageClock:
    """The monotonic clock of frame pages, advanced by the hooks instead of by sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def page_clock(monkeypatch: pytest.MonkeyPatch) -> PageClock:
    clock = PageClock()
    monkeypatch.setattr(pages, "time", clock)
    return clock


class Slow:
    """A hook that takes `took` seconds of the page's clock and records its frame's deadline,
    and the roster rows its page holds (the extensions of every timer the page claimed)."""

    def __init__(self, clock: PageClock | None = None, took: float = 0.0) -> None:
        self.clock = clock
        self.took = took
        self.deadlines: list[float] = []
        self.held: list[set[str]] = []

    def __call__(self, ctx: Any, *args: Any) -> None:
        frame = current_frame()
        assert frame is not None
        self.deadlines.append(frame.deadline_s)
        if frame.page is not None:
            self.held.append(set(frame.page.rows))
        if self.clock is not None:
            self.clock.now += self.took


def arm(extension_id: str, *keys: str) -> None:
    def body(ctx: Any) -> None:
        for n, key in enumerate(keys):
            ctx.timers.set(key, n)  # due long ago, in this order

    assert in_frame(extension_id, body).ok


# --- timers ----------------------------------------------------------------------------------


def test_a_timer_hook_keeps_its_whole_deadline_after_another_extension_used_the_page(
    install, page_clock, settings
):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 300
    slow, quick = Slow(page_clock, 0.2), Slow(page_clock, 0.12)
    install(make_ext("aaslow", on_timer=slow), make_ext("zzquick", on_timer=quick))
    arm("aaslow", "t")
    arm("zzquick", "t")

    result = timers_fire_page()

    assert result.fired == 2  # one page
    assert slow.deadlines == quick.deadlines == [0.3]
    assert roster("aaslow").status == roster("zzquick").status == ExtensionStatus.RUNNING


def test_a_timer_hook_gets_its_extensions_longer_deadline(install, settings):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 100
    hook = Slow()
    install(make_ext("alpha", on_timer=hook, deadline_s=2))
    arm("alpha", "t")

    assert timers_fire_page().fired == 1
    assert hook.deadlines == [2]


def test_a_staff_override_above_the_worker_default_applies_to_timer_hooks(install):
    hook = Slow()
    install(make_ext("alpha", on_timer=hook))
    RosterEntry.objects.filter(pk="alpha").update(deadline_seconds=120)
    arm("alpha", "t")

    assert timers_fire_page().fired == 1
    assert hook.deadlines == [120]


def test_a_page_without_time_for_a_frames_whole_deadline_leaves_its_timer_to_the_next_page(
    install, page_clock, settings
):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 300  # the page's budget is twice that: 0.6 s
    hook = Slow(page_clock, 0.25)
    install(make_ext("alpha", on_timer=hook))
    arm("alpha", "t1", "t2", "t3")

    first = timers_fire_page()

    # t1 and t2 started with their 0.3 s ahead; after 0.5 s only 0.1 s was left for t3
    assert (first.claimed, first.fired, first.skipped) == (3, 2, 1)
    assert list(Timer.objects.values_list("key", flat=True)) == ["t3"]
    assert timers_fire_page().fired == 1
    assert hook.deadlines == [0.3, 0.3, 0.3]
    assert not Timer.objects.exists()
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_timer_whose_deadline_is_past_the_page_budget_fires_in_a_page_holding_no_other_timer(
    install, page_clock, settings
):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 300  # the page's budget: 0.6 s
    long, quick = Slow(page_clock, 1.5), Slow(page_clock, 0.1)
    install(make_ext("aalong", on_timer=long, deadline_s=2), make_ext("zzquick", on_timer=quick))
    arm("aalong", "t1", "t2")
    arm("zzquick", "t1", "t2", "t3")  # due as early as the long one's

    assert timers_fire_due(budget_s=30) is False

    # each long timer ran in a page of its own: the page claimed no other timer (it would hold
    # its extension's roster row), so the quick ones were free for any sweep meanwhile
    assert long.held == [{"aalong"}, {"aalong"}]
    assert long.deadlines == [2, 2]
    assert quick.deadlines == [0.3, 0.3, 0.3]
    assert all(held == {"zzquick"} for held in quick.held)
    assert not Timer.objects.exists()
    assert roster("aalong").status == roster("zzquick").status == ExtensionStatus.RUNNING


def test_every_due_timer_of_a_long_deadline_extension_fires_in_one_call_a_page_each(
    install, page_clock, settings
):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 300
    long, quick = Slow(page_clock, 1.5), Slow(page_clock, 0.1)
    install(make_ext("aalong", on_timer=long), make_ext("zzquick", on_timer=quick))
    RosterEntry.objects.filter(pk="aalong").update(deadline_seconds=120)  # a staff override
    arm("aalong", "t1", "t2", "t3")
    arm("zzquick", "t1", "t2")

    result = timers_fire_page()  # the author harness's and the bench's call

    assert (result.claimed, result.fired, result.skipped) == (5, 5, 0)
    assert long.held == [{"aalong"}] * 3
    assert long.deadlines == [120] * 3
    assert quick.held == [{"zzquick"}] * 2  # one page for both
    assert not Timer.objects.exists()


def test_a_sweep_out_of_budget_serves_the_group_it_left_out_first_in_its_next_round(
    install, page_clock, settings
):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 300
    long, quick = Slow(page_clock, 1.5), Slow(page_clock, 0.1)
    install(make_ext("aalong", on_timer=long, deadline_s=2), make_ext("zzquick", on_timer=quick))
    arm("aalong", "t1", "t2", "t3")
    arm("zzquick", "t1", "t2", "t3")

    # no budget: a round fires one group's page, leaves the other's and asks to run again; the
    # next round starts with the group left out, so neither waits behind the other
    served = []
    for _ in range(2):
        before = len(long.deadlines), len(quick.deadlines)
        assert timers_fire_due(budget_s=0) is True
        served.append((len(long.deadlines) - before[0], len(quick.deadlines) - before[1]))

    assert sorted(served) == [(0, 3), (1, 0)]
    assert long.held == [{"aalong"}]
    assert Timer.objects.filter(extension_id="aalong").count() == 2


def test_a_deadline_raised_past_the_budget_since_the_groups_were_read_keeps_out_of_shared_pages(
    install, page_clock, settings
):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 300
    long, quick = Slow(page_clock, 1.5), Slow(page_clock, 0.1)
    install(make_ext("aalong", on_timer=long), make_ext("zzquick", on_timer=quick))
    groups = timer_groups()  # read before the override: both share pages
    assert groups == TimerGroups(shared=("aalong", "zzquick"))
    RosterEntry.objects.filter(pk="aalong").update(deadline_seconds=120)
    arm("aalong", "t1", "t2")
    arm("zzquick", "t1")

    result = timers_fire_page(groups=groups)

    # the shared page read the new deadline under its lock and left the long timers alone
    assert result.fired == 3
    assert quick.held == [{"aalong", "zzquick"}]
    assert long.held == [{"aalong"}, {"aalong"}]
    assert long.deadlines == [120, 120]


def test_the_timer_groups_are_the_eligible_extensions_split_by_their_deadline(install, settings):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 30_000  # the page's budget: 60 s
    install(
        make_ext("alpha", deadline_s=60),  # fits the budget exactly
        make_ext("beta", deadline_s=61),
        make_ext("gamma"),
        make_ext("delta"),
        make_ext("stopped", deadline_s=120),
        make_ext("ungranted", grants={"state"}, deadline_s=120),
        make_ext("moved", deadline_s=120),
    )
    RosterEntry.objects.filter(pk="gamma").update(deadline_seconds=90)
    RosterEntry.objects.filter(pk="beta").update(deadline_seconds=45)  # the override wins
    RosterEntry.objects.filter(pk="stopped").update(status=ExtensionStatus.STOPPED, reason="x")
    RosterEntry.objects.filter(pk="moved").update(revision="0" * 64)  # another process's code

    groups = timer_groups()

    assert groups == TimerGroups(shared=("alpha", "beta", "delta"), alone=("gamma",))
    assert groups.ids == eligible_ids("timers")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_long_deadline_hook_running_holds_no_other_extensions_timers_or_roster_row(
    install, settings, sent, monkeypatch
):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 300
    running, release = threading.Event(), threading.Event()

    def long(ctx: Any, timer: Any) -> None:
        running.set()
        release.wait(timeout=10)

    install(make_ext("aalong", on_timer=long, deadline_s=30), make_ext("zzquick", on_timer=Slow()))
    arm("aalong", "t1")
    arm("zzquick", "t1", "t2")  # due when the long one's page claims
    monkeypatch.setattr(timers, "_rounds", itertools.count(1))  # its round runs the long first

    def sweep() -> None:
        try:
            timers_fire_due(budget_s=30)
        finally:
            connection.close()

    slow_sweep = threading.Thread(target=sweep)
    slow_sweep.start()
    try:
        assert running.wait(timeout=10)
        # while the long hook runs, another sweep fires the quick timers (the long one's page
        # claimed none of them), and a staff stop of the quick extension would not wait
        assert timers_fire_page().fired == 2
        with transaction.atomic():
            assert RosterEntry.objects.select_for_update(nowait=True).filter(pk="zzquick").exists()
    finally:
        release.set()
        slow_sweep.join(timeout=10)
    assert not Timer.objects.exists()


# --- settled and lifecycle -----------------------------------------------------------------


def test_settled_batches_each_get_the_whole_deadline_and_the_next_page_takes_the_rest(
    install, conversation, page_clock, settings
):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 300
    settings.HOST_SETTLED_BATCH = 1
    hook = Slow(page_clock, 0.2)
    install(make_ext("alpha", on_settled=hook))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    settle_runs("c1", 3)

    # two batches fit the page's 0.6 s with their whole 0.3 s; the third waits, and more is
    # reported so the task goes on
    assert settled_deliver(extension_id="alpha", frames=64) is True
    assert hook.deadlines == [0.3, 0.3]
    assert settled_deliver_all(extension_id="alpha") is False

    assert hook.deadlines == [0.3, 0.3, 0.3]
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_lifecycle_handler_gets_its_extensions_deadline(install, settings):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 100
    hook = Slow()
    install(make_ext("alpha", lifecycle={"conversation_created": hook}, deadline_s=2))
    with transaction.atomic():
        lifecycle_record(kind="conversation_created", conversation_id="c1", payload={})
    lifecycle_fanout()

    lifecycle_deliver_all(extension_id="alpha")

    assert hook.deadlines == [2]


def test_a_lifecycle_event_left_for_the_next_page_is_delivered_by_the_same_task(
    install, page_clock, settings
):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 300
    hook = Slow(page_clock, 0.25)
    install(make_ext("alpha", lifecycle={"conversation_created": hook}))
    with transaction.atomic():
        for cid in ("c1", "c2", "c3"):
            lifecycle_record(kind="conversation_created", conversation_id=cid, payload={})
    lifecycle_fanout()

    # two events fit the page's 0.6 s with their whole 0.3 s; the third is left for the next
    # page, and the page says so, so this task goes on instead of waiting for beat's sweep
    assert lifecycle_deliver(extension_id="alpha") is True
    assert hook.deadlines == [0.3, 0.3]
    assert lifecycle_deliver_all(extension_id="alpha") is False

    assert hook.deadlines == [0.3, 0.3, 0.3]
    assert roster("alpha").status == ExtensionStatus.RUNNING


# --- the database side and the task limits ----------------------------------------------------


@pytest.mark.postgres
def test_a_frame_with_a_longer_deadline_than_the_worker_default_gets_its_statement_timeout(
    install,
):
    shown: list[str] = []

    def hook(ctx: Any, timer: Any) -> None:
        with connection.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")
            shown.append(cursor.fetchone()[0])

    install(make_ext("alpha", on_timer=hook))
    RosterEntry.objects.filter(pk="alpha").update(deadline_seconds=120)
    arm("alpha", "t")

    assert timers_fire_page().fired == 1
    assert shown == ["2min"]


@pytest.mark.parametrize(
    "task",
    [tasks.fire_timers, tasks.deliver_settled, tasks.deliver_lifecycle, tasks.lifecycle_fanout],
)
def test_a_sweep_tasks_soft_time_limit_covers_its_budget_and_the_longest_page(task):
    longest = django_settings.HOST_SWEEP_BUDGET_SECONDS + MAX_DEADLINE_SECONDS
    assert task.soft_time_limit > longest
    assert task.time_limit > task.soft_time_limit
