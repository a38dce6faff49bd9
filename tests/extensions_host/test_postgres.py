"""Concurrency on real PostgreSQL with separate connections (threads): stops are honoured
everywhere, a stop waits for frames in flight, transient database errors never stop."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections, transaction

from extensions_host.models import ExtensionDocument, ExtensionRecord, ExtensionStatus
from extensions_host.runtime import extension_stop, run_frame
from extensions_host.services.quotas import usage_totals
from extensions_host.services.roster import roster_sync
from tests.postgres import someone_waits_for_a_lock, wait_until

from .conftest import fire_timer, roster
from .exts import Item, Pad, make_ext

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run `fn` on its own thread (its own database connection)."""
    results: list[Any] = []

    def run() -> None:
        try:
            results.append(fn())
        except BaseException as exc:
            results.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, results


def test_a_stop_committed_on_one_connection_is_honoured_by_the_next_frame_on_another(install):
    calls: list[str] = []
    install(make_ext("alpha", on_timer=lambda ctx, timer: calls.append(timer.key)))
    assert fire_timer("alpha", key="before").ok

    thread, results = in_thread(
        lambda: extension_stop(extension_id="alpha", hook="on_timer", reason="stopped elsewhere")
    )
    thread.join(timeout=30)
    assert results[0].applied

    outcome = fire_timer("alpha", key="after")

    assert outcome.skip == "stopped"
    assert outcome.reason == "stopped elsewhere"
    assert calls == ["before"]


def test_a_stop_waits_for_an_in_flight_frame_and_no_frame_starts_after_it(install):
    started, release = threading.Event(), threading.Event()

    def slow(ctx: Any, timer: Any) -> None:
        ctx.collection("item").put(Item(key="in-flight"))
        started.set()
        assert release.wait(timeout=20)

    install(make_ext("alpha", on_timer=slow))
    frame_thread, frame_result = in_thread(lambda: fire_timer("alpha"))
    assert started.wait(timeout=20)

    stop_thread, stop_result = in_thread(
        lambda: extension_stop(extension_id="alpha", hook="staff", reason="stop now")
    )
    wait_until(someone_waits_for_a_lock)  # the stop's FOR UPDATE queues behind the FOR SHARE
    assert stop_thread.is_alive() and not stop_result
    assert roster("alpha").status == ExtensionStatus.RUNNING

    release.set()
    frame_thread.join(timeout=30)
    stop_thread.join(timeout=30)

    assert frame_result[0].ok  # the in-flight frame committed its work
    assert stop_result[0].applied
    assert list(ExtensionRecord.objects.values_list("key", flat=True)) == ["in-flight"]
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert fire_timer("alpha").skip == "stopped"


def test_a_stop_waits_for_a_page_that_locked_the_extensions_row(install):
    """A page holds the roster rows it locked up front until it commits, even between its
    frames: a stop queues behind it, and the page's frames run on the row they locked."""
    from extensions_host.runtime import run_page

    locked, release = threading.Event(), threading.Event()
    install(make_ext("alpha"))

    def page_body(page: Any) -> str:
        page.lock(["alpha"])
        locked.set()
        assert release.wait(timeout=20)
        call = lambda ctx: ctx.collection("item").put(Item(key="in-page"))  # noqa: E731
        return run_frame(extension_id="alpha", hook="on_timer", call=call, page=page).status

    page_thread, page_result = in_thread(lambda: run_page(page_body, time_limit_s=30))
    assert locked.wait(timeout=20)
    stop_thread, stop_result = in_thread(
        lambda: extension_stop(extension_id="alpha", hook="staff", reason="stop now")
    )
    wait_until(someone_waits_for_a_lock)
    assert stop_thread.is_alive() and not stop_result

    release.set()
    page_thread.join(timeout=30)
    stop_thread.join(timeout=30)

    assert page_result == ["ok"]
    assert stop_result[0].applied
    assert list(ExtensionRecord.objects.values_list("key", flat=True)) == ["in-page"]
    assert roster("alpha").status == ExtensionStatus.STOPPED


def test_a_write_from_a_thread_with_the_frames_context_never_escapes_the_frame(install):
    """That thread's connection is not in the frame's transaction: its write would commit on
    its own, whatever becomes of the frame."""
    results: list[Any] = []

    def hook(ctx: Any, timer: Any) -> None:
        ctx.collection("item").put(Item(key="own"))
        context = contextvars.copy_context()  # what `asyncio.to_thread` hands its thread
        thread, result = in_thread(
            lambda: context.run(ctx.collection("item").put, Item(key="escaped"))
        )
        thread.join(timeout=30)
        results.extend(result)

    install(make_ext("alpha", on_timer=hook))

    outcome = fire_timer("alpha")

    assert [type(result).__name__ for result in results] == ["FrameDefect"]
    assert outcome.reason == "on_timer defect: Extension write used from another thread"
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert not ExtensionRecord.objects.exists()


def test_a_deadlock_inside_frames_is_retried_and_stops_nothing(install):
    barrier = threading.Barrier(2, timeout=20)
    attempts: dict[str, int] = {"x-then-y": 0, "y-then-x": 0}

    def crossing(name: str, first: str, second: str) -> Callable[[Any], None]:
        def body(ctx: Any) -> None:
            attempts[name] += 1
            items = ctx.collection("item")
            items.put(Item(key=first, n=attempts[name]))
            if attempts[name] == 1:
                barrier.wait()  # each frame holds one row and now wants the other's
            items.put(Item(key=second, n=attempts[name]))

        return body

    install(make_ext("alpha"))
    bodies = [crossing(name, *name.split("-then-")) for name in attempts]
    threads = [
        in_thread(
            lambda body=body: run_frame(
                extension_id="alpha", hook="on_timer", boundary="worker", call=body
            )
        )
        for body in bodies
    ]
    for thread, _ in threads:
        thread.join(timeout=60)

    outcomes = [result[0] for _, result in threads]
    assert [o.status for o in outcomes] == ["ok", "ok"], outcomes
    assert sorted(attempts.values()) == [1, 2]  # PostgreSQL broke the deadlock; one retried
    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert sorted(ExtensionRecord.objects.values_list("key", flat=True)) == ["x", "y"]


def test_a_serialization_failure_inside_a_frame_is_retried_and_stops_nothing(install):
    attempts: list[int] = []

    def hook(ctx: Any, timer: Any) -> None:
        attempts.append(1)
        ctx.collection("item").put(Item(key="k", n=len(attempts)))
        if len(attempts) == 1:
            with connection.cursor() as cursor:  # a real 40001 from the server
                cursor.execute(
                    "DO $$ BEGIN RAISE EXCEPTION 'could not serialize' "
                    "USING ERRCODE = 'serialization_failure'; END $$"
                )

    install(make_ext("alpha", on_timer=hook))

    outcome = fire_timer("alpha")

    assert outcome.ok
    assert len(attempts) == 2
    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert ExtensionRecord.objects.get().value.startswith('{"key":"k","n":2')


def test_a_postgres_statement_timeout_is_the_hooks_deadline(install):
    def hook(ctx: Any, timer: Any) -> None:
        ctx.collection("item").put(Item(key="k"))
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(10)")

    install(make_ext("alpha", on_timer=hook))
    thread, result = in_thread(lambda: fire_timer("alpha", deadline_s=0.3))  # no SIGALRM here
    thread.join(timeout=30)

    assert result[0].reason == "on_timer exceeded its deadline"
    assert result[0].elapsed_s < 5
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert not ExtensionRecord.objects.exists()


def test_concurrent_syncs_are_serialised(install):
    install(make_ext("alpha"), sync=False)
    threads = [in_thread(roster_sync) for _ in range(4)]
    for thread, _ in threads:
        thread.join(timeout=60)

    results = [result[0] for _, result in threads]
    assert not [r for r in results if isinstance(r, BaseException)]
    assert sum(len(r.installed) for r in results) == 1
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_frames_lock_waits_end_well_before_its_deadline(install):
    seen: list[tuple[str, str]] = []

    def hook(ctx: Any, timer: Any) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
            )
            seen.append(cursor.fetchone())

    install(make_ext("alpha", on_timer=hook))

    assert fire_timer("alpha", deadline_s=4).ok

    assert seen == [("4s", "2s")]


@pytest.mark.parametrize("where", ["main thread", "other thread"])
def test_a_lock_timeout_inside_a_hook_is_retried_and_never_stops_the_extension(install, where):
    """Another connection holds the row the hook writes: its lock wait times out (55P03) before
    the deadline (SIGALRM on the main thread, the elapsed check elsewhere), and the step is
    retried, not a deadline stop."""
    attempts: list[int] = []
    held, release = threading.Event(), threading.Event()

    def hook(ctx: Any, timer: Any) -> None:
        attempts.append(1)
        if len(attempts) > 1:
            release.set()  # the holder commits now: this attempt gets the row
        ctx.collection("item").put(Item(key="k", n=len(attempts)))

    install(make_ext("alpha", on_timer=hook))
    run_frame(
        extension_id="alpha",
        hook="test",
        call=lambda ctx: ctx.collection("item").put(Item(key="k")),
    )

    def hold() -> None:
        with transaction.atomic():
            ExtensionRecord.objects.select_for_update().get(extension_id="alpha", key="k")
            held.set()
            assert release.wait(timeout=20)

    holder, _ = in_thread(hold)
    assert held.wait(timeout=20)
    if where == "main thread":
        outcome = fire_timer("alpha", deadline_s=1)
    else:
        thread, result = in_thread(lambda: fire_timer("alpha", deadline_s=1))
        thread.join(timeout=30)
        outcome = result[0]
    release.set()
    holder.join(timeout=30)

    assert outcome.ok, outcome
    assert len(attempts) == 2
    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert ExtensionRecord.objects.get().value.startswith('{"key":"k","n":2')


def first_holds_while_second_runs(
    first: Callable[[Any], Any], second: Callable[[Any], Any]
) -> tuple[Any, Any]:
    """Run `first` in a frame until it has written and signals `written` (its frame still
    open), start `second` in another frame, let `first` commit once `second` waits for a lock;
    both outcomes."""
    written, release = threading.Event(), threading.Event()

    def holding(ctx: Any) -> Any:
        value = first(ctx)
        written.set()
        assert release.wait(timeout=20)
        return value

    one, one_result = in_thread(lambda: run_frame(extension_id="alpha", hook="test", call=holding))
    assert written.wait(timeout=20)
    two, two_result = in_thread(lambda: run_frame(extension_id="alpha", hook="test", call=second))
    wait_until(someone_waits_for_a_lock)
    release.set()
    one.join(timeout=30)
    two.join(timeout=30)
    return one_result[0], two_result[0]


def append(text: str) -> Callable[[Any], Any]:
    return lambda ctx: ctx.document("pad").update("c1", lambda pad: Pad(text=pad.text + text))


def stored_pad() -> str:
    return ExtensionDocument.objects.get(extension_id="alpha", name="pad").value


def test_concurrent_updates_of_one_document_apply_one_after_the_other(install, conversation):
    """The second update reads the document under its row lock, after the first committed."""
    install(make_ext("alpha"))
    conversation("c1")
    assert run_frame(extension_id="alpha", hook="test", call=append("")).ok

    one, two = first_holds_while_second_runs(append("A"), append("B"))

    assert one.ok and two.ok
    assert stored_pad() == '{"text":"AB"}'


def test_concurrent_first_updates_of_a_document_wait_for_each_other_without_a_retry(
    install, conversation
):
    """No row yet: the first update inserts the row it locks, so the second waits for it rather
    than also starting from the initial value (and losing, or retrying, its frame)."""
    install(make_ext("alpha"))
    conversation("c1")
    attempts: list[int] = []

    def second(ctx: Any) -> Any:
        attempts.append(1)
        return append("B")(ctx)

    one, two = first_holds_while_second_runs(append("A"), second)

    assert one.ok and two.ok
    assert stored_pad() == '{"text":"AB"}'
    assert len(attempts) == 1


def test_concurrent_removes_of_one_record_remove_it_once_and_charge_the_usage_once(install):
    install(make_ext("alpha"))
    put = lambda key: lambda ctx: ctx.collection("item").put(Item(key=key))  # noqa: E731
    assert run_frame(extension_id="alpha", hook="test", call=put("k")).ok
    assert run_frame(extension_id="alpha", hook="test", call=put("keep")).ok
    remove = lambda ctx: ctx.collection("item").remove("k")  # noqa: E731

    one, two = first_holds_while_second_runs(remove, remove)

    assert (one.value, two.value) == (True, False)
    kept = ExtensionRecord.objects.get(extension_id="alpha")
    assert kept.key == "keep"
    assert usage_totals(extension_id="alpha") == (1, kept.size_bytes)
