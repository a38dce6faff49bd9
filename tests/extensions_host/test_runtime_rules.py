"""Runtime rules a mutation sweep found unprotected: pages (their budget, optimistic re-runs,
outcome listeners, delivery counts), crash counts, stop reasons (a swallowed store failure, the
first guard violation, a raise past the deadline), store races, `transact`/`update` and detached
contexts, extension code outside frames, and the deadline a hook gets."""

from __future__ import annotations

import contextlib
import contextvars
import signal
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.core.cache import cache
from django.db import DatabaseError, IntegrityError, OperationalError

from extensions_host import registry
from extensions_host.models import ExtensionRecord, ExtensionStatus, RosterEntry
from extensions_host.runtime import (
    current,
    deadlines,
    detached_context,
    outcomes,
    run_frame,
    run_page,
)
from extensions_host.runtime.crashes import CRASH_LIMIT, delivery_counted, unfinished_deliveries
from extensions_host.runtime.current import HookDeadline, current_frame
from extensions_host.runtime.frames import hook_deadline
from extensions_host.runtime.outside import bounded, outside_reason
from extensions_host.sdk import AdmissionError, CommandError, ExtensionStop, Retry, StateError

from .conftest import roster
from .exts import Item, make_ext
from .test_api import board_ext, projection


@pytest.fixture(autouse=True)
def _fresh_counts() -> None:
    cache.clear()  # delivery counts live in the cache, which outlives a test's database


def records(extension_id: str) -> list[str]:
    return sorted(
        ExtensionRecord.objects.filter(extension_id=extension_id).values_list("key", flat=True)
    )


def put(key: str) -> Any:
    return lambda ctx: ctx.collection("item").put(Item(key=key))


def page_frame(page: Any, extension_id: str = "alpha", call: Any = None, **options: Any) -> Any:
    return run_frame(
        extension_id=extension_id,
        hook="on_timer",
        call=call or (lambda ctx: None),
        page=page,
        **options,
    )


# --- pages ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("time_limit_s", "boundary", "deadline_s", "second"),
    [
        (None, "worker", 20, ("ok", "")),  # the worker's 30 s budget
        (None, "request", 20, ("skipped", "page")),  # the request's 5 s budget
        (10, "worker", 8, ("ok", "")),
        (10, "worker", 10.5, ("skipped", "page")),  # ends past what is left of the 10 s
    ],
)
def test_a_page_starts_a_frame_after_its_first_only_when_its_deadline_ends_within_the_budget(
    install, time_limit_s, boundary, deadline_s, second
):
    install(make_ext("alpha"))

    def body(page: Any) -> list[tuple[str, str]]:
        return [
            (outcome.status, outcome.skip)
            for outcome in (
                page_frame(page, deadline_s=deadline_s),  # the first, whatever its deadline
                page_frame(page, deadline_s=deadline_s),
            )
        ]

    assert run_page(body, boundary=boundary, time_limit_s=time_limit_s) == [("ok", ""), second]


def test_the_delivery_counts_of_a_pages_frames_are_cleared_when_the_page_ends(install):
    install(make_ext("alpha"))

    run_page(lambda page: page_frame(page, item="t@0"), time_limit_s=10)

    assert unfinished_deliveries(extension_id="alpha", hook="on_timer", item="t@0") == 0


def test_an_optimistic_page_runs_again_isolated_without_calling_the_failed_hook_again(install):
    install(make_ext("alpha"), make_ext("beta"))
    calls: list[str] = []

    def failing(ctx: Any) -> None:
        calls.append("alpha")
        ctx.collection("item").put(Item(key="a1"))
        raise RuntimeError("boom")

    def body(page: Any) -> list[str]:
        return [
            page_frame(page, "beta", put("b1"), item="b").status,
            page_frame(page, "alpha", failing, item="a").status,
            page_frame(page, "beta", put("b2"), item="c").status,
        ]

    assert run_page(body, time_limit_s=10, optimistic=True) == ["ok", "stopped", "ok"]
    assert calls == ["alpha"]
    assert roster("alpha").reason == "on_timer defect: boom"
    assert records("alpha") == []
    assert records("beta") == ["b1", "b2"]


@pytest.mark.parametrize("optimistic", [True, False], ids=["optimistic", "isolated"])
def test_host_trouble_in_a_page_runs_the_whole_page_again(install, optimistic):
    """Host trouble is no failure of the frame: it is not kept as the frame's outcome (nor does
    it make an optimistic page isolated); the page's transaction runs again from its start."""
    install(make_ext("alpha"), make_ext("beta"))
    calls: list[str] = []

    def counted(extension_id: str, fail_once: bool) -> Any:
        def call(ctx: Any) -> None:
            calls.append(extension_id)
            ctx.collection("item").put(Item(key=f"{extension_id[0]}1"))
            if fail_once and calls.count(extension_id) == 1:
                raise OperationalError("database is locked")

        return call

    def body(page: Any) -> list[str]:
        return [
            page_frame(page, "beta", counted("beta", False), item="b").status,
            page_frame(page, "alpha", counted("alpha", True), item="a").status,
        ]

    assert run_page(body, time_limit_s=10, optimistic=optimistic) == ["ok", "ok"]
    assert calls == ["beta", "alpha", "beta", "alpha"]
    assert (records("alpha"), records("beta")) == (["a1"], ["b1"])


COMMITTED = [("beta", "ok"), ("alpha", "ok")]
RE_RUN = [("beta", "ok"), ("alpha", "stopped")]


@pytest.mark.parametrize(
    ("alpha_call", "heard", "heard_in_body"),
    [
        (put("a1"), COMMITTED, [[]]),
        # the aborted optimistic run is never heard; its isolated re-run is, as it goes
        (lambda ctx: 1 / 0, RE_RUN, [RE_RUN]),
    ],
    ids=["committed", "aborted-then-isolated"],
)
def test_outcome_listeners_hear_an_optimistic_pages_frames_once_after_it_ran(
    install, monkeypatch, alpha_call, heard, heard_in_body
):
    install(make_ext("alpha"), make_ext("beta"))
    got: list[tuple[str, str]] = []
    monkeypatch.setattr(
        outcomes, "outcome_listeners", [lambda ext, outcome: got.append((ext, outcome.status))]
    )
    during: list[list[tuple[str, str]]] = []

    def body(page: Any) -> None:
        page_frame(page, "beta", put("b1"), item="b")
        page_frame(page, "alpha", alpha_call, item="a")
        during.append(list(got))

    run_page(body, time_limit_s=10, optimistic=True)

    assert got == heard
    assert during == heard_in_body


def test_a_failing_outcome_listener_changes_nothing_the_frame_did(install, monkeypatch):
    def broken(extension_id: str, outcome: Any) -> None:
        raise RuntimeError("metrics are down")

    install(make_ext("alpha"))
    monkeypatch.setattr(outcomes, "outcome_listeners", [broken])

    outcome = run_frame(extension_id="alpha", hook="on_timer", call=put("a1"))

    assert outcome.ok
    assert records("alpha") == ["a1"]


# --- delivery counts -----------------------------------------------------------------------


def test_deliveries_of_one_item_to_two_hooks_are_counted_apart():
    dying = {"extension_id": "x", "hook": "on_timer", "item": "k@1"}
    other = {**dying, "hook": "on_settled"}
    for _ in range(CRASH_LIMIT):
        delivery_counted(**dying).__enter__()  # a delivery whose process died: never finished

    with delivery_counted(**other) as exhausted:
        assert not exhausted
    assert unfinished_deliveries(**dying) == CRASH_LIMIT


# --- frames --------------------------------------------------------------------------------


def test_a_write_in_a_context_copied_by_a_hook_after_it_returned_stops_the_extension(install):
    """The copy still holds the frame, closed: the write is outside any transaction."""
    kept: list[tuple[contextvars.Context, Any]] = []

    def hook(ctx: Any) -> None:
        kept.append((contextvars.copy_context(), ctx))  # e.g. for a thread it leaves behind

    install(make_ext("alpha"))
    assert run_frame(extension_id="alpha", hook="on_timer", call=hook).ok
    copied, ctx = kept[0]

    with pytest.raises(ExtensionStop) as raised:
        copied.run(ctx.collection("item").put, Item(key="late"))

    reason = "on_timer defect: Extension write used outside its own core transaction"
    assert raised.value.reason == reason
    assert roster("alpha").reason == reason
    assert records("alpha") == []


def test_a_write_with_the_context_of_an_earlier_frame_stops_the_extension(install):
    kept: list[Any] = []
    install(make_ext("alpha"))
    assert run_frame(extension_id="alpha", hook="on_timer", call=kept.append).ok

    outcome = run_frame(
        extension_id="alpha",
        hook="on_timer",
        call=lambda ctx: kept[0].collection("item").put(Item(key="stale")),
    )

    assert outcome.reason == "on_timer defect: Extension write used a context of an earlier frame"
    assert records("alpha") == []


def test_a_read_with_another_extensions_context_stops_the_extension_whose_frame_ran_it(install):
    install(make_ext("alpha"), make_ext("beta"))
    beta = detached_context(extension_id="beta", hook="worker w")
    assert beta is not None

    outcome = run_frame(
        extension_id="alpha", hook="on_timer", call=lambda ctx: beta.collection("item").get("k")
    )

    assert outcome.reason == "on_timer defect: Extension read used another extension's context"
    assert roster("beta").status == ExtensionStatus.RUNNING


def test_the_first_guard_violation_is_the_stop_reason_when_the_hook_swallowed_them_all(install):
    install(make_ext("alpha"), make_ext("beta"))
    beta = detached_context(extension_id="beta", hook="worker w")
    assert beta is not None

    def hook(ctx: Any) -> None:
        with contextlib.suppress(BaseException):  # even the host's interrupt
            ctx.collection("item").put(Item(key="k"))  # a write in a read-only hook
        with contextlib.suppress(BaseException):
            beta.collection("item").get("k")  # a read with another extension's context

    outcome = run_frame(extension_id="alpha", hook="project", call=hook, mode="read")

    assert outcome.status == "stopped"
    assert outcome.reason == "project defect: Extension write used in a read-only hook"


def test_a_swallowed_store_failure_stops_the_extension_as_state_unavailable(install, monkeypatch):
    """The hook caught the store's error and returned: the frame cannot commit, and the stop
    reads as the typed error the hook was given, never the database's own message."""

    def broken(**kwargs: Any) -> None:
        raise DatabaseError("disk I/O error at /var/lib/hyphae/db")

    def hook(ctx: Any) -> None:
        try:
            ctx.collection("item").put(Item(key="k"))
        except StateError:
            pass

    install(make_ext("alpha"))
    monkeypatch.setattr("extensions_host.services.records.record_put", broken)

    outcome = run_frame(extension_id="alpha", hook="on_timer", call=hook)

    assert outcome.status == "stopped"
    assert outcome.reason == "on_timer: StateError: Extension state is unavailable"
    assert roster("alpha").reason == outcome.reason


@pytest.mark.parametrize(
    ("error", "failures"),
    [(ValueError("late failure"), "stop"), (CommandError("conflict", "late"), "return")],
    ids=["defect", "typed-error"],
)
def test_a_hook_raising_after_its_deadline_passed_is_stopped_for_the_deadline(
    install, error, failures
):
    def hook(ctx: Any) -> None:
        frame = current_frame()
        assert frame is not None
        frame.started -= frame.deadline_s + 1  # as if it had run that long
        raise error

    install(make_ext("alpha"))

    outcome = run_frame(extension_id="alpha", hook="on_timer", call=hook, failures=failures)

    assert (outcome.status, outcome.reason) == ("stopped", "on_timer exceeded its deadline")


# --- transact and detached contexts ---------------------------------------------------------


def alpha_detached(install: Any, hook: str) -> Any:
    """`alpha` installed, and a context of it outside any frame (a worker's or a route's)."""
    install(make_ext("alpha"))
    ctx = detached_context(extension_id="alpha", hook=hook)
    assert ctx is not None
    return ctx


def test_a_retry_raised_in_transact_reaches_its_caller_with_its_delay_and_reason(install):
    ctx = alpha_detached(install, "worker w")

    def body(ctx: Any) -> None:
        ctx.collection("item").put(Item(key="rolled-back"))
        raise Retry(7, "upstream is down")

    with pytest.raises(Retry) as raised:
        ctx.transact(body)

    assert (raised.value.after_seconds, raised.value.reason) == (7, "upstream is down")
    assert records("alpha") == []


def test_a_write_in_transact_checks_the_grants_the_frame_read_not_the_contexts_copy(install):
    """A route's context keeps the grants of when it was made; a staff revocation since then
    holds for the frames it opens, also for writes through that context itself."""
    ctx = alpha_detached(install, "route r")
    RosterEntry.objects.filter(pk="alpha").update(admitted_grants=["timers"])

    with pytest.raises(AdmissionError) as raised:
        ctx.transact(lambda _: ctx.collection("item").put(Item(key="a1")))

    assert (raised.value.kind, raised.value.message) == ("closed", "Extension is not granted state")
    assert records("alpha") == []


def test_a_statement_timeout_in_a_store_call_stops_the_extension_for_its_deadline(
    install, monkeypatch
):
    def timed_out(**kwargs: Any) -> None:
        error = OperationalError("canceling statement due to statement timeout")
        error.sqlstate = "57014"  # type: ignore[attr-defined]
        raise error

    install(make_ext("alpha"))
    monkeypatch.setattr("extensions_host.services.records.record_put", timed_out)

    outcome = run_frame(extension_id="alpha", hook="on_timer", call=put("k"))

    assert (outcome.status, outcome.reason) == ("stopped", "on_timer exceeded its deadline")


def test_a_store_call_racing_another_frames_first_write_retries_the_frame(install, monkeypatch):
    """An integrity error in a store call is two first writes of one key: the frame runs again
    and sees the other's row; it is never the extension's defect."""
    from extensions_host.services import records as record_store

    real = record_store.record_put
    calls: list[int] = []

    def racing(**kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise IntegrityError("UNIQUE constraint failed")
        real(**kwargs)

    install(make_ext("alpha"))
    monkeypatch.setattr(record_store, "record_put", racing)

    outcome = run_frame(extension_id="alpha", hook="on_timer", call=put("k"))

    assert outcome.ok, outcome
    assert len(calls) == 2
    assert records("alpha") == ["k"]


def test_update_refuses_a_capability_other_than_state_and_keeps_nothing(install):
    ctx = alpha_detached(install, "worker w")

    def body(ctx: Any) -> None:
        ctx.collection("item").put(Item(key="rolled-back"))
        ctx.timers.set("t1", 0)

    with pytest.raises(StateError) as raised:
        ctx.update(body)

    assert (raised.value.kind, raised.value.message) == (
        "unavailable",
        "Only state is available inside update, not timers",
    )
    assert records("alpha") == []


def test_transact_is_refused_inside_a_frame(install):
    refused: list[tuple[str, str]] = []

    def hook(ctx: Any) -> None:
        try:
            ctx.transact(put("nested"))
        except StateError as exc:
            refused.append((exc.kind, exc.message))

    install(make_ext("alpha"))

    assert run_frame(extension_id="alpha", hook="on_timer", call=hook).ok
    assert refused == [("unavailable", "Extension transaction is unavailable")]
    assert records("alpha") == []


def test_an_extension_loaded_here_but_not_in_the_roster_gets_no_detached_context(install):
    install(make_ext("alpha"), sync=False)

    assert detached_context(extension_id="alpha", hook="worker w") is None


# --- extension code outside any frame ------------------------------------------------------


def test_code_outside_a_frame_that_returns_past_its_deadline_raises_the_deadline(
    install, monkeypatch
):
    """The elapsed check after the return (what bounds the call where no alarm can)."""
    install(make_ext("alpha"))
    loaded = registry.get("alpha")
    assert loaded is not None
    shift = [0.0]
    monkeypatch.setattr(
        current, "time", SimpleNamespace(monotonic=lambda: time.monotonic() + shift[0])
    )

    def slow() -> str:
        shift[0] = 2.0  # it took 2 s of a 1 s deadline
        return "late"

    with pytest.raises(HookDeadline, match="route r exceeded its deadline"):
        bounded(loaded, "route r", 1.0, slow)


def test_off_the_main_thread_an_abandoned_call_still_running_at_its_deadline_raises_it(install):
    """No alarm off the main thread: `shutdown` is run in a daemon thread given up at its
    deadline, and the overrun reads as one."""
    install(make_ext("alpha"))
    loaded = registry.get("alpha")
    assert loaded is not None
    release = threading.Event()
    raised: list[BaseException] = []

    def worker_thread() -> None:
        try:
            bounded(loaded, "shutdown", 0.05, release.wait, abandon=True)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=worker_thread)
    thread.start()
    thread.join()
    release.set()

    assert [(type(exc), str(exc)) for exc in raised] == [
        (HookDeadline, "shutdown exceeded its deadline")
    ]


def test_a_routes_alarm_falling_while_the_host_runs_a_frames_own_code_is_raised_when_it_is_done(
    install,
):
    """Interrupted mid-command, the connection would be unusable: the frame's bookkeeping and
    commit finish, then the route's deadline is raised and the route goes no further."""
    install(make_ext("alpha"))
    loaded = registry.get("alpha")
    assert loaded is not None
    went_on: list[str] = []

    def route() -> None:
        run_frame(
            extension_id="alpha",
            hook="transact",
            call=put("k"),
            failures="return",
            finish=lambda result: signal.raise_signal(signal.SIGALRM),  # the route's alarm
        )
        went_on.append("after the frame")

    with pytest.raises(HookDeadline, match="route r exceeded its deadline"):
        bounded(loaded, "route r", 10.0, route)

    assert went_on == []
    assert records("alpha") == ["k"]


def test_a_call_bounded_inside_another_never_outlives_it(install):
    install(make_ext("alpha"))
    loaded = registry.get("alpha")
    assert loaded is not None

    def inner() -> float | None:
        return bounded(loaded, "inner", 10.0, deadlines.seconds_left)

    left = bounded(loaded, "route r", 1.0, inner)

    assert left is not None
    assert 0 < left <= 1.0


@pytest.mark.parametrize(
    ("error", "ran_s", "reason"),
    [
        (ValueError("bad"), 0.0, "route r defect: bad"),
        (ValueError("bad"), 2.0, "route r exceeded its deadline"),  # any raise once past it
        (ExtensionStop("given up"), 2.0, "given up"),  # its own reason, even past it
        # the backstop of a worker task: Celery's soft time limit is the deadline too
        (SoftTimeLimitExceeded(), 0.0, "route r exceeded its deadline"),
    ],
)
def test_the_reason_of_a_failure_outside_a_frame(error, ran_s, reason):
    started = time.monotonic() - ran_s

    assert outside_reason("route r", error, started=started, limit=1.0) == reason


# --- projection -----------------------------------------------------------------------------


def test_a_project_returning_none_keeps_the_catalog_without_calling_project_catalog(
    install, conversation, owner, api
):
    adapted: list[Any] = []

    def drop_all(value: Any, catalog: list[Any]) -> list[Any]:
        adapted.append(value)
        return []

    install(board_ext(project=lambda ctx, cid: None, project_catalog=drop_all))
    conversation("c1")

    slot = projection(api(owner)).json()["slots"]["board"]

    assert slot["value"] is None
    assert sorted(entry["name"] for entry in slot["catalog"]) == ["add", "clear"]
    assert adapted == []


# --- the deadline a hook gets --------------------------------------------------------------


@pytest.mark.parametrize(
    ("ext_deadline", "row_override", "explicit", "expected"),
    [
        (None, None, None, 5.0),  # the request boundary's default
        (3.0, None, None, 3.0),  # the extension's own
        (3.0, 2.0, None, 2.0),  # the staff override over the extension's
        (3.0, 2.0, 7.0, 7.0),  # the call's own over both
        (None, None, 1000.0, 300.0),  # never above 300 s
        (None, None, 0.0, 0.001),  # never 0
    ],
)
def test_a_hooks_deadline_takes_the_most_specific_limit_clamped_to_300_seconds(
    install, ext_deadline, row_override, explicit, expected
):
    install(make_ext("alpha", deadline_s=ext_deadline))
    row = roster("alpha")
    row.deadline_seconds = row_override
    row.save()
    loaded = registry.get("alpha")
    assert loaded is not None

    assert hook_deadline(row, loaded, explicit, boundary="request") == expected


def test_a_hooks_deadline_ends_a_margin_before_the_call_it_runs_in(install):
    install(make_ext("alpha"))
    loaded = registry.get("alpha")
    assert loaded is not None

    with deadlines._deadline_known(2):
        limit = hook_deadline(roster("alpha"), loaded, 10.0)

    assert 1.5 < limit <= 1.75


@pytest.mark.parametrize(
    ("deadline_s", "timeouts_ms"),
    [(5.0, (5000, 2500)), (0.003, (3, 1)), (0.0001, (1, 1))],
)
def test_database_lock_waits_end_at_half_the_deadline_and_no_limit_is_ever_zero(
    deadline_s, timeouts_ms
):
    """(`statement_timeout`, `lock_timeout`): a lock timeout is host trouble, retried, so it must
    come well before the deadline that stops the extension; 0 would disable either."""
    assert deadlines.database_timeouts_ms(deadline_s) == timeouts_ms
