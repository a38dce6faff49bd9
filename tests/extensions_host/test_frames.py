"""Isolation: what stops an extension, what rolls back, and what others see (spec 02 §3)."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import threading
import time
from typing import Any

import pytest
from django.db import DatabaseError, OperationalError

from core.errors import HostError
from core.models import AuditEntry
from extensions_host import registry
from extensions_host.models import ExtensionRecord, ExtensionStatus
from extensions_host.runtime import detached_context, run_frame, secret_sources
from extensions_host.sdk import ExtensionStop, Retry, StateError, TimerEvent

from .conftest import fire_timer, roster
from .exts import Item, make_ext, put_item


def raise_after_write(message: str) -> Any:
    def hook(ctx: Any, timer: Any) -> None:
        ctx.collection("item").put(Item(key="written-before-failure"))
        raise RuntimeError(message)

    return hook


def records(extension_id: str) -> list[str]:
    return list(
        ExtensionRecord.objects.filter(extension_id=extension_id).values_list("key", flat=True)
    )


def test_a_raising_hook_rolls_back_only_its_writes_and_stops_only_its_extension(install):
    install(
        make_ext("alpha", on_timer=raise_after_write("boom")),
        make_ext("beta", on_timer=put_item("b1")),
    )
    assert fire_timer("beta").ok

    outcome = fire_timer("alpha")

    assert outcome.status == "stopped"
    assert outcome.reason == "on_timer defect: boom"
    alpha = roster("alpha")
    assert alpha.status == ExtensionStatus.STOPPED
    assert alpha.reason == "on_timer defect: boom"
    assert alpha.failing_hook == "on_timer"
    assert alpha.stopped_at is not None
    assert len(alpha.stop_event_id) == 32
    assert alpha.last_error == "on_timer defect: boom"
    assert records("alpha") == []
    audit = AuditEntry.objects.get(action="extension_stopped", target="alpha")
    assert audit.detail["event_id"] == alpha.stop_event_id
    # the other extension is untouched and keeps running hooks
    assert roster("beta").status == ExtensionStatus.RUNNING
    assert records("beta") == ["b1"]
    assert fire_timer("beta", key="again").ok


def test_a_stopped_extension_runs_no_hook_until_resumed(install):
    calls: list[str] = []

    def hook(ctx: Any, timer: Any) -> None:
        calls.append(timer.key)
        raise RuntimeError("always")

    install(make_ext("alpha", on_timer=hook))
    fire_timer("alpha", key="first")
    outcome = fire_timer("alpha", key="second")

    assert outcome.status == "skipped"
    assert outcome.skip == "stopped"
    assert outcome.reason == "on_timer defect: always"
    assert calls == ["first"]


def test_reason_formats_for_stop_typed_failure_and_defect(install):
    def explicit(ctx: Any, timer: Any) -> None:
        raise ExtensionStop("the upstream contract changed")

    def typed(ctx: Any, timer: Any) -> None:
        raise StateError("bound", "Reminder text is too long")

    def nameless(ctx: Any, timer: Any) -> None:
        raise ValueError

    install(
        make_ext("one", on_timer=explicit),
        make_ext("two", on_timer=typed),
        make_ext("three", on_timer=nameless),
    )
    fire_timer("one")
    fire_timer("two")
    fire_timer("three")

    assert roster("one").reason == "the upstream contract changed"
    assert roster("two").reason == "on_timer: StateError: Reminder text is too long"
    assert roster("three").reason == "on_timer defect: ValueError"


def test_a_reason_is_bounded_at_512_characters_with_an_ellipsis(install):
    install(make_ext("alpha", on_timer=raise_after_write("x" * 2000)))

    fire_timer("alpha")

    reason = roster("alpha").reason
    assert len(reason) == 512
    assert reason.startswith("on_timer defect: xxx")
    assert reason.endswith("…")


def test_secrets_and_bearer_tokens_are_redacted_from_the_reason(install, monkeypatch):
    monkeypatch.setattr(
        "extensions_host.runtime.stops.secret_sources",
        [*secret_sources, lambda ext_id: ["s3cr3t-v4lue"] if ext_id == "alpha" else []],
    )
    message = (
        "call failed with s3cr3t-v4lue, header Bearer abcdefghijklmnopqrstuvwxyz, "
        "token hy_ABCDEFGHIJKLMNOPQRSTUV and test-service-token"
    )
    install(make_ext("alpha", on_timer=raise_after_write(message)))

    fire_timer("alpha")

    reason = roster("alpha").reason
    assert "s3cr3t-v4lue" not in reason
    assert "abcdefghijklmnopqrstuvwxyz" not in reason
    assert "hy_ABCDEFGHIJKLMNOPQRSTUV" not in reason
    assert "test-service-token" not in reason
    assert reason.count("[redacted]") == 4


@pytest.mark.parametrize(
    "secret", ["pa\\ss-word-1234", "two\nlines-1234", 'quo"ted-1234', "ünïcode-1234"]
)
def test_a_secret_quoted_escaped_in_the_reason_is_redacted_too(install, monkeypatch, secret):
    monkeypatch.setattr(
        "extensions_host.runtime.stops.secret_sources",
        [*secret_sources, lambda ext_id: [secret] if ext_id == "alpha" else []],
    )

    def hook(ctx: Any, timer: Any) -> None:
        raise RuntimeError(f"{secret!r} in {json.dumps({'key': secret})}")

    install(make_ext("alpha", on_timer=hook))

    fire_timer("alpha")

    redacted = json.dumps({"key": "[redacted]"})
    assert roster("alpha").reason == f"on_timer defect: '[redacted]' in {redacted}"


def test_a_stop_logs_one_structured_event_with_the_id_stored_on_the_row(install, caplog):
    install(make_ext("alpha", on_timer=raise_after_write("boom")))

    with caplog.at_level(logging.ERROR, logger="extensions_host.stops"):
        fire_timer("alpha")

    events = [r for r in caplog.records if r.getMessage() == "extension_stopped"]
    assert len(events) == 1
    event = events[0]
    assert event.event_id == roster("alpha").stop_event_id
    assert event.extension_id == "alpha"
    assert event.hook == "on_timer"
    assert event.durable is True
    assert "RuntimeError: boom" in event.cause


def test_a_stop_that_cannot_be_written_fails_the_operation_with_store_unavailable(
    install, monkeypatch
):
    install(make_ext("alpha", on_timer=raise_after_write("boom")))

    def broken(**kwargs: Any) -> None:
        raise DatabaseError("disk full")

    monkeypatch.setattr("extensions_host.runtime.stops.audit_record", broken)
    with pytest.raises(HostError) as raised:
        fire_timer("alpha")

    assert (raised.value.category, raised.value.cause) == ("store", "unavailable")
    assert roster("alpha").status == ExtensionStatus.RUNNING  # nothing half-written
    assert records("alpha") == []


def test_a_write_outside_the_frame_is_a_defect_that_stops_the_extension(install):
    kept: list[Any] = []

    def hook(ctx: Any, timer: Any) -> None:
        kept.append(ctx)

    install(make_ext("alpha", on_timer=hook))
    assert fire_timer("alpha").ok

    with pytest.raises(ExtensionStop) as raised:
        kept[0].collection("item").put(Item(key="late"))

    expected = "on_timer defect: Extension write used outside its own core transaction"
    assert raised.value.reason == expected
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert roster("alpha").reason == expected
    assert records("alpha") == []


def test_a_write_with_another_extensions_context_stops_the_extension_that_made_it(install):
    kept: list[Any] = []

    def keep(ctx: Any, timer: Any) -> None:
        kept.append(ctx)

    def borrow(ctx: Any, timer: Any) -> None:
        ctx.collection("item").put(Item(key="own"))
        try:  # even a swallowed guard violation counts
            kept[0].collection("item").put(Item(key="stolen"))
        except BaseException:  # noqa: S110 (what a careless extension does)
            pass

    install(make_ext("alpha", on_timer=keep), make_ext("beta", on_timer=borrow))
    fire_timer("alpha")

    outcome = fire_timer("beta")

    assert outcome.reason == "on_timer defect: Extension write used another extension's context"
    assert roster("beta").status == ExtensionStatus.STOPPED
    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert records("alpha") == [] and records("beta") == []


@pytest.mark.parametrize("crossing", ["copied context", "asyncio.to_thread"])
def test_a_write_from_another_thread_with_the_frames_context_is_a_defect(install, crossing):
    errors: list[BaseException] = []

    def write(ctx: Any) -> None:
        try:
            ctx.observe("c1")  # a write guard, no database (this thread has no transaction)
        except BaseException as exc:  # what a careless extension does
            errors.append(exc)

    def hook(ctx: Any, timer: Any) -> None:
        if crossing == "asyncio.to_thread":
            asyncio.run(asyncio.to_thread(write, ctx))
            return
        thread = threading.Thread(target=contextvars.copy_context().run, args=(write, ctx))
        thread.start()
        thread.join()

    install(make_ext("alpha", on_timer=hook))

    outcome = fire_timer("alpha")

    assert [type(exc).__name__ for exc in errors] == ["FrameDefect"]
    assert outcome.reason == "on_timer defect: Extension write used from another thread"
    assert roster("alpha").status == ExtensionStatus.STOPPED


def test_a_read_only_hook_refuses_writes_and_stops_its_extension(install):
    def activate(ctx: Any) -> None:
        ctx.collection("item").put(Item(key="setup"))

    install(make_ext("alpha", on_timer=put_item("x"), activate=activate))

    outcome = fire_timer("alpha")

    assert outcome.status == "stopped"
    assert roster("alpha").reason == "activation defect: Extension write used in a read-only hook"
    assert roster("alpha").failing_hook == "activation"
    assert records("alpha") == []


def test_reads_work_in_read_only_hooks(install):
    seen: list[Any] = []

    def activate(ctx: Any) -> None:
        seen.append(ctx.collection("item").get("a"))

    install(make_ext("alpha", on_timer=put_item("a", n=7)))
    fire_timer("alpha")
    install(make_ext("alpha", on_timer=put_item("b"), activate=activate, version="1.0.1"))

    assert fire_timer("alpha").ok
    assert seen == [Item(key="a", n=7)]


def test_activate_runs_once_per_process_and_again_after_a_resume(install):
    from extensions_host.services.roster import extension_resume

    activations: list[int] = []
    fail = {"now": False}

    def hook(ctx: Any, timer: Any) -> None:
        if fail["now"]:
            raise RuntimeError("once")

    install(make_ext("alpha", on_timer=hook, activate=lambda ctx: activations.append(1)))
    fire_timer("alpha")
    fire_timer("alpha")
    assert len(activations) == 1

    fail["now"] = True
    fire_timer("alpha")
    fail["now"] = False
    extension_resume(extension_id="alpha", actor="staff")
    fire_timer("alpha")

    assert len(activations) == 2


def test_a_hook_returning_an_awaitable_is_stopped_and_rolled_back(install):
    def hook(ctx: Any, timer: Any) -> Any:
        ctx.collection("item").put(Item(key="before-await"))
        return asyncio.sleep(0)

    install(make_ext("alpha", on_timer=hook))

    outcome = fire_timer("alpha")

    expected = "on_timer crossed an asynchronous boundary inside a core transaction"
    assert outcome.reason == expected
    assert roster("alpha").reason == expected
    assert records("alpha") == []


def test_an_async_def_hook_is_stopped_as_an_async_crossing(install):
    async def hook(ctx: Any, timer: Any) -> None:
        return None

    install(make_ext("alpha", on_timer=hook))

    fire_timer("alpha")

    assert roster("alpha").reason == (
        "on_timer crossed an asynchronous boundary inside a core transaction"
    )


def sleepy(seconds: float, *, swallow: bool = False) -> Any:
    def hook(ctx: Any, timer: Any) -> None:
        ctx.collection("item").put(Item(key="before-sleep"))
        if swallow:
            try:
                time.sleep(seconds)
            except Exception:  # noqa: S110 (what a careless extension does)
                pass
        else:
            time.sleep(seconds)

    return hook


@pytest.mark.parametrize("swallow", [False, True], ids=["plain", "catches-Exception"])
def test_a_hook_sleeping_past_its_deadline_is_interrupted_stopped_and_rolled_back(install, swallow):
    install(make_ext("alpha", on_timer=sleepy(10, swallow=swallow)))

    started = time.monotonic()
    outcome = fire_timer("alpha", deadline_s=0.2)
    took = time.monotonic() - started

    print(f"deadline 0.2 s, hook interrupted after {took:.3f} s")
    assert took < 3.0  # SIGALRM interrupted the 10 s sleep
    assert outcome.elapsed_s >= 0.2
    assert outcome.reason == "on_timer exceeded its deadline"
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert roster("alpha").reason == "on_timer exceeded its deadline"
    assert records("alpha") == []


@pytest.mark.django_db(transaction=True)
def test_off_the_main_thread_a_late_hook_is_stopped_by_the_elapsed_check(install):
    install(make_ext("alpha", on_timer=sleepy(0.4)))
    outcomes: list[Any] = []

    def run() -> None:
        from django.db import connection

        try:
            outcomes.append(fire_timer("alpha", deadline_s=0.1))
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)

    assert outcomes[0].status == "stopped"
    assert 0.4 <= outcomes[0].elapsed_s < 5.0
    assert roster("alpha").reason == "on_timer exceeded its deadline"
    assert records("alpha") == []


def test_an_extension_deadline_override_applies_to_its_hooks(install):
    install(make_ext("alpha", on_timer=sleepy(10), deadline_s=0.2))

    started = time.monotonic()
    fire_timer("alpha")

    assert time.monotonic() - started < 3.0
    assert roster("alpha").reason == "on_timer exceeded its deadline"


def test_a_host_transient_database_error_is_retried_and_stops_nothing(install):
    attempts: list[int] = []

    def hook(ctx: Any, timer: Any) -> None:
        ctx.collection("item").put(Item(key="k", n=len(attempts)))
        attempts.append(1)
        if len(attempts) == 1:
            raise OperationalError("database is locked")
        if len(attempts) == 2:
            error = OperationalError("deadlock detected")
            error.sqlstate = "40P01"  # type: ignore[attr-defined]
            raise error

    install(make_ext("alpha", on_timer=hook))

    outcome = fire_timer("alpha")

    assert outcome.ok
    assert len(attempts) == 3
    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert list(ExtensionRecord.objects.values_list("key", "value")) == [
        ("k", '{"key":"k","n":2,"tag":null,"blob":""}')
    ]


def test_host_transient_trouble_in_a_read_outside_any_frame_is_store_unavailable(
    install, monkeypatch
):
    def locked(**kwargs: Any) -> None:
        raise OperationalError("database is locked")

    install(make_ext("alpha"))
    ctx = detached_context(extension_id="alpha", hook="worker w")
    monkeypatch.setattr("extensions_host.services.records.record_get", locked)

    # an ordinary exception every runner (route, slash command, notifier, worker) reads as host
    # trouble; there is no frame to retry, and it is never the extension's defect
    with pytest.raises(HostError) as raised:
        ctx.collection("item").get("k")

    error = raised.value
    assert (error.category, error.cause, error.retry_after) == ("store", "unavailable", 1)
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_lock_timeout_that_took_the_hook_past_its_deadline_is_retried_not_a_stop(install):
    """A lock wait that ends (55P03) only after the deadline passed is still host trouble."""
    from extensions_host.runtime.current import current_frame

    attempts: list[int] = []

    def hook(ctx: Any, timer: Any) -> None:
        attempts.append(1)
        ctx.collection("item").put(Item(key="k", n=len(attempts)))
        if len(attempts) == 1:
            frame = current_frame()
            assert frame is not None
            frame.started -= frame.deadline_s + 1  # as if it had waited that long for the lock
            error = OperationalError("canceling statement due to lock timeout")
            error.sqlstate = "55P03"  # type: ignore[attr-defined]
            raise error

    install(make_ext("alpha", on_timer=hook))

    outcome = fire_timer("alpha")

    assert outcome.ok, outcome
    assert len(attempts) == 2
    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert records("alpha") == ["k"]


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        (["not", "an", "object"], {}),
        ("garbage", {}),
        ({"max_timers": "lots", "max_records": 5, "bogus": 1}, {"max_records": 5}),
    ],
)
def test_a_frame_ignores_garbage_in_the_stored_quota_overrides(install, stored, expected):
    from extensions_host.models import RosterEntry
    from extensions_host.runtime.current import current_frame

    seen: list[dict[str, int]] = []

    def hook(ctx: Any, timer: Any) -> None:
        frame = current_frame()
        assert frame is not None
        seen.append(frame.quotas)

    install(make_ext("alpha", on_timer=hook))
    RosterEntry.objects.filter(pk="alpha").update(quotas=stored)

    outcome = fire_timer("alpha")

    assert outcome.ok, outcome
    assert seen == [expected]
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_retry_rolls_back_keeps_running_and_is_bounded(install):
    def hook(ctx: Any, timer: Any) -> None:
        ctx.collection("item").put(Item(key="k"))
        raise Retry(30, "upstream is down")

    install(make_ext("alpha", on_timer=hook))

    outcome = fire_timer("alpha", retry_attempt=3)
    assert outcome.status == "retry"
    assert outcome.retry_after == 30
    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert records("alpha") == []

    outcome = fire_timer("alpha", retry_attempt=10)
    assert outcome.status == "stopped"
    assert roster("alpha").reason == "on_timer defect: retried 10 times: upstream is down"


def test_a_process_with_another_revision_runs_none_of_the_extensions_hooks(install):
    calls: list[str] = []

    def hook(ctx: Any, timer: Any) -> None:
        calls.append(ctx.revision)

    old = make_ext("alpha", version="1.0.0", on_timer=hook)
    new = make_ext("alpha", version="2.0.0", on_timer=hook)
    install(old)
    install(new)  # the deploy synced the new revision

    with registry.installed(old):  # a process still running the old code
        outcome = fire_timer("alpha")

    assert outcome.status == "skipped"
    assert outcome.skip == "revision"
    assert calls == []
    assert roster("alpha").status == ExtensionStatus.RUNNING  # waiting, not stopped
    assert fire_timer("alpha").ok
    assert calls == [registry.get("alpha").revision]


def test_frames_observe_conversations_and_bump_their_version_once(install, conversation):
    def hook(ctx: Any, timer: Any) -> None:
        ctx.document("pad").update("c1", lambda pad: pad.model_copy(update={"text": "hi"}))
        ctx.observe("c1")
        ctx.observe("c2")

    install(make_ext("alpha", on_timer=hook))
    conversation("c1")
    conversation("c2")

    assert fire_timer("alpha").ok

    from conversations.models import Conversation

    assert dict(Conversation.objects.values_list("id", "version")) == {"c1": 1, "c2": 1}


def test_update_and_transact_run_frames_from_outside_a_hook(install):
    from extensions_host.runtime import detached_context

    install(make_ext("alpha"))
    ctx = detached_context(extension_id="alpha", hook="route")

    ctx.update(lambda state: state.collection("item").put(Item(key="u")))
    ctx.transact(lambda frame: frame.collection("item").put(Item(key="t")))
    with pytest.raises(StateError) as raised:
        ctx.transact(lambda frame: frame.collection("item").page(limit=0))

    assert raised.value.kind == "bound"
    assert sorted(records("alpha")) == ["t", "u"]
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_defect_in_transact_stops_the_extension_and_raises_extension_stop(install):
    from extensions_host.runtime import detached_context

    install(make_ext("alpha"))
    ctx = detached_context(extension_id="alpha", hook="route")

    def body(frame: Any) -> None:
        frame.collection("item").put(Item(key="t"))
        raise KeyError("missing")

    with pytest.raises(ExtensionStop) as raised:
        ctx.transact(body)
    assert raised.value.reason == "transact defect: 'missing'"
    assert roster("alpha").status == ExtensionStatus.STOPPED
    with pytest.raises(ExtensionStop):  # a stopped extension's transact raises at once
        ctx.transact(lambda frame: None)
    with pytest.raises(StateError):  # and update is refused
        ctx.update(lambda frame: None)
    assert records("alpha") == []


def test_update_is_refused_inside_a_frame(install):
    errors: list[str] = []

    def hook(ctx: Any, timer: Any) -> None:
        try:
            ctx.update(lambda state: None)
        except StateError as exc:
            errors.append(exc.kind)

    install(make_ext("alpha", on_timer=hook))

    assert fire_timer("alpha").ok
    assert errors == ["unavailable"]


def test_run_frame_of_an_unknown_extension_is_skipped():
    outcome = run_frame(extension_id="ghost", hook="on_timer", call=lambda ctx: None)

    assert outcome.status == "skipped"
    assert outcome.skip == "missing"


def test_frames_sharing_a_page_roll_back_only_the_failing_savepoint(
    install, django_capture_on_commit_callbacks
):
    from extensions_host.runtime import run_page
    from extensions_host.sdk import TimerEvent

    install(make_ext("alpha", on_timer=raise_after_write("boom")), make_ext("beta"))
    loaded = registry.get("alpha")
    event = TimerEvent(key="t", due_at=0, fired_at=0)

    def page_body(page: Any) -> list[str]:
        statuses = []
        for extension_id, call in [
            ("beta", lambda ctx: ctx.collection("item").put(Item(key="b1"))),
            ("alpha", lambda ctx: loaded.definition.hooks.single["on_timer"](ctx, event)),
            ("beta", lambda ctx: ctx.collection("item").put(Item(key="b2"))),
            ("alpha", lambda ctx: ctx.collection("item").put(Item(key="a-later"))),
        ]:
            outcome = run_frame(extension_id=extension_id, hook="on_timer", call=call, page=page)
            statuses.append(outcome.status)
        return statuses

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        statuses = run_page(page_body, time_limit_s=10)

    assert statuses == ["ok", "stopped", "ok", "skipped"]
    assert records("alpha") == []
    assert sorted(records("beta")) == ["b1", "b2"]
    assert roster("alpha").reason == "on_timer defect: boom"
    assert len(callbacks) == 1  # the stop's log event waits for the page's commit


def test_a_later_frame_of_an_extension_stopped_in_a_locked_page_is_skipped(install):
    """A page that locked its roster rows up front holds them as they were; the stop written in
    the page still skips the extension's later frames."""
    from extensions_host.runtime import run_page

    install(make_ext("alpha"), make_ext("beta"))
    calls: list[str] = []

    def failing(ctx: Any) -> None:
        ctx.collection("item").put(Item(key="a-first"))
        raise RuntimeError("boom")

    def page_body(page: Any) -> list[tuple[str, str | None]]:
        page.lock(["alpha", "beta"])
        outcomes = []
        for extension_id, call in [
            ("alpha", failing),
            ("beta", lambda ctx: ctx.collection("item").put(Item(key="b1"))),
            ("alpha", lambda ctx: calls.append("later")),
        ]:
            outcome = run_frame(extension_id=extension_id, hook="on_timer", call=call, page=page)
            outcomes.append((outcome.status, outcome.skip))
        return outcomes

    assert run_page(page_body, time_limit_s=10) == [
        ("stopped", ""),
        ("ok", ""),
        ("skipped", "stopped"),
    ]
    assert calls == []
    assert records("alpha") == []
    assert records("beta") == ["b1"]


def test_a_staff_deadline_override_on_the_roster_applies(install):
    install(make_ext("alpha", on_timer=sleepy(10)))
    row = roster("alpha")
    row.deadline_seconds = 0.2
    row.save()

    started = time.monotonic()
    fire_timer("alpha")

    assert time.monotonic() - started < 3.0
    assert roster("alpha").reason == "on_timer exceeded its deadline"


def test_watchers_hear_about_touched_conversations_only_after_commit(
    install, conversation, django_capture_on_commit_callbacks, monkeypatch
):
    from extensions_host.runtime import observation_listeners

    heard: list[frozenset[str]] = []
    monkeypatch.setattr(
        "extensions_host.runtime.frames.observation_listeners",
        [*observation_listeners, heard.append],
    )
    install(make_ext("alpha", on_timer=lambda ctx, timer: ctx.observe("c1")))
    conversation("c1")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert fire_timer("alpha").ok
    assert heard == []
    for callback in callbacks:
        callback()

    assert heard == [frozenset({"c1"})]


def test_the_startup_sync_tolerates_a_database_without_tables(monkeypatch):
    from django.db import ProgrammingError

    from extensions_host.services import roster as roster_service

    def missing_tables() -> None:
        raise ProgrammingError('relation "extensions_host_rostersynclock" does not exist')

    monkeypatch.setattr(roster_service, "roster_sync", missing_tables)

    assert roster_service.roster_sync_at_start() is None


# --- the host process told to exit mid-hook ------------------------------------------------


def exits_after_write(exc: BaseException) -> Any:
    def hook(ctx: Any, timer: Any) -> None:
        ctx.collection("item").put(Item(key="written-before-exit"))
        raise exc

    return hook


@pytest.mark.parametrize(
    "exc",
    [SystemExit(1), SystemExit(0), KeyboardInterrupt()],
    ids=["worker-timeout", "quit-signal", "ctrl-c"],
)
def test_a_process_told_to_exit_mid_hook_rolls_back_and_re_raises_without_a_stop(install, exc):
    # gunicorn's worker timeout (SIGABRT → sys.exit(1)) and SIGQUIT/SIGINT (sys.exit(0)) raise
    # SystemExit wherever the worker is: the host is going away, the extension did nothing wrong
    install(make_ext("alpha", on_timer=exits_after_write(exc)))

    with pytest.raises(type(exc)):
        fire_timer("alpha")

    alpha = roster("alpha")
    assert (alpha.status, alpha.reason, alpha.failing_hook) == (ExtensionStatus.RUNNING, "", "")
    assert records("alpha") == []  # the frame rolled back
    assert not AuditEntry.objects.filter(action="extension_stopped").exists()


def test_a_process_told_to_exit_in_a_page_rolls_the_page_back_and_stops_nobody(install):
    from extensions_host.runtime import run_page

    install(make_ext("alpha", on_timer=exits_after_write(SystemExit(1))), make_ext("beta"))
    loaded = registry.get("alpha")
    event = TimerEvent(key="t", due_at=0, fired_at=0)

    def page_body(page: Any) -> None:
        run_frame(
            extension_id="beta",
            hook="on_timer",
            call=lambda ctx: ctx.collection("item").put(Item(key="b1")),
            page=page,
        )
        run_frame(
            extension_id="alpha",
            hook="on_timer",
            call=lambda ctx: loaded.definition.hooks.single["on_timer"](ctx, event),
            page=page,
        )

    with pytest.raises(SystemExit):
        run_page(page_body, time_limit_s=10)

    assert [roster(e).status for e in ("alpha", "beta")] == [ExtensionStatus.RUNNING] * 2
    assert records("alpha") == records("beta") == []


def test_a_delivery_cut_short_by_a_process_exit_stays_counted_like_a_death(install):
    from extensions_host.runtime.crashes import unfinished_deliveries

    install(make_ext("alpha", on_timer=exits_after_write(SystemExit(1))))
    with pytest.raises(SystemExit):
        fire_timer("alpha", item="t@0")
    # a hook that keeps calling sys.exit in a worker is quarantined like one that kills it
    assert unfinished_deliveries(extension_id="alpha", hook="on_timer", item="t@0") == 1

    install(make_ext("alpha", on_timer=put_item("ok")))
    assert fire_timer("alpha", item="t@0").ok
    assert unfinished_deliveries(extension_id="alpha", hook="on_timer", item="t@0") == 0


def test_activate_told_to_exit_stops_nothing(install):
    def activate(ctx: Any) -> None:
        raise SystemExit(1)

    install(make_ext("alpha", on_timer=put_item("a1"), activate=activate))

    with pytest.raises(SystemExit):
        fire_timer("alpha")

    assert roster("alpha").status == ExtensionStatus.RUNNING
