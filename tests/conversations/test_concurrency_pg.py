"""Locking and ordering on real PostgreSQL with real threads (skipped on SQLite).

- the settled sequence is gap-free in commit order: a concurrent reader never sees a hole;
- concurrent claimers never claim the same submission (SKIP LOCKED + the conversation lock);
- a claim retried with the same claim_key returns the same run, even concurrently and even
  when the retry waited for the first attempt's conversation lock;
- an expired lease re-queues the inputs exactly once, however many sweepers run.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import Count, Max, Min

from conversations import services
from conversations.models import Conversation, Run, SettledCounter, Submission
from core import clock
from core.errors import HostError

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TEXT = [{"type": "text", "text": "hi"}]


def in_threads(count: int, work: Callable[[int], object]) -> list[object]:
    """Run `work(i)` in `count` real threads started together; re-raise the first failure."""
    barrier = threading.Barrier(count)
    results: list[object] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[index] = work(index)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    if errors:
        raise errors[0]
    return results


def bulk_world(
    owner, conversations: int, per_conversation: int = 1, *, claimed: bool = False
) -> list[int]:
    """Conversations with queued (or already claimed) submissions, created in bulk."""
    now = clock.now()
    Conversation.objects.bulk_create(
        [Conversation(id=f"c{i}", owner=owner, last_activity_at=now) for i in range(conversations)]
    )
    runs: list[Run] = []
    if claimed:
        runs = Run.objects.bulk_create(
            [
                Run(
                    conversation_id=f"c{i}",
                    claimed_at=now,
                    lease_expires_at=now + dt.timedelta(seconds=300),
                )
                for i in range(conversations)
            ]
        )
    Submission.objects.bulk_create(
        [
            Submission(
                conversation_id=f"c{i}",
                request_id=f"r{j}",
                parts=TEXT,
                origin_kind="user",
                origin_user=owner,
                fingerprint="f",
                status="claimed" if claimed else "queued",
                run=runs[i] if claimed else None,
            )
            for i in range(conversations)
            for j in range(per_conversation)
        ],
        batch_size=1000,
    )
    SettledCounter.objects.update_or_create(id=1, defaults={"value": 0})
    return [run.pk for run in runs]


def test_concurrent_settlements_are_gap_free_in_commit_order(owner):
    threads, per_thread = 8, 500
    run_ids = bulk_world(owner, threads * per_thread, claimed=True)
    done = threading.Event()
    snapshots: list[int] = []
    holes: list[dict] = []

    def reader() -> None:
        try:
            while not done.is_set():
                # one statement = one snapshot. k distinct (unique) numbers whose min is 1 and
                # max is k are exactly 1..k: any hole would make max > count.
                seen = Run.objects.filter(settled_sequence__isnull=False).aggregate(
                    count=Count("pk"), low=Min("settled_sequence"), high=Max("settled_sequence")
                )
                if seen["count"] and (seen["low"], seen["high"]) != (1, seen["count"]):
                    holes.append(seen)
                snapshots.append(seen["count"])
        finally:
            connection.close()

    def settle(index: int) -> None:
        for run_id in run_ids[index::threads]:
            services.run_settle(run_id=run_id, status="unanswered", reason="done")

    watcher = threading.Thread(target=reader)
    started = time.monotonic()
    watcher.start()
    try:
        in_threads(threads, settle)
    finally:
        done.set()
        watcher.join(timeout=60)
    elapsed = time.monotonic() - started
    print(f"4000 settlements in {elapsed:.1f}s; reader took {len(snapshots)} snapshots")
    assert holes == []
    assert len(snapshots) >= 3
    assert any(0 < k < threads * per_thread for k in snapshots), "reader saw no partial state"
    final = sorted(Run.objects.values_list("settled_sequence", flat=True))
    assert final == list(range(1, threads * per_thread + 1))
    assert SettledCounter.objects.get().value == threads * per_thread
    assert not Submission.objects.exclude(status="consumed").exists()


def test_concurrent_claimers_never_claim_the_same_submission(owner):
    bulk_world(owner, 200, per_conversation=2)

    def claim_all(_: int) -> list[int]:
        claimed: list[int] = []
        while True:
            claim = services.run_claim()
            if claim is None:
                if not Submission.objects.filter(status="queued").exists():
                    return claimed
                continue  # everything runnable was locked by the others for a moment
            claimed += list(claim.run.submissions.values_list("pk", flat=True))

    per_thread = in_threads(8, claim_all)
    everything = [pk for claimed in per_thread for pk in claimed]
    assert len(everything) == len(set(everything)) == 400
    assert Counter(Run.objects.values_list("conversation_id", flat=True)).most_common(1)[0][1] == 1
    assert Run.objects.count() == 200
    assert sum(1 for claimed in per_thread if claimed) >= 2, "the work was not spread"


def test_concurrent_claims_of_one_conversation_give_one_run(owner):
    bulk_world(owner, 1, per_conversation=3)

    def claim(_: int) -> int | str | None:
        try:
            result = services.run_claim(conversation_id="c0")
        except services.ConversationBusy:
            return "busy"
        return result.run.pk if result else None

    outcomes = in_threads(8, claim)
    runs = [o for o in outcomes if isinstance(o, int)]
    assert len(runs) == 1
    assert set(outcomes) - set(runs) <= {"busy", None}
    assert set(Submission.objects.values_list("run_id", flat=True)) == {runs[0]}


def test_a_claim_retried_with_the_same_claim_key_returns_the_same_run(owner):
    bulk_world(owner, 8)
    first = services.run_claim(claim_key="lost-response")
    assert first is not None and first.created

    def retry(_: int) -> int:
        claim = services.run_claim(claim_key="lost-response")
        assert claim is not None and not claim.created
        return claim.run.pk

    assert set(in_threads(8, retry)) == {first.run.pk}
    assert Run.objects.count() == 1


def _claim_outcome(**claim: Any) -> object:
    """One attempt of a claim: its run's id, or the (status, message) of its HostError."""
    try:
        result = services.run_claim(**claim)
    except HostError as exc:
        return (exc.status, exc.message)
    assert result is not None
    return result.run.pk


def test_concurrent_first_claims_with_one_claim_key_agree_on_one_run(owner):
    """Attempts of one claim (claim-any) at once: one run; each attempt gets it, or, while the
    attempt that made it still captures, a 503 to claim again (never a second capture)."""
    from conversations.services import runs

    bulk_world(owner, 8)

    outcomes = in_threads(8, lambda _: _claim_outcome(claim_key="same"))

    run = Run.objects.get()
    assert set(outcomes) <= {run.pk, (503, runs.MSG_CLAIM_IN_FLIGHT)}, outcomes
    assert run.pk in outcomes
    assert Submission.objects.filter(status="claimed").count() == 1
    retried = services.run_claim(claim_key="same")
    assert retried is not None and retried.run.pk == run.pk


def test_conversation_claims_retried_while_the_first_is_in_flight_agree_on_one_run(
    owner, monkeypatch
):
    """Spec 01: a retry with the same claim_key returns the same run. A retry sent while the
    first attempt is still in flight (a client timeout) has looked its key up before that
    attempt committed; it then waits for the conversation lock and finds the conversation
    busy with the very run it asks for: that run once captured, or a 503 to claim again while
    the first attempt still captures (never a second capture beside it), and never 409
    "Conversation is busy"."""
    from conversations.services import runs

    bulk_world(owner, 1)
    # every attempt has looked its key up before any claims: the window made deterministic
    looked_up = threading.Barrier(8)
    claim_in, capture = runs._claim_in, runs.run_capture
    captures: list[int] = []

    def after_the_lookup(**kwargs):
        looked_up.wait(timeout=30)
        return claim_in(**kwargs)

    def counted_capture(run):
        captures.append(run.pk)
        return capture(run)

    monkeypatch.setattr(runs, "_claim_in", after_the_lookup)
    monkeypatch.setattr(runs, "run_capture", counted_capture)

    outcomes = in_threads(8, lambda _: _claim_outcome(conversation_id="c0", claim_key="same"))

    run = Run.objects.get()
    assert set(outcomes) <= {run.pk, (503, runs.MSG_CLAIM_IN_FLIGHT)}, outcomes
    assert run.pk in outcomes
    assert captures == [run.pk]  # one capture, by the attempt that claimed
    monkeypatch.setattr(runs, "_claim_in", claim_in)
    retried = services.run_claim(conversation_id="c0", claim_key="same")
    assert retried is not None and retried.run.pk == run.pk and not retried.created


def test_a_claim_retry_whose_run_was_released_meanwhile_claims_afresh(owner, monkeypatch):
    """The first attempt's run was released (its capture refused, its lease expired) after the
    retry found the key taken under the lock: the key is free again, and the retry claims
    afresh instead of failing with a 500."""
    from conversations.services import runs

    bulk_world(owner, 1)
    first = services.run_claim(conversation_id="c0", claim_key="same")
    assert first is not None
    claim_in = runs._claim_in
    calls = 0

    def released_meanwhile(**kwargs):
        nonlocal calls
        calls += 1
        if calls == 1:
            with transaction.atomic():  # released as a refused capture releases: key given up
                runs.conversation_lock(conversation_id="c0")
                runs._release_locked(run_id=first.run.pk, conversation_id="c0", count=False)
            raise runs._ClaimKeyUsed
        return claim_in(**kwargs)

    monkeypatch.setattr(runs, "_claim_in", released_meanwhile)
    monkeypatch.setattr(runs, "_claim_replay", _no_replay_first(runs._claim_replay))

    again = services.run_claim(conversation_id="c0", claim_key="same")

    assert again is not None and again.created
    assert again.run.pk != first.run.pk
    assert Run.objects.get(pk=again.run.pk).claim_key == "same"


def _no_replay_first(replay):
    """The retry's first look-up found nothing (the first attempt had not committed yet)."""
    seen = False

    def wrapped(**kwargs):
        nonlocal seen
        if not seen:
            seen = True
            return None
        return replay(**kwargs)

    return wrapped


def test_an_expired_lease_requeues_the_inputs_once_however_many_sweepers(owner, fake_clock):
    bulk_world(owner, 100, per_conversation=2)
    for _ in range(100):
        services.run_claim()
    assert Submission.objects.filter(status="claimed").count() == 200
    fake_clock.advance(seconds=301)

    def sweep(_: int) -> int:
        total = 0
        while True:
            handled, more = services.runs_expire_leases(limit=16)
            total += handled
            if not more and not Run.objects.filter(status="claimed").exists():
                return total

    assert sum(in_threads(4, sweep)) == 100
    assert set(Run.objects.values_list("status", flat=True)) == {"released"}
    assert set(Submission.objects.values_list("status", "release_count", "run_id")) == {
        ("queued", 1, None)
    }
    again = services.run_claim(conversation_id="c7")
    assert again is not None and again.run.submissions.count() == 2
