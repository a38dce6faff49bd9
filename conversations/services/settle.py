"""Settling a run: idempotent outcomes and the gap-free settled sequence (spec 01)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from django.db import connection, transaction
from django.db.models import Max

from conversations.models import (
    Conversation,
    Entry,
    Outcome,
    Run,
    RunStatus,
    SettledCounter,
    Submission,
    SubmissionStatus,
)
from conversations.selectors import MSG_RUN_NOT_FOUND
from conversations.services.common import (
    MSG_ANSWER_ENTRY,
    MSG_RUN_RELEASED,
    MSG_SETTLED_DIFFERENTLY,
    conversation_touch,
    json_check,
)
from core import clock
from core.errors import HostError

logger = logging.getLogger(__name__)

REASON_MAX = 512


@dataclass(frozen=True)
class Settled:
    run: Run
    changed: bool  # False: an idempotent retry of the same outcome


def run_settle(
    *,
    run_id: int,
    status: Literal["answered", "unanswered"],
    answer_entry_id: int | None = None,
    reason: str | None = None,
) -> Settled:
    """Settle a claimed run: answered (with the answer entry) or unanswered (with a reason).

    Idempotent: the same outcome again → the run unchanged; a different one → 409. In ONE
    transaction the run takes the next settled sequence, activity is stamped and the inputs
    become consumed. Five statements: read + lock, (answer check), inputs, activity, sequence
    + run.
    """
    _outcome_check(status=status, answer_entry_id=answer_entry_id, reason=reason)
    try:
        with transaction.atomic(durable=True):
            # One statement reads the run and locks its conversation (lock order: the
            # conversation first). Having waited for that lock, the run columns may predate
            # it; a run's status only moves forward, and the compare-and-set in
            # run_settle_locked catches a "claimed" that is no longer true.
            run = _run_locking_conversation(run_id)
            if run is None:
                raise HostError("store", "not_found", MSG_RUN_NOT_FOUND)
            if run.status != RunStatus.CLAIMED:
                return _settle_replay(
                    run, status=status, answer_entry_id=answer_entry_id, reason=reason
                )
            if status == "answered" and not (
                answer_entry_id is not None
                and Entry.objects.filter(
                    pk=answer_entry_id, conversation_id=run.conversation_id
                ).exists()
            ):
                raise HostError(
                    "contract",
                    "invalid",
                    MSG_ANSWER_ENTRY,
                    details={"answer_entry_id": [MSG_ANSWER_ENTRY]},
                )
            return run_settle_locked(
                run=run, status=status, answer_entry_id=answer_entry_id, reason=reason or ""
            )
    except _RunMoved:
        # settled or released by someone else while we waited: answer as a retry would
        moved = Run.objects.defer("capture").get(pk=run_id)
        return _settle_replay(moved, status=status, answer_entry_id=answer_entry_id, reason=reason)


def _run_locking_conversation(run_id: int) -> Run | None:
    """The run (without its capture) in one plain statement that also locks its conversation
    row `FOR NO KEY UPDATE` (PostgreSQL; SQLite's IMMEDIATE transactions exclude other writers).
    Every settlement starts here: no ORM query compilation on this path."""
    qn = connection.ops.quote_name
    columns = ", ".join(
        f"r.{qn(field.column)}" for field in Run._meta.concrete_fields if field.name != "capture"
    )
    lock = " FOR NO KEY UPDATE OF c" if connection.vendor == "postgresql" else ""
    sql = (
        f"SELECT {columns} FROM {qn(Run._meta.db_table)} r "  # noqa: S608 (our table names)
        f"JOIN {qn(Conversation._meta.db_table)} c ON c.id = r.conversation_id "
        f"WHERE r.id = %s{lock}"
    )
    return next(iter(Run.objects.raw(sql, [run_id])), None)


class _RunMoved(Exception):
    """The run stopped being claimed under us; the settling transaction must roll back."""


def _outcome_check(*, status: str, answer_entry_id: int | None, reason: str | None) -> None:
    if status == Outcome.ANSWERED:
        if answer_entry_id is None or reason is not None:
            raise HostError(
                "contract",
                "invalid",
                "An answered outcome names its answer entry",
                details={"answer_entry_id": ["Required; `reason` is not allowed."]},
            )
    elif status == Outcome.UNANSWERED:
        if answer_entry_id is not None or not isinstance(reason, str) or not reason:
            raise HostError(
                "contract",
                "invalid",
                "An unanswered outcome gives a reason",
                details={"reason": ["Required; `answer_entry_id` is not allowed."]},
            )
        if len(reason) > REASON_MAX:
            raise HostError(
                "contract",
                "invalid",
                "Reason is too long",
                details={"reason": [f"At most {REASON_MAX} characters."]},
            )
        json_check(reason, field="reason")
    else:
        raise HostError(
            "contract",
            "invalid",
            "Outcome status is invalid",
            details={"status": ["answered or unanswered."]},
        )


def _settle_replay(
    run: Run, *, status: str, answer_entry_id: int | None, reason: str | None
) -> Settled:
    if run.status == RunStatus.RELEASED:
        raise HostError("contract", "conflict", MSG_RUN_RELEASED)
    same = run.outcome == status and (
        run.answer_entry_id == answer_entry_id
        if status == Outcome.ANSWERED
        else run.reason == (reason or "")
    )
    if not same:
        raise HostError("contract", "conflict", MSG_SETTLED_DIFFERENTLY)
    return Settled(run, False)


def run_settle_locked(
    *, run: Run, status: str, answer_entry_id: int | None, reason: str
) -> Settled:
    """The settling transaction's writes (the caller holds the transaction and the
    conversation lock, and read the run as claimed).

    Lock order: the conversation row, the run's submissions, then the counter row. The counter
    is taken LAST and held to commit, so the global serialisation point is as short as it can
    be: after it only the run row is written before COMMIT.
    """
    now = clock.now()
    stamp = connection.ops.adapt_datetimefield_value(now)
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:  # plain statements: every settlement runs them
        cursor.execute(
            f"UPDATE {qn(Submission._meta.db_table)} SET status = %s, updated_at = %s "  # noqa: S608
            "WHERE run_id = %s AND status = %s",
            [SubmissionStatus.CONSUMED.value, stamp, run.pk, SubmissionStatus.CLAIMED.value],
        )
    conversation_touch(conversation_id=run.conversation_id, changed="runs", stamp_activity=True)
    sequence = settled_sequence_next()
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {qn(Run._meta.db_table)} SET status = %s, outcome = %s, "  # noqa: S608
            "answer_entry_id = %s, reason = %s, settled_sequence = %s, settled_at = %s, "
            "updated_at = %s WHERE id = %s AND status = %s",
            [
                RunStatus.SETTLED.value,
                status,
                answer_entry_id,
                reason,
                sequence,
                stamp,
                stamp,
                run.pk,
                RunStatus.CLAIMED.value,
            ],
        )
        updated = cursor.rowcount
    if not updated:
        raise _RunMoved()  # rolls back everything above, the sequence number included
    run.status, run.outcome, run.reason = RunStatus.SETTLED, status, reason
    run.answer_entry_id, run.settled_sequence, run.settled_at = answer_entry_id, sequence, now
    run_id = run.pk
    transaction.on_commit(
        lambda: run_settled_after_commit(run_id=run_id, sequence=sequence), robust=True
    )
    return Settled(run, True)


def settled_sequence_next() -> int:
    """The next settled sequence number: gap-free in commit order.

    `UPDATE … RETURNING` takes the counter row's lock (what `SELECT … FOR UPDATE` would) and
    holds it until the settling transaction commits, so a concurrent settler gets k+1 only after
    k is committed: no number ever becomes visible after a larger one. A database sequence
    would not give that (spec 01). Must run inside the settling transaction.
    """
    table = connection.ops.quote_name(SettledCounter._meta.db_table)
    sql = f"UPDATE {table} SET value = value + 1 WHERE id = 1 RETURNING value"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql)
        row = cursor.fetchone()
        if row is None:
            # the row is seeded by migration 0002; a flushed test database lost it. Seed past
            # any number already handed out, ignoring a concurrent seeder, and go again.
            top = Run.objects.aggregate(top=Max("settled_sequence"))["top"] or 0
            SettledCounter.objects.bulk_create(
                [SettledCounter(id=1, value=top)], ignore_conflicts=True
            )
            cursor.execute(sql)
            row = cursor.fetchone()
    return int(row[0])


def run_settled_after_commit(*, run_id: int, sequence: int) -> None:
    """After-commit hook of a settlement: kick settled delivery (beat's sweep is the safety net)
    and notify the notifiers (`run.settled`). Never raises into the committed settle."""
    from extensions_host.background.services.settled import settled_after_commit
    from extensions_host.contributions.services.notify import notification_run_settled

    logger.debug("run %s settled as sequence %s", run_id, sequence)
    settled_after_commit()
    try:
        notification_run_settled(run_id=run_id)
    except Exception:
        logger.exception("run.settled notification for run %s failed", run_id)
