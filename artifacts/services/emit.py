"""The two artifact tool calls: `emit` and `clear` (spec 06).

Their answer is the tool result the model sees, so what the model got wrong is not an error
but a rejection: `{ok: false, markdown: "# Runtime artifact rejected\\n\\n<why>"}`, and nothing
is written. Both are idempotent on the tool-call id: the same call again answers as before;
the same id with other arguments is rejected.

An emit holds its world's lock from its first statement to its commit, and every other emit of
the world waits for it, so whatever can be done before the lock is (checks, fingerprints, the
record's draft) and what is left costs two round trips before the commit on PostgreSQL: lock
the world and read the operation with everything the decision needs (a record or clear with
this tool-call id, the attempt's running totals, the world's highest sequence:
`sql.lock_and_read_for_call`); then insert the record with its events and the conversation's
version bump (`sql.rows_write`). SQLite runs the same as five statements, in-process.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from artifacts.ephemeral import ephemeral_put
from artifacts.fingerprints import (
    blank,
    clear_call_fingerprint,
    emit_call_fingerprint,
    payload_fingerprint,
    payload_text,
    record_fingerprint,
    record_id_for,
)
from artifacts.models import (
    ID_MAX,
    ContentType,
    EventKind,
    Operation,
    OperationStatus,
    Record,
    Save,
)
from artifacts.selectors import record_superseded
from artifacts.services.operations import missing_or_mismatch, same_context
from artifacts.services.sql import CallRead, lock_and_read_for_call
from artifacts.services.world import WorldMutation, invariant
from artifacts.types import (
    MSG_ARGUMENT_INVALID,
    ClearResult,
    Declaration,
    EmitResult,
    RequestContext,
    contract_violation,
    invalid,
    is_json_value,
)

MAX_PAYLOAD_BYTES = 4 * 1024 * 1024

MSG_EMIT_MISSING = "Artifact emit is missing an operation checkpoint"
MSG_EMIT_MISMATCH = "Artifact emit does not match the frozen operation"
MSG_EMIT_UNREGISTERED = "Artifact emit request attempt is not registered"
MSG_CLEAR_MISSING = "Artifact clear is missing an operation checkpoint"
MSG_CLEAR_MISMATCH = "Artifact clear does not match the frozen operation"
MSG_CLEAR_UNREGISTERED = "Artifact clear request attempt is not registered"

# Rejection reasons (the model reads these).
REJECT_EMPTY_TOOL_CALL = "Tool-call ID cannot be empty"
REJECT_DIFFERENT_ARGUMENTS = "The same artifact tool-call ID is bound to different arguments"
REJECT_DIFFERENT_CALL = "The same artifact tool-call ID is bound to a different tool call"
REJECT_NOT_JSON = "JSON artifact payload must be a valid JSON value"
REJECT_TOO_LARGE = "Artifact exceeds the 4 MiB limit"
CONTRACT_MESSAGE_MAX = 1000


def reject_budget(limit: int) -> str:
    """The request context's `max_artifact_bytes` (spec 06), for core and follow-up requests."""
    return f"This request attempt's artifacts would exceed its max_artifact_bytes ({limit} bytes)"


def reject_undeclared(output: str) -> str:
    return f"Undeclared artifact output: {output}"


def reject_not_string(declaration: Declaration) -> str:
    return f"{declaration.name} {declaration.content_type} payload must be a string"


def reject_nul(declaration: Declaration) -> str:
    return f"{declaration.name} {declaration.content_type} payload must not contain NUL characters"


def reject_not_unicode(declaration: Declaration) -> str:
    return (
        f"{declaration.name} {declaration.content_type} payload must be valid Unicode"
        " (no lone surrogates)"
    )


def reject_contract(declaration: Declaration, violation: str) -> str:
    text = f"{declaration.name} payload does not satisfy its payload contract: {violation}"
    return text if len(text) <= CONTRACT_MESSAGE_MAX else text[: CONTRACT_MESSAGE_MAX - 1] + "…"


def reject_max_emits(output: str) -> str:
    return f"Artifact {output} has reached maxEmits"


def rejected(reason: str) -> str:
    return f"# Runtime artifact rejected\n\n{reason}"


def accepted(output: str) -> str:
    return f"# Runtime artifact accepted\n\noutput={output}"


def already_exists(output: str) -> str:
    return f"# Runtime artifact already exists\n\noutput={output}"


def clear_confirmed(output: str) -> str:
    return f"# Runtime artifact clear confirmed\n\noutput={output}"


def clear_ignored(output: str) -> str:
    return f"# Runtime artifact clear ignored\n\noutput={output}"


def _check_call(output: Any, tool_call_id: Any) -> None:
    """Shape only: a non-string argument, a NUL or an over-long tool-call id is the runtime's
    error (400); an undeclared output (of any length: the output name is the model's argument,
    bounded only by the request body) or an empty tool-call id is the model's (a rejection)."""
    if not isinstance(output, str) or "\x00" in output:
        raise invalid(MSG_ARGUMENT_INVALID, "output", "Must be a string, without NUL.")
    if not isinstance(tool_call_id, str) or len(tool_call_id) > ID_MAX or "\x00" in tool_call_id:
        raise invalid(
            MSG_ARGUMENT_INVALID,
            "tool_call_id",
            f"Must be a string of at most {ID_MAX}, without NUL.",
        )


def _payload_problem(declaration: Declaration, payload: Any) -> str | None:
    """Why the payload does not fit its declaration (a rejection reason), or None."""
    if declaration.content_type != ContentType.APPLICATION_JSON:
        if not isinstance(payload, str):
            return reject_not_string(declaration)
        # stored as text, which PostgreSQL cannot hold NUL in (JSON text escapes it: \u0000)
        return reject_nul(declaration) if "\x00" in payload else None
    if not is_json_value(payload):
        return REJECT_NOT_JSON
    if declaration.payload_contract is not None:
        violation = contract_violation(declaration.payload_contract, payload)
        if violation is not None:
            return reject_contract(declaration, violation)
    return None


def _checked(
    operation: Operation | None,
    context: RequestContext,
    messages: tuple[str, str, str],
) -> int:
    """The invariants every tool call checks under the lock; the current attempt number."""
    missing, mismatch, unregistered = messages
    if operation is None:
        raise invariant(missing, operation_id=context.operation_id)
    if not same_context(operation, context.operation):
        raise invariant(mismatch, operation_id=context.operation_id)
    current = operation.request_attempts.get(context.request_id)
    if current is None:
        raise invariant(unregistered, request_id=context.request_id)
    return current


def _locked_read(
    context: RequestContext, tool_call_id: str, output: str, messages: tuple[str, str, str]
) -> tuple[WorldMutation, CallRead, int]:
    """Lock the world and read the operation with everything the call decides on
    (`sql.lock_and_read_for_call`); raise the invariant errors."""
    locked, found = lock_and_read_for_call(
        world_id=context.world_id,
        operation_id=context.operation_id,
        tool_call_id=tool_call_id,
        request_id=context.request_id,
        request_attempt=context.request_attempt,
        output=output,
    )
    if not locked:
        # (the read is by id alone: with a row, another world's operation is caught below)
        raise missing_or_mismatch(context.operation_id, missing=messages[0], mismatch=messages[1])
    current = _checked(None if found is None else found.operation, context, messages)
    assert found is not None  # _checked raised otherwise
    return WorldMutation.locked(context.world_id, last_sequence=found.last_sequence), found, current


def _request(context: RequestContext) -> dict[str, Any]:
    return {"request_id": context.request_id, "request_attempt": context.request_attempt}


def _publish(mutation: WorldMutation, record: Record, operation: Operation) -> None:
    """The events that publish a new (or repaired) record, per the operation's state. A result
    of a stale operation, or of a superseded attempt (`record_superseded`), is recorded but
    superseded at once."""
    committed = operation.status == OperationStatus.CORE_COMMITTED and operation.head != ""
    if operation.is_stale or record_superseded(record, operation):
        mutation.supersede(record, "late_superseded_operation_result", with_request=True)
    elif record.save_mode == Save.NONE:
        # Ephemeral panels show while the operation runs, not only after its commit.
        mutation.activate(record)
        if committed:
            mutation.bind_head(record, operation.head)
    elif committed:
        mutation.bind_head(record, operation.head)
        mutation.activate(record)
    elif record.save_mode == Save.OPERATION:
        mutation.activate(record)
    # save=commit before the core commits: pending until mark_core_committed binds it


def _repair(mutation: WorldMutation, record: Record, operation: Operation) -> None:
    """What the identical emit again still owes its record: the publication events it lacks.

    The seed's `#repairRecordPublication` appends, per the operation's state *now*, whichever
    of supersede / bind_head / activate the record has no event for. There it finishes an emit
    that crashed between writing the raw record and its events. Here the record and its
    publication events are one transaction, and later changes (commit, follow-up end, clears,
    reconciles) write their own events, so a record with any publication event was published,
    and judging it again by the operation's later state would change what it shows: after
    `complete_followup` the operation is stale, and the seed's rule would supersede a
    `save=commit` panel that is meant to stay. So a published record is left as it is.

    A record without any publication event gets what the seed's rule gives it, but for a
    `save=commit` record still awaiting its core commit (every one emitted before the commit,
    until `mark_core_committed` publishes it). That one is owed only the supersede
    (`late_superseded_operation_result`) that the projection already reads it as, its
    operation's projection or its attempt being superseded. An operation awaiting
    materialization is stale to the seed too, whose repeat would supersede the record, but
    its commit still recovers the follow-up and publishes it: a repeat must not change that.
    """
    if record.activated or record.superseded or record.bound_head:
        return
    committed = operation.status == OperationStatus.CORE_COMMITTED and operation.head != ""
    if record.save_mode == Save.COMMIT and not committed:
        if record_superseded(record, operation):
            mutation.supersede(record, "late_superseded_operation_result", with_request=True)
        return
    _publish(mutation, record, operation)


def artifact_emit(
    *, context: RequestContext, output: str, payload: Any, tool_call_id: str
) -> EmitResult:
    """`emit`: record an artifact for a declared output of the current request attempt."""
    context.check()
    _check_call(output, tool_call_id)
    declaration = context.declaration(output)
    if declaration is None:
        return EmitResult(False, rejected(reject_undeclared(output)))
    problem = _payload_problem(declaration, payload)
    if problem is not None:
        return EmitResult(False, rejected(problem))
    text = payload_text(payload, declaration.content_type)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        # A lone surrogate (JSON's "\ud800", in a string or a key) can be neither hashed nor
        # stored. It sits in the payload, the model's content, so like a NUL in a text
        # payload it is a rejection (`_payload_problem`); a surrogate in the call's own
        # arguments (ids, output) is the runtime's shape error, a 400 (`_check_call`, DRF).
        # Caught at the encoding emit does anyway: the check costs the normal path nothing.
        return EmitResult(False, rejected(reject_not_unicode(declaration)))
    if blank(tool_call_id):
        return EmitResult(False, rejected(REJECT_EMPTY_TOOL_CALL))
    fingerprint = payload_fingerprint(declaration.name, declaration.content_type, text)
    call = emit_call_fingerprint(
        context.operation.as_dict(),
        _request(context),
        output=declaration.name,
        payload_fingerprint=fingerprint,
    )
    # Built before the lock; numbered under it, if the call turns out to make a record.
    record = _draft_record(
        context, declaration, tool_call_id=tool_call_id, text=text, size=size,
        fingerprints=(fingerprint, call),
    )  # fmt: skip
    with transaction.atomic(durable=True):
        mutation, found, _ = _locked_read(
            context,
            tool_call_id,
            declaration.name,
            (MSG_EMIT_MISSING, MSG_EMIT_MISMATCH, MSG_EMIT_UNREGISTERED),
        )
        operation = found.operation
        if found.previous_record is not None:
            previous = Record.objects.defer("payload").get(pk=found.previous_record)
            if previous.call_fingerprint != call:
                return EmitResult(False, rejected(REJECT_DIFFERENT_ARGUMENTS))
            _repair(mutation, previous, operation)
            if previous.save_mode == Save.NONE and not previous.superseded:
                # The identical call again: its payload may be put back if a restart lost it.
                ephemeral_put(record_pk=previous.pk, text=text)
            mutation.flush()
            return EmitResult(True, already_exists(output), previous.record_id, idempotent=True)
        if found.previous_call is not None:
            return EmitResult(False, rejected(REJECT_DIFFERENT_CALL))
        if found.output_emits >= declaration.max_emits:
            return EmitResult(False, rejected(reject_max_emits(output)))
        if size > MAX_PAYLOAD_BYTES:
            return EmitResult(False, rejected(REJECT_TOO_LARGE))
        if found.attempt_bytes + size > context.max_artifact_bytes:
            return EmitResult(False, rejected(reject_budget(context.max_artifact_bytes)))
        _number_record(
            record,
            sequence=mutation.next_sequence(),
            usage=(found.attempt_bytes + size, found.output_emits + 1),
        )
        _publish(mutation, record, operation)
        mutation.flush(insert=record)
        if record.save_mode == Save.NONE and not record.superseded:
            ephemeral_put(record_pk=record.pk, text=text)
    return EmitResult(True, accepted(output), record.record_id)


def _draft_record(
    context: RequestContext,
    declaration: Declaration,
    *,
    tool_call_id: str,
    text: str,
    size: int,
    fingerprints: tuple[str, str],
) -> Record:
    """A new record without what only the locked world knows (`_number_record`).
    `fingerprints` is (payload, call)."""
    fingerprint, call = fingerprints
    return Record(
        world_id=context.world_id,
        operation_id=context.operation_id,
        parent_head=context.operation.parent_head,
        preset_id=context.operation.preset_id,
        preset_revision=context.operation.preset_revision,
        preset_scripts_enabled=context.operation.preset_scripts_enabled,
        request_id=context.request_id,
        request_attempt=context.request_attempt,
        output=declaration.name,
        channel=declaration.channel,
        key=declaration.key,
        content_type=declaration.content_type,
        renderer=declaration.renderer,
        renderer_revision=declaration.renderer_revision,
        save_mode=declaration.save,
        strategy=declaration.strategy,
        invalidation=declaration.invalidation,
        tool_call_id=tool_call_id,
        call_fingerprint=call,
        payload_fingerprint=fingerprint,
        # never in the database for save=none (a check constraint holds this too)
        payload=None if declaration.save == Save.NONE else text,
        payload_bytes=size,
    )


def _number_record(record: Record, *, sequence: int, usage: tuple[int, int]) -> None:
    """Give a draft its sequence, public id, the attempt's running (bytes, emits of this
    output) including it, and the fingerprint over all of them."""
    record.sequence = sequence
    record.record_id = record_id_for(sequence, record.payload_fingerprint)
    record.attempt_bytes, record.output_emits = usage
    record.record_fingerprint = record_fingerprint(record.fingerprint_fields)


def artifact_clear(*, context: RequestContext, output: str, tool_call_id: str) -> ClearResult:
    """`clear`: hide earlier records of a declared output (durable even for `save=none`, so a
    cold restart never resurrects a cleared panel). A stale attempt's clear is recorded as an
    `ignored_call` instead."""
    context.check()
    _check_call(output, tool_call_id)
    declaration = context.declaration(output)
    if declaration is None:
        return ClearResult(False, rejected(reject_undeclared(output)))
    if blank(tool_call_id):
        return ClearResult(False, rejected(REJECT_EMPTY_TOOL_CALL))
    call = clear_call_fingerprint(
        context.operation.as_dict(), _request(context), output=declaration.name
    )
    with transaction.atomic(durable=True):
        mutation, found, current = _locked_read(
            context,
            tool_call_id,
            declaration.name,
            (MSG_CLEAR_MISSING, MSG_CLEAR_MISMATCH, MSG_CLEAR_UNREGISTERED),
        )
        operation = found.operation
        if found.previous_record is not None:
            return ClearResult(False, rejected(REJECT_DIFFERENT_CALL))
        if found.previous_call is not None:
            if found.previous_call != call:
                return ClearResult(False, rejected(REJECT_DIFFERENT_ARGUMENTS))
            return ClearResult(True, clear_confirmed(output), idempotent=True)
        stale = operation.is_stale or current != context.request_attempt
        mutation.event(
            EventKind.IGNORED_CALL if stale else EventKind.CLEAR,
            operation.pk,
            output=declaration.name,
            channel=declaration.channel,
            key=declaration.key,
            reason="stale_clear_ignored" if stale else "explicit_clear",
            tool_call_id=tool_call_id,
            call_fingerprint=call,
            request_id=context.request_id,
            request_attempt=context.request_attempt,
        )
        mutation.flush()
    return ClearResult(True, clear_ignored(output) if stale else clear_confirmed(output))
