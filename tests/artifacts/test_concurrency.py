"""Concurrency on real PostgreSQL: the per-world row lock makes emit idempotent under races and
keeps the world's sequence gap-free."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest
from django.db import connection

from artifacts import services
from artifacts.models import Event, Operation, Record, World
from tests.artifacts.helpers import decl, emit, make_world, op_context, started

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
