"""Interactions (spec 04): pending questions or approvals an extension puts to the user.

Host API (grant `attention`, declared `interaction_kinds`): seed (seeding a terminal record, or
over a terminal record, is a no-op), answer and settle (→ bool: only a pending record moves),
snapshot. Users answer through the API. A newly pending interaction records an
`interaction.pending` notification event in the same transaction.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from pydantic import ValidationError

from conversations.models import Conversation
from conversations.selectors import conversation_get
from core import clock
from core.auth import Principal
from core.errors import HostError
from extensions_host.runtime.current import Frame
from extensions_host.sdk import StateError
from extensions_host.surfaces.models import Interaction, InteractionStatus
from extensions_host.surfaces.services.common import (
    conversation_exists,
    conversation_id_valid,
    conversations_touch,
    json_size,
    text_storable,
)
from extensions_host.surfaces.types import TERMINAL_INTERACTION, InteractionRecord

MSG_RECORD_INVALID = "Interaction record is invalid"
MSG_KIND_UNDECLARED = "Interaction kind is not declared"
MSG_ANSWER_INVALID = "Interaction answer is invalid"
MSG_ANSWER_NOT_AN_OPTION = "Interaction answer must be one of its options"
MSG_STATUS_INVALID = "Interaction status must be skipped, expired or cancelled"
MSG_CONVERSATION_MISSING = "Interaction conversation does not exist"
MSG_OWNED_ELSEWHERE = "Interaction call id belongs to another extension"
MSG_NOT_FOUND = "Interaction not found"
ANSWER_MAX_BYTES = 16 * 1024
_call_id_max = Interaction._meta.get_field("call_id").max_length
assert _call_id_max is not None  # a CharField: Django requires its max_length
CALL_ID_MAX = _call_id_max
SETTLE_STATUSES = frozenset({"skipped", "expired", "cancelled"})


def interaction_wire(row: Interaction) -> dict[str, Any]:
    """The record as extensions and the API see it: the fields of the SDK's `InteractionRecord`
    (`created_at`/`settled_at`: epoch ms), which reads it back."""
    return {
        "call_id": row.call_id,
        "extension": row.extension_id,
        "kind": row.kind,
        "prompt": row.prompt,
        "options": row.options,
        "status": row.status,
        "answer": row.answer,
        "created_at": row.created_at_ms,
        "settled_at": row.settled_at_ms,
    }


def interaction_seed(
    *, frame: Frame, kinds: tuple[str, ...], conversation_id: str, record: Any
) -> bool:
    """Seed (or fully replace) one interaction record; True when something was written.

    No-ops: a terminal record (only pending records are seeded) and a stored record that is
    already terminal (an answer is never resurrected)."""
    spec = _record(record)
    if spec.kind not in kinds:
        raise StateError("bound", MSG_KIND_UNDECLARED)
    if not conversation_exists(conversation_id):
        raise StateError("bound", MSG_CONVERSATION_MISSING)
    if spec.status in TERMINAL_INTERACTION:
        return False
    stored = _locked(conversation_id, spec.call_id)
    if stored is not None and stored.extension_id != frame.extension_id:
        raise StateError("conflict", MSG_OWNED_ELSEWHERE)
    if stored is not None and stored.status in TERMINAL_INTERACTION:
        return False
    values = {
        "kind": spec.kind,
        "prompt": spec.prompt,
        "options": spec.options,
        "status": InteractionStatus.PENDING,
        "answer": None,
        "settled_at_ms": None,
    }
    if stored is None:
        Interaction.objects.create(
            conversation_id=conversation_id,
            call_id=spec.call_id,
            extension_id=frame.extension_id,
            created_at_ms=clock.now_ms(),
            **values,
        )
        _notify_pending(conversation_id=conversation_id, extension_id=frame.extension_id, spec=spec)
    else:
        Interaction.objects.filter(pk=stored.pk).update(**values)
    frame.observed.add(conversation_id)
    return True


def interaction_answer(*, frame: Frame, conversation_id: str, call_id: Any, answer: Any) -> bool:
    """The extension answers its own pending interaction (the tool path)."""
    _answer_check(answer)
    stored = _own(frame, conversation_id, call_id)
    if stored is None or stored.status != InteractionStatus.PENDING:
        return False
    if not _answer_offered(stored, answer):
        raise StateError("bound", MSG_ANSWER_NOT_AN_OPTION)
    _settle(stored, status=InteractionStatus.ANSWERED, answer=answer, user=None)
    frame.observed.add(conversation_id)
    return True


def interaction_settle(*, frame: Frame, conversation_id: str, call_id: Any, status: Any) -> bool:
    """Mark the extension's pending interaction skipped, expired or cancelled."""
    if status not in SETTLE_STATUSES:
        raise StateError("bound", MSG_STATUS_INVALID)
    stored = _own(frame, conversation_id, call_id)
    if stored is None or stored.status != InteractionStatus.PENDING:
        return False
    _settle(stored, status=status, answer=None, user=None)
    frame.observed.add(conversation_id)
    return True


def interaction_snapshot(
    *, extension_id: str, conversation_id: str, call_id: Any
) -> dict[str, Any] | None:
    """The extension's record (`interaction_wire`), or None."""
    if not (_call_id_usable(call_id) and conversation_id_valid(conversation_id)):
        return None
    row = Interaction.objects.filter(
        conversation_id=conversation_id, call_id=call_id, extension_id=extension_id
    ).first()
    return interaction_wire(row) if row is not None else None


def interaction_answer_by_user(
    *, principal: Principal, conversation_id: str, call_id: str, answer: Any
) -> tuple[bool, Interaction]:
    """A user answers (owner access). Returns (answered now, the record): answering a record
    that is no longer pending changes nothing and returns False."""
    conversation_get(principal=principal, conversation_id=conversation_id, write=True)
    try:
        _answer_check(answer)
    except StateError as exc:
        raise HostError(
            "contract", "invalid", MSG_ANSWER_INVALID, details={"answer": [exc.message]}
        ) from exc
    with transaction.atomic(durable=True):
        # an id no record can have (NUL, too long) is simply not found, without a query
        stored = _locked(conversation_id, call_id) if _call_id_usable(call_id) else None
        if stored is None:
            raise HostError("store", "not_found", MSG_NOT_FOUND)
        if stored.status != InteractionStatus.PENDING:
            return False, stored
        if not _answer_offered(stored, answer):
            raise HostError(
                "contract",
                "invalid",
                MSG_ANSWER_NOT_AN_OPTION,
                details={"answer": [f"Expected one of {stored.options}"]},
            )
        _settle(stored, status=InteractionStatus.ANSWERED, answer=answer, user=principal.user)
        conversations_touch(conversation_ids=[conversation_id])
    stored.refresh_from_db()
    return True, stored


def _settle(row: Interaction, *, status: str, answer: Any, user: Any) -> None:
    now = clock.now_ms()
    # compare-and-set on `pending`: a concurrent answer that committed first wins
    Interaction.objects.filter(pk=row.pk, status=InteractionStatus.PENDING).update(
        status=status, answer=answer, answered_by=user, settled_at_ms=now
    )


def _locked(conversation_id: str, call_id: str) -> Interaction | None:
    return (
        Interaction.objects.select_for_update()
        .filter(conversation_id=conversation_id, call_id=call_id)
        .first()
    )


def _call_id_usable(call_id: Any) -> bool:
    """Whether a record could have this call id (1..128 storable characters): any other names
    nothing, and must not reach a query (a NUL is a driver error on PostgreSQL)."""
    return isinstance(call_id, str) and 1 <= len(call_id) <= CALL_ID_MAX and text_storable(call_id)


def _own(frame: Frame, conversation_id: str, call_id: Any) -> Interaction | None:
    if not _call_id_usable(call_id):
        raise StateError("bound", MSG_RECORD_INVALID)
    if not conversation_id_valid(conversation_id):
        return None
    stored = _locked(conversation_id, call_id)
    if stored is not None and stored.extension_id != frame.extension_id:
        return None
    return stored


def _record(record: Any) -> InteractionRecord:
    try:
        spec = (
            record
            if isinstance(record, InteractionRecord)
            else InteractionRecord.model_validate(record)
        )
    except (ValidationError, TypeError, ValueError) as exc:
        raise StateError("bound", MSG_RECORD_INVALID) from exc
    texts = [spec.call_id, spec.kind, spec.prompt, *(spec.options or [])]
    if not all(text_storable(text) for text in texts):
        raise StateError("bound", MSG_RECORD_INVALID)
    return spec


def _answer_check(answer: Any) -> None:
    size = json_size(answer)
    if size is None or size > ANSWER_MAX_BYTES:
        raise StateError("bound", MSG_ANSWER_INVALID)


def _answer_offered(row: Interaction, answer: Any) -> bool:
    """An interaction with `options` is answered with one of them, exactly (the extension
    compares the answer to its options: "Approve" for ["approve", "reject"] would read as a
    rejection); one without options takes any bounded JSON answer."""
    return not row.options or (isinstance(answer, str) and answer in row.options)


def _notify_pending(*, conversation_id: str, extension_id: str, spec: InteractionRecord) -> None:
    """`interaction.pending` for the conversation's owner, in this frame's transaction."""
    from extensions_host.contributions.services.notify import notification_emit

    owner = Conversation.objects.select_related("owner").get(pk=conversation_id).owner
    notification_emit(
        type="interaction.pending",
        user=owner,
        title=f"{extension_id}: {spec.kind}",
        body=spec.prompt,
        conversation_id=conversation_id,
    )
