"""The lifecycle outbox: fan-out, delivery once and in order per conversation, stops and
replay, retries, commit-order gaps, the handlers' read API, shutdown, idle detection."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest
from django.db import transaction

from conversations.models import Conversation
from conversations.services import (
    conversation_create,
    conversation_fork,
    conversation_update,
    submission_submit,
)
from core import clock
from core.auth import user_principal
from core.models import LifecycleEvent
from core.services import lifecycle_record
from extensions_host.background.models import IdleMark, LifecycleDelivery, LifecycleFanout
from extensions_host.background.services.common import CHANNEL_LIFECYCLE, kick_clear
from extensions_host.background.services.idle import (
    _idle_emit,
    conversations_detect_idle,
)
from extensions_host.background.services.lifecycle import (
    lifecycle_deliver_all,
    lifecycle_fanout,
    lifecycle_fanout_all,
    lifecycle_prune,
    lifecycle_sweep,
)
from extensions_host.background.services.shutdown import lifecycle_shutdown_all
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.sdk import Retry, StateError

from .conftest import resume, roster
from .exts import Pad, make_ext


class Recorder:
    """Lifecycle handlers that remember what they were given (and fail on demand)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.fail: dict[str, BaseException] = {}

    def handler(self, kind: str) -> Any:
        def handle(ctx: Any, event: Any) -> None:
            failure = self.fail.get(kind)
            if failure is not None:
                raise failure
            self.seen.append((kind, dict(event.data)))

        return handle

    def handlers(self, *kinds: str) -> dict[str, Any]:
        return {kind: self.handler(kind) for kind in kinds}


KINDS = ("conversation_created", "conversation_forked", "conversation_archived")


def deliver(*extension_ids: str) -> None:
    lifecycle_fanout_all()
    for extension_id in extension_ids:
        lifecycle_deliver_all(extension_id=extension_id)


@pytest.fixture
def principal(owner: Any) -> Any:
    return user_principal(owner, "token")


def make_conversation(principal: Any, cid: str, texts: tuple[str, ...] = ("one",)) -> list[int]:
    conversation_create(principal=principal, conversation_id=cid)
    return [
        submission_submit(
            principal=principal,
            conversation_id=cid,
            parts=[{"type": "text", "text": text}],
            request_id=f"{cid}-{n}",
        ).submission.entry.pk
        for n, text in enumerate(texts)
    ]


def test_fork_and_archive_reach_a_subscribed_extension_once_each_in_order(install, principal, sent):
    rec = Recorder()
    install(make_ext("alpha", lifecycle=rec.handlers(*KINDS)))
    (entry,) = make_conversation(principal, "parent")
    conversation_fork(principal=principal, conversation_id="parent", at=entry, child_id="child")
    conversation_update(principal=principal, conversation_id="child", archived=True)

    deliver("alpha")
    deliver("alpha")  # nothing is delivered twice

    assert rec.seen == [
        ("conversation_created", {"conversation_id": "parent"}),
        ("conversation_forked", {"child_id": "child", "parent_id": "parent", "at": entry}),
        ("conversation_archived", {"conversation_id": "child", "archived": True}),
    ]
    assert not LifecycleDelivery.objects.exists()


def test_a_failing_handler_stops_the_extension_and_its_events_arrive_after_resume(
    install, principal, sent
):
    rec = Recorder()
    rec.fail["conversation_forked"] = RuntimeError("fork handler broke")
    install(make_ext("alpha", lifecycle=rec.handlers(*KINDS)))
    (entry,) = make_conversation(principal, "parent")
    conversation_fork(principal=principal, conversation_id="parent", at=entry, child_id="child")
    conversation_update(principal=principal, conversation_id="child", archived=True)

    deliver("alpha")
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert roster("alpha").reason == "conversation_forked defect: fork handler broke"
    assert rec.seen == [("conversation_created", {"conversation_id": "parent"})]
    conversation_update(principal=principal, conversation_id="parent", archived=True)
    deliver("alpha")  # stopped: recorded for it, not delivered
    assert len(rec.seen) == 1
    assert LifecycleDelivery.objects.filter(extension_id="alpha").count() == 3

    del rec.fail["conversation_forked"]
    resume("alpha")
    deliver("alpha")

    assert [kind for kind, _ in rec.seen] == [
        "conversation_created",
        "conversation_forked",
        "conversation_archived",
        "conversation_archived",
    ]
    assert not LifecycleDelivery.objects.exists()


def test_only_granted_extensions_with_a_handler_are_subscribed(install, principal, sent):
    rec = Recorder()
    install(
        make_ext("alpha", lifecycle=rec.handlers("conversation_archived")),
        make_ext("nogrant", grants={"state"}, lifecycle=rec.handlers(*KINDS)),
    )
    make_conversation(principal, "c1")

    touched, _ = lifecycle_fanout()

    assert touched == set()  # created: alpha has no handler for it; nogrant is not granted
    assert not LifecycleDelivery.objects.exists()
    assert LifecycleFanout.objects.count() == 1


def test_events_of_one_conversation_wait_behind_a_retried_one_others_go_on(
    install, principal, sent, fake_clock
):
    rec = Recorder()
    rec.fail["conversation_created"] = Retry(10, "later")
    install(make_ext("alpha", lifecycle=rec.handlers(*KINDS)))
    with transaction.atomic():
        lifecycle_record(kind="conversation_created", conversation_id="a", payload={"n": 1})
        lifecycle_record(
            kind="conversation_archived", conversation_id="a", payload={"n": 2, "archived": True}
        )
        lifecycle_record(
            kind="conversation_archived", conversation_id="b", payload={"n": 3, "archived": True}
        )

    deliver("alpha")
    assert rec.seen == [("conversation_archived", {"n": 3, "archived": True})]
    assert roster("alpha").status == ExtensionStatus.RUNNING

    del rec.fail["conversation_created"]
    deliver("alpha")  # still within the delay: "a" waits
    assert len(rec.seen) == 1
    fake_clock.advance(seconds=10)
    deliver("alpha")

    assert [data["n"] for _, data in rec.seen] == [3, 1, 2]


def test_a_pending_event_deleted_by_hand_is_dropped_and_does_not_hold_back_its_conversation(
    install, sent
):
    rec = Recorder()
    install(make_ext("alpha", lifecycle=rec.handlers(*KINDS)))
    lifecycle_record(kind="conversation_created", conversation_id="a", payload={"n": 1})
    lifecycle_record(
        kind="conversation_archived", conversation_id="a", payload={"n": 2, "archived": True}
    )
    lifecycle_fanout_all()
    LifecycleEvent.objects.filter(kind="conversation_created").delete()  # gone before delivery

    deliver("alpha")

    assert [data["n"] for _, data in rec.seen] == [2]
    assert not LifecycleDelivery.objects.filter(extension_id="alpha").exists()


def test_an_event_that_commits_after_a_larger_id_is_still_delivered(install, sent):
    """Outbox ids come from a sequence: a transaction holding a smaller id may commit after one
    holding a larger id has been fanned out. The fan-out has no id watermark to skip it."""
    rec = Recorder()
    install(make_ext("alpha", lifecycle=rec.handlers("conversation_archived")))
    early = lifecycle_record(
        kind="conversation_archived", conversation_id="x", payload={"n": "late-commit"}
    )
    early_id = early.pk
    early.delete()  # as if its transaction had not committed yet
    lifecycle_record(kind="conversation_archived", conversation_id="y", payload={"n": "first"})
    deliver("alpha")

    LifecycleEvent.objects.create(
        id=early_id, kind="conversation_archived", conversation_id="x", payload={"n": "late"}
    )
    deliver("alpha")

    assert [data["n"] for _, data in rec.seen] == ["first", "late"]


def test_the_read_api_gives_entries_fork_aware_bounded_pages_and_documents(
    install, principal, sent
):
    seen: dict[str, Any] = {}

    def on_forked(ctx: Any, event: Any) -> None:
        first = event.entries(limit=2)
        rest = event.entries(limit=64, after=first.next)
        seen["ids"] = [e.id for e in first.entries + rest.entries]
        seen["texts"] = [e.content[0]["text"] for e in first.entries + rest.entries]
        seen["next"] = (first.next is not None, rest.next)
        seen["one"] = event.entry(first.entries[0].id).role
        seen["other"] = event.entry(10**9)
        seen["users"] = len(event.entries({"role": "user"}).entries)
        seen["pad"] = event.document("pad")
        for bad in (0, 65, True):
            with pytest.raises(StateError):
                event.entries(limit=bad)
        with pytest.raises(StateError):
            event.entries({"text": "x"})

    install(make_ext("alpha", lifecycle={"conversation_forked": on_forked}))
    entries = make_conversation(principal, "parent", ("a", "b", "c", "d"))
    conversation_fork(principal=principal, conversation_id="parent", at=entries[2], child_id="kid")

    deliver("alpha")

    assert seen["texts"] == ["a", "b", "c"]  # the parent's entries up to the fork point only
    assert seen["ids"] == sorted(seen["ids"])
    assert seen["next"] == (True, None)
    assert seen["one"] == "user"
    assert seen["other"] is None
    assert seen["users"] == 3
    assert seen["pad"] == Pad()
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_forks_reader_takes_its_ancestors_entry_ids_up_to_the_fork_point_for_their_copies(
    install, principal, sent
):
    """`conversation_forked`'s `at` is the parent's entry id; the handler reads the child, whose
    copies have new ids. The child's reader resolves it (and any ancestor's id up to the fork
    point, through a fork of a fork) to its copy; an entry after the fork point stays unseen."""
    seen: dict[str, dict[str, Any]] = {}

    def text(record: Any) -> str | None:
        return None if record is None else record.content[0]["text"]

    def on_forked(ctx: Any, event: Any) -> None:
        point = event.entry(event["at"])
        seen[event["child_id"]] = {
            "at": (text(point), point.id != event["at"]),
            "after": [text(e) for e in event.entries(after=event["at"]).entries],
            "a": text(event.entry(parent[0])),
            "c": text(event.entry(parent[2])),
            "d": text(event.entry(parent[3])),
            "after_c": [text(e) for e in event.entries(after=parent[2]).entries],
        }

    install(make_ext("alpha", lifecycle={"conversation_forked": on_forked}))
    parent = make_conversation(principal, "parent", ("a", "b", "c", "d"))
    conversation_fork(principal=principal, conversation_id="parent", at=parent[2], child_id="kid")
    kid_e = submission_submit(
        principal=principal, conversation_id="kid", parts=[{"type": "text", "text": "e"}]
    ).submission.entry.pk
    conversation_fork(principal=principal, conversation_id="kid", at=kid_e, child_id="grandkid")

    deliver("alpha")

    assert seen["kid"] == {
        "at": ("c", True),  # the kid's own copy of the fork point
        "after": ["e"],  # what the kid got since its fork (delivered after "e" was added)
        "a": "a",
        "c": "c",
        "d": None,  # the parent's entry after the fork point is not the kid's
        "after_c": ["e"],
    }
    assert seen["grandkid"] == {
        "at": ("e", True),
        "after": [],
        "a": "a",  # the grandparent's ids resolve through the kid
        "c": "c",
        "d": None,
        "after_c": ["e"],
    }
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_delivered_events_are_pruned_after_an_hour_undelivered_ones_are_kept(
    install, sent, fake_clock
):
    rec = Recorder()
    rec.fail["conversation_archived"] = RuntimeError("down")
    install(
        make_ext("good", lifecycle=rec.handlers("conversation_created")),
        make_ext("bad", lifecycle=rec.handlers("conversation_archived")),
    )
    lifecycle_record(kind="conversation_created", conversation_id="c", payload={})
    lifecycle_record(kind="conversation_archived", conversation_id="c", payload={})
    deliver("good", "bad")

    fake_clock.advance(seconds=30 * 60)
    assert lifecycle_prune() == 0  # delivered, but fanned out less than an hour ago
    fake_clock.advance(seconds=2 * 3600)
    assert lifecycle_prune() == 1
    assert list(LifecycleEvent.objects.values_list("kind", flat=True)) == ["conversation_archived"]


def test_the_beat_sweep_fans_out_and_kicks_subscribers_with_deliverable_events(
    install, sent, django_capture_on_commit_callbacks
):
    rec = Recorder()
    install(make_ext("alpha", lifecycle=rec.handlers("conversation_created")))
    lifecycle_record(kind="conversation_created", conversation_id="c", payload={})

    with django_capture_on_commit_callbacks(execute=True):
        lifecycle_sweep()

    assert len(sent.of("lifecycle_fanout")) == 1
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle_fanout_all()  # the fan-out task kicks the extensions it gave deliveries to
    assert [args for args, _ in sent.of("deliver_lifecycle")] == [("alpha",)]
    kick_clear(CHANNEL_LIFECYCLE, "alpha")  # its task started, then was lost before delivering
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle_sweep()
    assert [args for args, _ in sent.of("deliver_lifecycle")] == [("alpha",), ("alpha",)]


def test_an_outbox_event_kicks_the_fan_out_after_its_commit(
    install, sent, django_capture_on_commit_callbacks
):
    install(make_ext("alpha", lifecycle=Recorder().handlers("conversation_created")))

    with django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            lifecycle_record(kind="conversation_created", conversation_id="c", payload={})
            lifecycle_record(kind="conversation_created", conversation_id="d", payload={})

    assert len(sent.of("lifecycle_fanout")) == 1  # coalesced


# --- shutdown ---------------------------------------------------------------------------------


def test_shutdown_is_called_directly_and_a_failure_is_logged_not_a_stop(install, caplog):
    calls: list[str] = []

    def ok(ctx: Any) -> None:
        calls.append(ctx.extension_id)

    def broken(ctx: Any) -> None:
        raise RuntimeError("cannot flush")

    install(make_ext("alpha", shutdown=ok), make_ext("beta", shutdown=broken))

    with caplog.at_level(logging.ERROR):
        outcomes = lifecycle_shutdown_all()

    assert outcomes == {"alpha": "ok", "beta": "failed"}
    assert calls == ["alpha"]
    assert roster("beta").status == ExtensionStatus.RUNNING
    assert any(r.message == "extension_shutdown_failed" for r in caplog.records)


def test_a_shutdown_that_overruns_its_deadline_is_abandoned(install, settings):
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 50
    import time

    def slow(ctx: Any) -> None:
        time.sleep(5)

    install(make_ext("alpha", shutdown=slow))
    started = time.monotonic()

    assert lifecycle_shutdown_all() == {"alpha": "timeout"}
    assert time.monotonic() - started < 2


def test_a_shutdown_follows_the_staff_deadline_override(install):
    # one deadline rule for every hook: staff's override bounds `shutdown` too (the worker
    # default, 30 s, would have let this one run its 5 s)
    import time

    install(make_ext("alpha", shutdown=lambda ctx: time.sleep(5)))
    RosterEntry.objects.filter(pk="alpha").update(deadline_seconds=0.05)
    started = time.monotonic()

    assert lifecycle_shutdown_all() == {"alpha": "timeout"}
    assert time.monotonic() - started < 2


@pytest.mark.django_db(transaction=True)
def test_off_the_main_thread_a_slow_shutdown_is_abandoned_at_its_deadline(install, settings):
    import threading
    import time

    from django.db import connection

    settings.HOST_HOOK_DEADLINE_WORKER_MS = 50
    install(make_ext("alpha", shutdown=lambda ctx: time.sleep(5)))
    outcomes: list[dict[str, str]] = []

    def run() -> None:
        try:
            outcomes.append(lifecycle_shutdown_all())
        finally:
            connection.close()

    started = time.monotonic()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)

    assert outcomes == [{"alpha": "timeout"}]
    assert time.monotonic() - started < 2


def test_a_shutdown_cut_by_the_process_exiting_is_not_waited_for(install):
    def exits(ctx: Any) -> None:
        raise SystemExit(0)

    install(make_ext("alpha", shutdown=exits))

    with pytest.raises(SystemExit):
        lifecycle_shutdown_all()
    assert roster("alpha").status == ExtensionStatus.RUNNING


# --- idle detection ---------------------------------------------------------------------------


def idle_events() -> list[tuple[str, int]]:
    return [
        (e.conversation_id, e.payload["idle_ms"])
        for e in LifecycleEvent.objects.filter(kind="conversation_idle").order_by("pk")
    ]


def test_idle_is_emitted_once_per_idle_period_and_rearmed_by_activity(
    install, conversation, fake_clock, settings, sent
):
    settings.IDLE_AFTER_SECONDS = 60
    install()
    conversation("quiet")
    conversation("archived")
    Conversation.objects.filter(pk="archived").update(archived=True)

    fake_clock.advance(seconds=30)
    conversations_detect_idle()
    assert idle_events() == []

    fake_clock.advance(seconds=31)
    conversations_detect_idle()
    fake_clock.advance(seconds=30)
    conversations_detect_idle()
    assert idle_events() == [("quiet", 61_000)]

    Conversation.objects.filter(pk="quiet").update(last_activity_at=clock.now())  # activity
    fake_clock.advance(seconds=61)
    conversations_detect_idle()

    assert idle_events() == [("quiet", 61_000), ("quiet", 61_000)]
    assert IdleMark.objects.get(pk="quiet").activity_at == clock.now() - dt.timedelta(seconds=61)


def test_a_sweep_that_read_a_conversation_before_another_emitted_its_idle_does_not_repeat_it(
    install, conversation, fake_clock, settings, sent
):
    settings.IDLE_AFTER_SECONDS = 60
    install()
    conversation("quiet")
    activity_at = Conversation.objects.get(pk="quiet").last_activity_at
    fake_clock.advance(seconds=61)
    conversations_detect_idle()  # another sweep emits first
    assert len(idle_events()) == 1

    # this sweep read "quiet" as a candidate before that sweep's mark committed
    now = clock.now()
    assert _idle_emit("quiet", activity_at, now - dt.timedelta(seconds=60), now) is False
    assert len(idle_events()) == 1


def test_the_idle_sweep_is_bounded_per_call_and_reports_more(
    install, conversation, fake_clock, settings, sent
):
    settings.IDLE_AFTER_SECONDS = 1
    install()
    for n in range(5):
        conversation(f"c{n}")
    fake_clock.advance(seconds=2)

    assert conversations_detect_idle(limit=3) == (3, True)
    assert conversations_detect_idle(limit=3) == (2, False)
    assert conversations_detect_idle(limit=3) == (0, False)
    assert len(idle_events()) == 5


def test_a_process_without_a_subscribers_revision_leaves_the_events_for_one_that_has_it(
    install, sent
):
    """A rolling deploy: the roster names a revision this process does not run. Marking the
    events fanned out here would lose them for that extension for good."""
    rec = Recorder()
    install(
        make_ext("alpha", lifecycle=rec.handlers("conversation_archived")),
        make_ext("beta", lifecycle=rec.handlers("conversation_archived")),
    )
    revision = roster("alpha").revision
    RosterEntry.objects.filter(pk="alpha").update(revision="another-revision")
    lifecycle_record(kind="conversation_archived", conversation_id="c", payload={"n": 1})

    assert lifecycle_fanout() == (set(), False)  # bounded: nothing more to do on this process
    assert lifecycle_fanout_all() is False
    assert not LifecycleDelivery.objects.exists()
    assert not LifecycleFanout.objects.exists()

    RosterEntry.objects.filter(pk="alpha").update(revision=revision)  # a process that has it
    deliver("alpha", "beta")

    assert rec.seen == [("conversation_archived", {"n": 1})] * 2
    assert LifecycleFanout.objects.count() == 1
    assert not LifecycleDelivery.objects.exists()


def test_an_uninstalled_or_ungranted_extension_not_loaded_here_does_not_hold_back_the_fan_out(
    install, sent
):
    rec = Recorder()
    install(make_ext("alpha", lifecycle=rec.handlers("conversation_archived")))
    RosterEntry.objects.create(
        id="gone",
        version="1",
        revision="r",
        status=ExtensionStatus.UNINSTALLED,
        admitted_grants=["lifecycle"],
    )
    RosterEntry.objects.create(id="elsewhere", version="1", revision="r", admitted_grants=["state"])
    lifecycle_record(kind="conversation_archived", conversation_id="c", payload={"n": 1})

    deliver("alpha")

    assert rec.seen == [("conversation_archived", {"n": 1})]


def test_an_idle_mark_is_deleted_with_its_conversation_and_the_others_kept(
    install, conversation, fake_clock, settings
):
    settings.IDLE_AFTER_SECONDS = 60
    install()
    for cid in ("kept", "gone"):
        conversation(cid)
    fake_clock.advance(seconds=61)
    conversations_detect_idle()
    assert set(IdleMark.objects.values_list("pk", flat=True)) == {"kept", "gone"}

    Conversation.objects.filter(pk="gone").delete()  # as retention does

    assert list(IdleMark.objects.values_list("pk", flat=True)) == ["kept"]
