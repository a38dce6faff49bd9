"""Runs: claim (SKIP LOCKED, claim_key), heartbeat, steers, entry appends, lease expiry.
Settling (and the gap-free settled sequence) lives in `settle`."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, Max, OuterRef, Q

from conversations.capture import CaptureRejected, run_capture
from conversations.models import (
    Delivery,
    Entry,
    Outcome,
    Role,
    Run,
    RunStatus,
    Submission,
    SubmissionStatus,
    conversation_id_valid,
)
from conversations.selectors import MSG_CONVERSATION_NOT_FOUND, MSG_RUN_NOT_FOUND
from conversations.services.common import (
    MSG_CLAIM_KEY_TAKEN,
    MSG_ENTRY_KEY_REUSED,
    MSG_LEASE_EXPIRED,
    MSG_RUN_NOT_CLAIMED,
    MSG_RUN_OTHER_CONVERSATION,
    MSG_RUN_RELEASED,
    PART_TYPES_ENTRY,
    content_size_check,
    conversation_lock,
    conversation_touch,
    echo_wake,
    json_check,
    parts_check,
)
from conversations.services.settle import run_settle_locked
from conversations.services.submissions import ConversationBusy
from core import clock
from core.errors import HostError

logger = logging.getLogger(__name__)

CLAIM_MAX_INPUTS = 64  # inputs per run; the rest wait for the next run
CLAIM_CANDIDATES = 16  # conversations tried per claim-any call
# a claim whose key a concurrent attempt took, and whose run was released before it could be
# answered with it, claims afresh once more
CLAIM_ATTEMPTS = 2
MSG_CLAIM_IN_FLIGHT = "An attempt of this claim is still in progress; claim again"
LEASE_RELEASES_MAX = 3  # the third expired lease of the same inputs settles them unanswered
LEASE_PAGE = 64
KEY_MAX = 128
ENTRY_ROLES = (Role.ASSISTANT, Role.TOOL, Role.SYSTEM)


@dataclass(frozen=True)
class Claim:
    run: Run
    created: bool  # False: a retry with the same claim_key returned the existing run


@dataclass(frozen=True)
class Appended:
    entry: Entry
    created: bool


def _runnable(now: dt.datetime) -> Q:
    """Submissions whose `not_before` (host clock) has come."""
    return Q(not_before__isnull=True) | Q(not_before__lte=now)


def _lease_end(now: dt.datetime) -> dt.datetime:
    return now + dt.timedelta(seconds=settings.RUN_LEASE_SECONDS)


def _key_check(value: str | None, field: str) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not 1 <= len(value) <= KEY_MAX:
        raise HostError(
            "contract",
            "invalid",
            f"{field} is invalid",
            details={field: [f"1 to {KEY_MAX} characters."]},
        )
    json_check(value, field=field)


# ── claim ────────────────────────────────────────────────────────────────────────────────────


def run_claim(*, conversation_id: str | None = None, claim_key: str | None = None) -> Claim | None:
    """Claim the runnable submissions of one conversation (or of any, oldest work first).

    None when there is nothing to claim. A conversation has at most one unsettled run: a
    conversation-scoped claim on a busy conversation → 409 "Conversation is busy"; claim-any
    skips busy ones. A retry with the same `claim_key` returns the same run.
    Order of work (spec 01): commit the claim, then capture outside any write transaction.
    """
    _key_check(claim_key, "claim_key")
    if conversation_id is not None and not conversation_id_valid(conversation_id):
        raise HostError("store", "not_found", MSG_CONVERSATION_NOT_FOUND)  # before any query
    if claim_key is not None:
        replay = _claim_replay(claim_key=claim_key, conversation_id=conversation_id)
        if replay is not None:
            return replay
    for attempt in range(CLAIM_ATTEMPTS):
        try:
            run = _claim_once(conversation_id=conversation_id, claim_key=claim_key)
        except (IntegrityError, _ClaimKeyUsed):
            # the only unique value a claim can collide on under the conversation lock is the
            # claim key: a concurrent attempt of the same claim won. Answer with its run,
            # unless it is still capturing (two captures of one run must not run at once).
            if claim_key is None:
                raise
            replay = _claim_replay(
                claim_key=claim_key, conversation_id=conversation_id, in_flight=True
            )
            if replay is not None:
                return replay
            # that run was released meanwhile and gave its key up: claim afresh
            if attempt + 1 == CLAIM_ATTEMPTS:
                raise HostError(
                    "store", "unavailable", MSG_CLAIM_IN_FLIGHT, retry_after=1
                ) from None
            continue
        if run is None:
            return None
        _capture(run)
        return Claim(run, True)
    return None  # not reached: the loop returns or raises


def _claim_once(*, conversation_id: str | None, claim_key: str | None) -> Run | None:
    if conversation_id is not None:
        return _claim_in(conversation_id=conversation_id, claim_key=claim_key, skip=False)
    for candidate in _claim_candidates():
        run = _claim_in(conversation_id=candidate, claim_key=claim_key, skip=True)
        if run is not None:
            return run
    return None


def _claim_replay(
    *, claim_key: str, conversation_id: str | None, in_flight: bool = False
) -> Claim | None:
    """The run an earlier attempt of this claim made, or None when there is none (any more).
    `in_flight`: that attempt committed while this one waited for the conversation lock, so it
    is most likely capturing now; a run without its capture yet is then a 503 (claim again)
    rather than a second capture beside the first."""
    run = Run.objects.filter(claim_key=claim_key).first()
    if run is None:
        return None
    if run.status == RunStatus.RELEASED:
        # released before releases gave up their key: free it, and the retry claims afresh
        # (in this conversation or another: a released run's key names nothing)
        Run.objects.filter(pk=run.pk, status=RunStatus.RELEASED).update(claim_key=None)
        return None
    if conversation_id is not None and run.conversation_id != conversation_id:
        raise HostError("contract", "conflict", MSG_CLAIM_KEY_TAKEN)
    if run.status == RunStatus.CLAIMED and not run.capture:
        if in_flight:
            raise HostError("store", "unavailable", MSG_CLAIM_IN_FLIGHT, retry_after=1)
        _capture(run)  # the first attempt committed its claim but died before capturing
    return Claim(run, False)


def _claim_candidates() -> list[str]:
    """Conversations with runnable queued work and no unsettled run, oldest work first.

    A plain read: every candidate is re-checked under its conversation lock, taken with
    SKIP LOCKED so N runtimes spread over different conversations instead of queueing.
    """
    busy = Run.objects.filter(conversation_id=OuterRef("conversation_id"), status=RunStatus.CLAIMED)
    rows = (
        Submission.objects.filter(status=SubmissionStatus.QUEUED)
        .filter(_runnable(clock.now()))
        .filter(~Exists(busy))
        .order_by("pk")
        .values_list("conversation_id", flat=True)[: CLAIM_CANDIDATES * 4]
    )
    return list(dict.fromkeys(rows))[:CLAIM_CANDIDATES]


class _ClaimKeyUsed(Exception):
    """A run with this claim key committed while the claim waited for its conversation lock."""


def _claim_in(*, conversation_id: str, claim_key: str | None, skip: bool) -> Run | None:
    with transaction.atomic(durable=True):
        if not conversation_lock(conversation_id=conversation_id, skip_locked=skip):
            if skip:
                return None  # another claimer holds it: try the next conversation
            raise HostError("store", "not_found", MSG_CONVERSATION_NOT_FOUND)
        # A retry sent while the first attempt was still in flight looked its key up before
        # that attempt committed, then waited here: its run is now the conversation's busy
        # run, and the retry must get it, not 409 "Conversation is busy" (spec 01). Looked up
        # again under the lock, which the first attempt held until its commit.
        if claim_key is not None and Run.objects.filter(claim_key=claim_key).exists():
            raise _ClaimKeyUsed
        if Run.objects.filter(conversation_id=conversation_id, status=RunStatus.CLAIMED).exists():
            if skip:
                return None
            raise ConversationBusy()
        now = clock.now()
        inputs = list(
            Submission.objects.filter(
                conversation_id=conversation_id, status=SubmissionStatus.QUEUED
            )
            .filter(_runnable(now))
            .order_by("pk")
            .values_list("pk", flat=True)[:CLAIM_MAX_INPUTS]
        )
        if not inputs:
            return None
        run = Run.objects.create(
            conversation_id=conversation_id,
            claim_key=claim_key,
            status=RunStatus.CLAIMED,
            claimed_at=now,
            lease_expires_at=_lease_end(now),
        )
        # the conversation lock serialises every submission state change, so these rows are
        # still queued; the status filter is a belt to the braces
        Submission.objects.filter(pk__in=inputs, status=SubmissionStatus.QUEUED).update(
            status=SubmissionStatus.CLAIMED, run=run, updated_at=now
        )
        conversation_touch(conversation_id=conversation_id, changed="runs")
    return run


def _capture(run: Run) -> None:
    """Capture participation outside any write transaction, then store it on the run."""
    try:
        capture = run_capture(run)
    except CaptureRejected as rejected:
        with transaction.atomic(durable=True):
            conversation_lock(conversation_id=run.conversation_id)
            if Run.objects.filter(pk=run.pk, status=RunStatus.CLAIMED).exists():
                _release_locked(run_id=run.pk, conversation_id=run.conversation_id, count=False)
            if rejected.in_release_transaction is not None:
                rejected.in_release_transaction()
        raise rejected.error from rejected
    Run.objects.filter(pk=run.pk).update(capture=capture)
    run.capture = capture


# ── heartbeat and steers ─────────────────────────────────────────────────────────────────────


def run_heartbeat(*, run_id: int) -> Run:
    """Extend a claimed run's lease by RUN_LEASE_SECONDS from now (host clock)."""
    now = clock.now()
    updated = Run.objects.filter(pk=run_id, status=RunStatus.CLAIMED).update(
        heartbeat_at=now, lease_expires_at=_lease_end(now), updated_at=now
    )
    run = Run.objects.defer("capture").filter(pk=run_id).first()
    if run is None:
        raise HostError("store", "not_found", MSG_RUN_NOT_FOUND)
    if not updated:
        raise _not_claimed(run)
    return run


def _not_claimed(run: Run) -> HostError:
    message = MSG_RUN_RELEASED if run.status == RunStatus.RELEASED else MSG_RUN_NOT_CLAIMED
    return HostError("contract", "conflict", message)


def run_steers_take(*, run_id: int) -> list[Submission]:
    """Take the conversation's pending steer submissions into the live run, in order."""
    run = Run.objects.filter(pk=run_id).only("pk", "conversation_id", "status").first()
    if run is None:
        raise HostError("store", "not_found", MSG_RUN_NOT_FOUND)
    with transaction.atomic(durable=True):
        conversation_lock(conversation_id=run.conversation_id)
        run.refresh_from_db(fields=["status"])  # current under the conversation lock
        if run.status != RunStatus.CLAIMED:
            raise _not_claimed(run)
        now = clock.now()
        steers = list(
            Submission.objects.select_related("entry")
            .filter(
                conversation_id=run.conversation_id,
                status=SubmissionStatus.QUEUED,
                delivery=Delivery.STEER,
            )
            .filter(_runnable(now))
            .order_by("pk")[:CLAIM_MAX_INPUTS]
        )
        if steers:
            Submission.objects.filter(pk__in=[s.pk for s in steers]).update(
                status=SubmissionStatus.CLAIMED, run_id=run.pk, updated_at=now
            )
            conversation_touch(conversation_id=run.conversation_id, changed="runs")
        for steer in steers:
            steer.status = SubmissionStatus.CLAIMED
            steer.run_id = run.pk
    return steers


# ── entries ──────────────────────────────────────────────────────────────────────────────────


def entry_append(
    *,
    conversation_id: str,
    run_id: int,
    role: str,
    content: Any,
    entry_key: str | None = None,
) -> Appended:
    """The runtime appends an entry to its claimed run; idempotent on `entry_key` per run
    (same role and content → the existing entry; different → 409)."""
    # an id that cannot exist is simply not found, before any query (a NUL in it would be a
    # driver error on PostgreSQL, not an answer)
    if not conversation_id_valid(conversation_id):
        raise HostError("store", "not_found", MSG_CONVERSATION_NOT_FOUND)
    if role not in ENTRY_ROLES:
        raise HostError(
            "contract",
            "invalid",
            "Role is invalid",
            details={"role": [f"One of {[str(r) for r in ENTRY_ROLES]}."]},
        )
    content, _, size = parts_check(content, allowed=PART_TYPES_ENTRY, field="content")
    content_size_check(size, field="content")
    _key_check(entry_key, "entry_key")
    with transaction.atomic(durable=True):
        if not conversation_lock(conversation_id=conversation_id):
            raise HostError("store", "not_found", MSG_CONVERSATION_NOT_FOUND)
        run = Run.objects.filter(pk=run_id).only("pk", "conversation_id", "status").first()
        if run is None:
            raise HostError("store", "not_found", MSG_RUN_NOT_FOUND)
        if run.conversation_id != conversation_id:
            raise HostError(
                "contract",
                "invalid",
                MSG_RUN_OTHER_CONVERSATION,
                details={"run_id": [MSG_RUN_OTHER_CONVERSATION]},
            )
        if entry_key is not None:
            # race-free: appends to one conversation are serialised by its lock
            existing = Entry.objects.filter(run_id=run_id, entry_key=entry_key).first()
            if existing is not None:
                if existing.role != role or existing.content != content:
                    raise HostError("contract", "conflict", MSG_ENTRY_KEY_REUSED)
                return Appended(existing, False)
        if run.status != RunStatus.CLAIMED:
            raise _not_claimed(run)
        entry = Entry.objects.create(
            conversation_id=conversation_id,
            role=role,
            content=content,
            run_id=run_id,
            entry_key=entry_key,
        )
        conversation_touch(conversation_id=conversation_id, changed="entries")
    return Appended(entry, True)


# ── leases ───────────────────────────────────────────────────────────────────────────────────


def runs_expire_leases(*, limit: int = LEASE_PAGE) -> tuple[int, bool]:
    """Release claimed runs whose lease expired (host clock) and re-queue their inputs; the
    third expiry of the same inputs settles the run unanswered "lease expired" instead.
    Returns (runs handled, more may remain)."""
    now = clock.now()
    due = list(
        Run.objects.filter(status=RunStatus.CLAIMED, lease_expires_at__lte=now)
        .order_by("lease_expires_at", "pk")
        .values_list("pk", "conversation_id")[:limit]
    )
    handled = 0
    for run_id, conversation_id in due:
        with transaction.atomic(durable=True):
            if not conversation_lock(conversation_id=conversation_id, skip_locked=True):
                continue  # busy with a settle or claim right now: the next sweep sees it
            # the run row too (conversation → run, the lock order): a heartbeat racing this
            # release either lands first (the re-checked lease is no longer expired) or waits
            # and then finds the run released
            run = (
                Run.objects.select_for_update()
                .defer("capture")
                .filter(pk=run_id, status=RunStatus.CLAIMED, lease_expires_at__lte=now)
                .first()
            )
            if run is None:
                continue  # settled or heartbeated meanwhile
            inputs = Submission.objects.filter(run_id=run_id, status=SubmissionStatus.CLAIMED)
            released = inputs.aggregate(top=Max("release_count"))["top"] or 0
            if released + 1 >= LEASE_RELEASES_MAX:
                inputs.update(release_count=F("release_count") + 1)
                run_settle_locked(
                    run=run,
                    status=Outcome.UNANSWERED,
                    answer_entry_id=None,
                    reason=MSG_LEASE_EXPIRED,
                )
            else:
                _release_locked(run_id=run_id, conversation_id=conversation_id, count=True)
            handled += 1
    return handled, len(due) == limit


def _release_locked(*, run_id: int, conversation_id: str, count: bool) -> None:
    """Release a claimed run and re-queue its inputs (the caller holds the conversation lock).
    `count`: a lease expiry counts towards LEASE_RELEASES_MAX; a rejected capture does not.
    The run gives up its claim key: a retry with that key claims afresh (spec 01: after a 422
    the runtime claims again) instead of being answered with the released run."""
    now = clock.now()
    values: dict[str, Any] = {"status": SubmissionStatus.QUEUED, "run": None, "updated_at": now}
    if count:
        values["release_count"] = F("release_count") + 1
    Submission.objects.filter(run_id=run_id, status=SubmissionStatus.CLAIMED).update(**values)
    Run.objects.filter(pk=run_id).update(status=RunStatus.RELEASED, claim_key=None, updated_at=now)
    conversation_touch(conversation_id=conversation_id, changed="runs")
    echo_wake()
