"""Settled-run delivery: core cursor, per-consumer cursors, batches in order, failures, retries,
independence, lag, kicks."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.selectors import RunSettledEvent
from core import clock
from extensions_host.background.models import SettledCursor
from extensions_host.background.services.settled import (
    core_cursor,
    settled_consumers_behind,
    settled_cursor_initialise,
    settled_deliver,
    settled_deliver_all,
    settled_lag,
    settled_notify,
    settled_sweep,
)
from extensions_host.models import ExtensionRecord, ExtensionStatus, RosterEntry
from extensions_host.sdk import Retry

from .conftest import resume, roster, settle_runs
from .exts import Effect, Pad, make_ext


def effects(extension_id: str) -> set[str]:
    return set(
        ExtensionRecord.objects.filter(extension_id=extension_id, collection="effect").values_list(
            "key", flat=True
        )
    )


class Consumer:
    """An `on_settled` hook that remembers every batch it committed (and can fail on demand)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.fail: BaseException | None = None

    def __call__(self, ctx: Any, runs: list[RunSettledEvent]) -> None:
        if self.fail is not None:
            raise self.fail
        self.batches.append([run.sequence for run in runs])
        self.events = runs

    @property
    def received(self) -> list[int]:
        return [seq for batch in self.batches for seq in batch]


def test_a_new_consumer_starts_at_the_core_cursor_and_does_not_replay_history(
    install, conversation
):
    conversation("c1")
    before = settle_runs("c1", 3)
    consumer = Consumer()
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")

    after = settle_runs("c1", 2)
    settled_deliver_all(extension_id="alpha")

    assert core_cursor() == after[-1]
    assert consumer.received == after
    assert not set(before) & set(consumer.received)


def test_runs_arrive_in_sequence_order_in_bounded_batches_with_the_cursor_advanced(
    install, conversation, settings
):
    settings.HOST_SETTLED_BATCH = 4
    consumer = Consumer()
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    sequences = settle_runs("c1", 10)

    assert settled_deliver(extension_id="alpha") is True
    assert SettledCursor.objects.get(pk="alpha").position == sequences[3]
    settled_deliver_all(extension_id="alpha")

    assert consumer.batches == [sequences[0:4], sequences[4:8], sequences[8:10]]
    assert SettledCursor.objects.get(pk="alpha").position == sequences[-1]
    assert settled_deliver(extension_id="alpha") is False


def test_each_event_carries_its_inputs_texts_and_outcome(install, conversation):
    consumer = Consumer()
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    (sequence,) = settle_runs("c1", 1, text="hello")

    settled_deliver_all(extension_id="alpha")

    (event,) = consumer.events
    assert event.sequence == sequence
    assert event.conversation_id == "c1"
    assert event.input_texts == ("hello 0",)
    assert event.outcome == {"status": "unanswered", "reason": "done"}


def test_each_delivered_run_reads_its_own_conversation_like_a_lifecycle_event(
    install, conversation
):
    seen: list[tuple[str, list[str], bool, Pad]] = []

    def consume(ctx: Any, runs: list[RunSettledEvent]) -> None:
        for run in runs:
            page = run.entries(limit=64)
            first = run.entry(page.entries[0].id)
            texts = [entry.content[0]["text"] for entry in page.entries]
            seen.append((run.conversation_id, texts, first == page.entries[0], run.document("pad")))

    install(make_ext("alpha", on_settled=consume))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    conversation("c2")
    settle_runs("c1", 1, text="one")
    settle_runs("c2", 1, text="two")

    settled_deliver_all(extension_id="alpha")

    assert seen == [("c1", ["one 0"], True, Pad()), ("c2", ["two 0"], True, Pad())]
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_delivery_runs_no_statement_per_run_for_a_handler_that_reads_nothing(
    install, conversation
):
    install(
        make_ext("alpha", on_settled=lambda ctx, runs: None),
        make_ext("beta", on_settled=lambda ctx, runs: None),
    )
    settled_cursor_initialise(extension_id="beta")
    conversation("c1")
    settle_runs("c1", 28)
    settled_cursor_initialise(extension_id="alpha")
    settle_runs("c1", 2)

    with CaptureQueriesContext(connection) as two_runs:
        settled_deliver(extension_id="alpha")
    with CaptureQueriesContext(connection) as thirty_runs:
        settled_deliver(extension_id="beta")

    assert settled_lag(extension_id="alpha")["lag"] == settled_lag(extension_id="beta")["lag"] == 0
    assert len(thirty_runs) == len(two_runs)


def test_a_failing_consumer_stops_with_its_cursor_unmoved_and_replays_exactly_after_resume(
    install, conversation
):
    consumer = Consumer()
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    first = settle_runs("c1", 2)
    settled_deliver_all(extension_id="alpha")

    consumer.fail = RuntimeError("broken")
    missed = settle_runs("c1", 3)
    settled_deliver_all(extension_id="alpha")
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert roster("alpha").reason == "on_settled defect: broken"
    assert SettledCursor.objects.get(pk="alpha").position == first[-1]
    assert settled_lag(extension_id="alpha") == {
        "cursor": first[-1],
        "core_cursor": missed[-1],
        "lag": 3,
    }

    consumer.fail = None
    resume("alpha")
    settled_deliver_all(extension_id="alpha")

    assert consumer.received == first + missed
    assert settled_lag(extension_id="alpha")["lag"] == 0


def test_consumers_are_independent_a_stopped_one_never_holds_back_the_others(install, conversation):
    good, bad = Consumer(), Consumer()
    bad.fail = RuntimeError("nope")
    install(make_ext("good", on_settled=good), make_ext("bad", on_settled=bad))
    for ext in ("good", "bad"):
        settled_cursor_initialise(extension_id=ext)
    conversation("c1")

    sequences = settle_runs("c1", 3)
    settled_deliver_all(extension_id="bad")
    settled_deliver_all(extension_id="good")

    assert good.received == sequences
    assert roster("bad").status == ExtensionStatus.STOPPED
    assert settled_lag(extension_id="bad")["lag"] == 3


def test_retry_keeps_the_consumer_running_and_offers_the_same_batch_after_the_delay(
    install, conversation, fake_clock
):
    consumer = Consumer()
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    sequences = settle_runs("c1", 2)

    consumer.fail = Retry(5, "downstream busy")
    settled_deliver_all(extension_id="alpha")
    consumer.fail = None
    settled_deliver_all(extension_id="alpha")  # still inside the delay
    assert consumer.received == []
    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert SettledCursor.objects.get(pk="alpha").retry_attempt == 1

    fake_clock.advance(seconds=5)
    settled_deliver_all(extension_id="alpha")

    assert consumer.batches == [sequences]
    assert SettledCursor.objects.get(pk="alpha").retry_attempt == 0


def test_beats_sweep_leaves_a_consumer_pausing_after_a_retry_until_its_delay_ends(
    install, conversation, fake_clock
):
    consumer = Consumer()
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    settle_runs("c1", 1)
    assert settled_consumers_behind() == ["alpha"]

    consumer.fail = Retry(5, "downstream busy")
    settled_deliver_all(extension_id="alpha")

    assert settled_consumers_behind() == []  # behind, but pausing: no task for it
    fake_clock.advance(seconds=5)
    assert settled_consumers_behind() == ["alpha"]


def test_a_missing_on_settled_handler_stops_with_the_capability_reason(install, conversation):
    install(make_ext("alpha"))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    settle_runs("c1", 1)

    settled_deliver_all(extension_id="alpha")

    assert roster("alpha").reason == "settled: granted capability has no handler"


def test_after_settle_kicks_coalesce_into_one_task_per_consumer(
    install, conversation, sent, django_capture_on_commit_callbacks
):
    install(make_ext("alpha", on_settled=Consumer()), make_ext("beta", on_settled=Consumer()))
    for ext in ("alpha", "beta"):
        settled_cursor_initialise(extension_id=ext)

    with django_capture_on_commit_callbacks(execute=True):
        assert settled_notify() == ["alpha", "beta"]
        assert settled_notify() == []  # tasks already queued
    settled_deliver_all(extension_id="alpha")  # the task clears its kick first
    with django_capture_on_commit_callbacks(execute=True):
        assert settled_notify() == ["alpha"]

    assert [args for args, _ in sent.of("deliver_settled")] == [("alpha",), ("beta",), ("alpha",)]


def test_the_beat_sweep_initialises_cursors_and_kicks_only_consumers_that_are_behind(
    install, conversation, sent, django_capture_on_commit_callbacks
):
    conversation("c1")
    settle_runs("c1", 1)
    # sync gives new consumers a cursor at the core cursor: the run settled before is not owed
    install(make_ext("alpha", on_settled=Consumer()), make_ext("beta", on_settled=Consumer()))

    with django_capture_on_commit_callbacks(execute=True):
        assert settled_sweep() == []
    settle_runs("c1", 1)
    settled_deliver_all(extension_id="beta")
    with django_capture_on_commit_callbacks(execute=True):
        assert settled_sweep() == ["alpha"]

    assert set(SettledCursor.objects.values_list("pk", flat=True)) == {"alpha", "beta"}


def test_a_delivery_page_commits_the_batches_before_a_failure_and_never_reruns_the_culprit(
    install, conversation, settings
):
    settings.HOST_SETTLED_BATCH = 2
    calls: list[list[int]] = []

    def consume(ctx: Any, runs: list[RunSettledEvent]) -> None:
        sequences = [run.sequence for run in runs]
        calls.append(sequences)
        for sequence in sequences:
            ctx.collection("effect").put(Effect(key=str(sequence)))
        if sequences[0] == failing_at:
            raise RuntimeError("third batch")

    install(make_ext("alpha", on_settled=consume))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    sequences = settle_runs("c1", 8)
    failing_at = sequences[4]

    assert settled_deliver(extension_id="alpha", frames=10) is False

    # one page: two batches committed, the third rolled back and its consumer stopped
    assert SettledCursor.objects.get(pk="alpha").position == sequences[3]
    assert effects("alpha") == {str(s) for s in sequences[:4]}
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert roster("alpha").reason == "on_settled defect: third batch"
    assert [batch for batch in calls if batch[0] == failing_at] == [sequences[4:6]]  # ran once
    assert sequences[6] not in {s for batch in calls for s in batch}  # nothing after it ran

    resume("alpha")
    failing_at = -1
    settled_deliver_all(extension_id="alpha")
    assert effects("alpha") == {str(s) for s in sequences}
    assert SettledCursor.objects.get(pk="alpha").position == sequences[-1]


def test_a_delivery_page_hands_every_batch_once_in_order(install, conversation, settings):
    settings.HOST_SETTLED_BATCH = 3
    consumer = Consumer()
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    sequences = settle_runs("c1", 8)

    assert settled_deliver(extension_id="alpha", frames=2) is True  # 6 of 8 in one page
    assert SettledCursor.objects.get(pk="alpha").position == sequences[5]
    assert settled_deliver(extension_id="alpha", frames=2) is False

    assert consumer.batches == [sequences[0:3], sequences[3:6], sequences[6:8]]


def withhold_grant(extension_id: str, grant: str) -> list[str]:
    """Staff withdraw one admitted grant; returns the grants admitted before."""
    before = list(roster(extension_id).admitted_grants)
    RosterEntry.objects.filter(pk=extension_id).update(
        admitted_grants=[g for g in before if g != grant]
    )
    return before


def test_a_consumer_without_the_settled_grant_gets_nothing_and_catches_up_when_admitted_again(
    install, conversation, sent, django_capture_on_commit_callbacks
):
    consumer = Consumer()
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")
    start = SettledCursor.objects.get(pk="alpha").position
    admitted = withhold_grant("alpha", "settled")
    conversation("c1")
    sequences = settle_runs("c1", 2)

    assert settled_deliver_all(extension_id="alpha") is False

    assert consumer.received == []
    assert SettledCursor.objects.get(pk="alpha").position == start
    assert roster("alpha").status == ExtensionStatus.RUNNING
    with django_capture_on_commit_callbacks(execute=True):
        assert settled_sweep() == []

    RosterEntry.objects.filter(pk="alpha").update(admitted_grants=admitted)
    with django_capture_on_commit_callbacks(execute=True):
        assert settled_sweep() == ["alpha"]
    settled_deliver_all(extension_id="alpha")

    assert consumer.received == sequences
    assert SettledCursor.objects.get(pk="alpha").position == sequences[-1]


def test_a_settle_kicks_no_consumer_whose_settled_grant_was_withdrawn(
    install, sent, django_capture_on_commit_callbacks
):
    install(make_ext("alpha", on_settled=Consumer()), make_ext("beta", on_settled=Consumer()))
    for ext in ("alpha", "beta"):
        settled_cursor_initialise(extension_id=ext)
    withhold_grant("alpha", "settled")

    with django_capture_on_commit_callbacks(execute=True):
        assert settled_notify() == ["beta"]

    assert [args for args, _ in sent.of("deliver_settled")] == [("beta",)]


def test_the_cursor_records_when_it_last_moved(install, conversation, fake_clock):
    # the console's "updated at" of a consumer's cursor (the raw UPDATE skips auto_now)
    consumer = Consumer()
    install(make_ext("alpha", on_settled=consumer))
    settled_cursor_initialise(extension_id="alpha")
    conversation("c1")
    settle_runs("c1", 2)
    fake_clock.advance(seconds=3_600)

    settled_deliver_all(extension_id="alpha")

    assert SettledCursor.objects.get(pk="alpha").updated_at == clock.now()
