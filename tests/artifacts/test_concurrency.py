"""Concurrency on real PostgreSQL: the per-world row lock makes emit idempotent under races and
keeps the world's sequence gap-free."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest
from django.db import connection, transaction

from artifacts import services
from artifacts.fingerprints import clear_call_fingerprint
from artifacts.models import Event, EventKind, Operation, Record, World
from artifacts.services.world import WorldMutation
from tests.artifacts.helpers import decl, emit, make_world, op_context, started
from tests.postgres import someone_waits_for_a_lock, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS = 5
TOOL_CALLS = 20
IDEMPOTENT_IDS = 100  # spec 08: the same tool-call id 5x concurrently, for 100 ids


def _run_in_threads(count: int, target) -> list[BaseException]:
    """Start `count` threads on `target(index)`, each closing its connection at the end."""
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            target(index)
        except BaseException as exc:  # surfaced by the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return errors


def test_five_concurrent_identical_emits_create_one_record_for_every_tool_call(owner):
    make_world(owner, "world-1")
    ctx = started(op_context(), decl(save="operation", max_emits=1000))
    replies: dict[str, list] = defaultdict(list)
    lock = threading.Lock()
    barrier = threading.Barrier(THREADS)

    def worker(_index: int) -> None:
        for n in range(IDEMPOTENT_IDS):
            barrier.wait(timeout=30)  # all five race on the same tool-call id
            result = emit(ctx, payload=f"payload {n}", tool_call_id=f"call-{n}")
            with lock:
                replies[f"call-{n}"].append(result)

    assert _run_in_threads(THREADS, worker) == []

    assert Record.objects.count() == IDEMPOTENT_IDS
    for n in range(IDEMPOTENT_IDS):
        results = replies[f"call-{n}"]
        record = Record.objects.get(tool_call_id=f"call-{n}")
        assert len(results) == THREADS
        assert all(r.ok and r.record_id == record.record_id for r in results)
        assert sorted(r.idempotent for r in results) == [False] + [True] * (THREADS - 1)
        assert [r.markdown for r in results if r.idempotent] == [
            "# Runtime artifact already exists\n\noutput=panel"
        ] * (THREADS - 1)

    changed = emit(ctx, payload="something else", tool_call_id="call-0")
    assert changed.as_dict() == {
        "ok": False,
        "markdown": "# Runtime artifact rejected\n\n"
        "The same artifact tool-call ID is bound to different arguments",
    }
    assert Record.objects.count() == IDEMPOTENT_IDS
    assert services.integrity_check() == []


def test_concurrent_emits_of_distinct_calls_keep_the_sequence_gap_free(owner):
    make_world(owner, "world-1")
    ctx = started(op_context(), decl(save="operation", max_emits=1000))

    def worker(index: int) -> None:
        for n in range(TOOL_CALLS):
            assert emit(ctx, payload=f"{index}-{n}", tool_call_id=f"t{index}-{n}").ok

    assert _run_in_threads(THREADS, worker) == []

    sequences = sorted(
        [
            *Record.objects.values_list("sequence", flat=True),
            *Event.objects.values_list("sequence", flat=True),
        ]
    )
    total = THREADS * TOOL_CALLS * 2  # a record and its activate event each
    assert sequences == list(range(1, total + 1))
    assert services.integrity_check() == []


def test_concurrent_first_operations_of_a_world_create_one_world_row(owner):
    make_world(owner, "world-1")

    def worker(index: int) -> None:
        services.operation_begin(context=op_context(operation_id=f"op-{index}"))

    assert _run_in_threads(THREADS, worker) == []
    assert World.objects.count() == 1
    assert Operation.objects.count() == THREADS


def test_concurrent_clears_with_one_tool_call_id_write_one_event(owner):
    make_world(owner, "world-1")
    ctx = started(op_context(), decl(save="operation"))
    results = []
    barrier = threading.Barrier(THREADS)

    def worker(_index: int) -> None:
        barrier.wait(timeout=30)
        results.append(services.artifact_clear(context=ctx, output="panel", tool_call_id="clr"))

    assert _run_in_threads(THREADS, worker) == []
    assert Event.objects.filter(kind="clear").count() == 1
    assert sorted(r.idempotent for r in results) == [False] + [True] * (THREADS - 1)


def test_an_emit_that_waited_for_the_world_lock_reads_what_the_holder_committed(owner):
    """The world lock and the decision read go to the server in one round trip: the read
    still starts only once the lock is granted, so it numbers after the holder's rows."""
    make_world(owner, "world-1")
    ctx = started(op_context(), decl(save="operation", max_emits=1000))
    assert emit(ctx, payload="first", tool_call_id="first").ok  # record 1, activate 2
    holding, release = threading.Event(), threading.Event()
    held_call = clear_call_fingerprint(
        ctx.operation.as_dict(), {"request_id": "req-1", "request_attempt": 1}, output="panel"
    )

    def holder(_index: int) -> None:
        with transaction.atomic():
            mutation = WorldMutation.lock("world-1")
            assert mutation is not None
            # a clear: an event of the world (sequence 3) the waiting emit cannot know of
            mutation.event(EventKind.CLEAR, "op-1", output="panel", channel="main",
                           reason="explicit_clear", tool_call_id="held",
                           call_fingerprint=held_call, request_id="req-1",
                           request_attempt=1)  # fmt: skip
            mutation.flush()
            holding.set()
            assert release.wait(timeout=30)

    results = []

    def emitter(_index: int) -> None:
        assert holding.wait(timeout=30)
        results.append(emit(ctx, payload="second", tool_call_id="second"))

    def both(index: int) -> None:
        (holder, emitter)[index](index)

    def release_once_the_emit_waits() -> None:
        try:
            wait_until(lambda: holding.is_set() and someone_waits_for_a_lock())
            release.set()
        finally:
            connection.close()

    watcher = threading.Thread(target=release_once_the_emit_waits)
    watcher.start()
    assert _run_in_threads(2, both) == []
    watcher.join(timeout=30)
    assert release.is_set()

    assert [r.ok for r in results] == [True]
    assert Record.objects.get(tool_call_id="second").sequence == 4
    assert Event.objects.filter(record_id=results[0].record_id).get().sequence == 5
    assert services.integrity_check() == []


def test_one_operation_id_begun_concurrently_in_two_worlds_is_a_mismatch_never_a_500(owner):
    """The world lock serialises one world's calls only: two worlds' begins under one id race
    to insert it, and the loser answers the mismatch (409), as it would one call later."""
    from core.errors import HostError

    make_world(owner, "world-a")
    make_world(owner, "world-b")
    races = 20
    barriers = [threading.Barrier(2) for _ in range(races)]
    outcomes: dict[int, list[object]] = defaultdict(list)
    lock = threading.Lock()

    def worker(index: int) -> None:
        world = ("world-a", "world-b")[index]
        for n in range(races):
            barriers[n].wait(timeout=30)
            try:
                services.operation_begin(context=op_context(world_id=world, operation_id=f"op-{n}"))
                outcome: object = "begun"
            except HostError as exc:
                outcome = (exc.status, exc.message)
            with lock:
                outcomes[n].append(outcome)

    assert _run_in_threads(2, worker) == []  # no IntegrityError escaped

    mismatch = (409, "Artifact operation is bound to a different frozen payload")
    for n in range(races):
        assert sorted(outcomes[n], key=str) == sorted(["begun", mismatch], key=str), outcomes[n]
    assert Operation.objects.count() == races
