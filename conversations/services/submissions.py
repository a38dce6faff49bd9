"""Submissions: admission (idempotent on request_id, when_busy), withdrawal."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from django.db import transaction

from conversations.models import (
    Conversation,
    Delivery,
    Entry,
    OriginKind,
    Role,
    Run,
    RunStatus,
    Submission,
    SubmissionStatus,
)
from conversations.selectors import MSG_CONVERSATION_NOT_FOUND, conversation_get
from conversations.services.common import (
    MSG_ARCHIVED,
    MSG_BUSY,
    MSG_NOT_QUEUED,
    MSG_REQUEST_ID_REUSED,
    MSG_SUBMISSION_NOT_FOUND,
    MSG_TEXT_TOO_LARGE,
    PART_TYPES_SUBMISSION,
    REQUEST_ID_MAX,
    TEXT_LIMIT_BYTES,
    content_size_check,
    conversation_lock,
    conversation_touch,
    echo_wake,
    json_check,
    parts_check,
)
from core import clock
from core.auth import Principal
from core.db import BIGINT_MAX
from core.errors import HostError

WhenBusy = Literal["queue", "steer", "reject"]
WHEN_BUSY = ("queue", "steer", "reject")


class ConversationBusy(HostError):
    """when_busy=reject on a busy conversation (an extension's `send` maps it to NotReady)."""

    def __init__(self) -> None:
        super().__init__("contract", "conflict", MSG_BUSY)


@dataclass(frozen=True)
class Origin:
    kind: str  # OriginKind
    user: Any = None
    extension_id: str = ""
    correlation: str = ""

    @classmethod
    def of_user(cls, user: Any) -> Origin:
        return cls(kind=OriginKind.USER, user=user)

    @classmethod
    def of_extension(cls, extension_id: str, correlation: str = "") -> Origin:
        return cls(kind=OriginKind.EXTENSION, extension_id=extension_id, correlation=correlation)


@dataclass(frozen=True)
class Admission:
    submission: Submission
    created: bool  # False: an idempotent retry returned the existing submission


def submission_fingerprint(
    *,
    parts: list[dict[str, Any]],
    delivery: str,
    when_busy: str,
    not_before: dt.datetime | None,
    origin: Origin,
) -> str:
    """sha256 over the canonical request: an idempotent retry must match it exactly."""
    canonical = json.dumps(
        {
            "parts": parts,
            "delivery": delivery,
            "when_busy": when_busy,
            "not_before": clock.to_ms(not_before) if not_before is not None else None,
            "origin": [origin.kind, origin.extension_id, origin.correlation],
        },
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def submission_admit(
    *,
    conversation_id: str,
    parts: Any,
    origin: Origin,
    request_id: str | None = None,
    delivery: str = Delivery.FOLLOW_UP,
    when_busy: str = "queue",
    not_before: dt.datetime | None = None,
) -> Admission:
    """Admit a submission in the caller's transaction (the API wraps it; an extension's send
    runs it inside its frame).

    Every bound is checked before anything is written: the text (64 KiB) and the entry the
    parts become (1 MiB encoded). Idempotent on `request_id`: same content → the existing
    submission; different → 409. Archived → 409 `contract/closed`.
    Busy (a claimed, unsettled run): `queue` admits for the next run, `steer` admits with
    delivery `steer` for the live run, `reject` raises ConversationBusy. The transcript entry
    is created now, at admission; activity is stamped and the version bumped.
    """
    parts, text_bytes, size = parts_check(parts, allowed=PART_TYPES_SUBMISSION)
    if text_bytes > TEXT_LIMIT_BYTES:
        raise HostError(
            "limit",
            "too_large",
            MSG_TEXT_TOO_LARGE,
            details={"parts": [f"Text parts total at most {TEXT_LIMIT_BYTES} bytes."]},
        )
    content_size_check(size, field="parts")  # the parts become the entry's content
    if request_id is None:
        request_id = uuid.uuid4().hex
    if not isinstance(request_id, str) or not 1 <= len(request_id) <= REQUEST_ID_MAX:
        raise HostError(
            "contract",
            "invalid",
            "Request id is invalid",
            details={"request_id": [f"1 to {REQUEST_ID_MAX} characters."]},
        )
    json_check(request_id, field="request_id")
    json_check(origin.correlation, field="correlation")
    if delivery not in Delivery.values or when_busy not in WHEN_BUSY:
        raise HostError("contract", "invalid", "Delivery or when_busy is invalid")
    fingerprint = submission_fingerprint(
        parts=parts, delivery=delivery, when_busy=when_busy, not_before=not_before, origin=origin
    )

    # Lock order everywhere: the conversation row first. It serialises admission with claims
    # (the busy check) and with other admissions of the same request id.
    conversation = (
        Conversation.objects.select_for_update(no_key=True)
        .filter(pk=conversation_id)
        .only("pk", "archived")
        .first()
    )
    if conversation is None:
        raise HostError("store", "not_found", MSG_CONVERSATION_NOT_FOUND)
    existing = (
        Submission.objects.select_related("entry")
        .filter(conversation_id=conversation_id, request_id=request_id)
        .first()
    )
    if existing is not None:
        if existing.fingerprint != fingerprint:
            raise HostError("contract", "conflict", MSG_REQUEST_ID_REUSED)
        return Admission(existing, False)
    if conversation.archived:
        raise HostError("contract", "closed", MSG_ARCHIVED)
    busy = Run.objects.filter(conversation_id=conversation_id, status=RunStatus.CLAIMED).exists()
    if busy and when_busy == "reject":
        raise ConversationBusy()
    if busy and when_busy == "steer":
        delivery = Delivery.STEER

    submission = Submission.objects.create(
        conversation_id=conversation_id,
        request_id=request_id,
        parts=parts,
        delivery=delivery,
        not_before=not_before,
        origin_kind=origin.kind,
        origin_user=origin.user if origin.kind == OriginKind.USER else None,
        origin_extension_id=origin.extension_id,
        correlation=origin.correlation,
        fingerprint=fingerprint,
    )
    role = Role.USER if origin.kind == OriginKind.USER else Role.EXTENSION
    entry = Entry.objects.create(
        conversation_id=conversation_id, role=role, content=parts, submission=submission
    )
    submission.entry = entry
    conversation_touch(conversation_id=conversation_id, changed="entries", stamp_activity=True)
    echo_wake()
    return Admission(submission, True)


def submission_submit(
    *,
    principal: Principal,
    conversation_id: str,
    parts: Any,
    request_id: str | None = None,
    delivery: str = Delivery.FOLLOW_UP,
    when_busy: str = "queue",
    not_before: dt.datetime | None = None,
) -> Admission:
    """API entry point: owner access, then admission in its own transaction."""
    conversation_get(principal=principal, conversation_id=conversation_id, write=True)
    with transaction.atomic(durable=True):
        return submission_admit(
            conversation_id=conversation_id,
            parts=parts,
            origin=Origin.of_user(principal.user),
            request_id=request_id,
            delivery=delivery,
            when_busy=when_busy,
            not_before=not_before,
        )


def submission_withdraw(
    *,
    principal: Principal,
    conversation_id: str,
    submission_id: int,
    after_access: Callable[[], object] | None = None,
) -> Submission:
    """Withdraw a queued submission; its transcript entry is marked withdrawn.

    Idempotent (withdrawing a withdrawn one returns it); a claimed or consumed one → 409.
    `after_access()` runs once the principal may write the conversation, before anything else
    (the API checks the request's body there: access, 404 then 403, decides before a 400).
    """
    conversation_get(principal=principal, conversation_id=conversation_id, write=True)
    if after_access is not None:
        after_access()
    if not 0 < submission_id <= BIGINT_MAX:  # not a row id: never a query (out of bigint range)
        raise HostError("store", "not_found", MSG_SUBMISSION_NOT_FOUND)
    with transaction.atomic(durable=True):
        conversation_lock(conversation_id=conversation_id)
        submission = (
            Submission.objects.select_related("entry")
            .filter(pk=submission_id, conversation_id=conversation_id)
            .first()
        )
        if submission is None:
            raise HostError("store", "not_found", MSG_SUBMISSION_NOT_FOUND)
        if submission.status == SubmissionStatus.WITHDRAWN:
            return submission
        if submission.status != SubmissionStatus.QUEUED:
            raise HostError("contract", "conflict", MSG_NOT_QUEUED)
        Submission.objects.filter(pk=submission.pk).update(
            status=SubmissionStatus.WITHDRAWN, updated_at=clock.now()
        )
        Entry.objects.filter(submission_id=submission.pk).update(withdrawn=True)
        conversation_touch(conversation_id=conversation_id, changed="entries")
    submission.refresh_from_db()
    return submission
