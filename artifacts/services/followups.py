"""The follow-up phase of an operation (the seed's "extension" phase): begin, complete, fail,
resume. Each call locks the operation's world and is safe to retry."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction
from django.db.models import Q

from artifacts.models import (
    TERMINAL_FOLLOWUP,
    FollowupStatus,
    Invalidation,
    Operation,
    OperationStatus,
    ProjectionStatus,
    Record,
    Save,
)
from artifacts.selectors import followup_summary
from artifacts.services.operations import (
    check_message,
    lock_checked_operation,
    lock_operation,
)
from artifacts.services.world import WorldMutation, invariant
from artifacts.types import (
    MSG_ARGUMENT_INVALID,
    FollowupSummary,
    OperationContext,
    check_id,
    invalid,
)

MSG_FOLLOWUP_MISSING = "Artifact follow-up is missing an operation checkpoint"
MSG_FOLLOWUP_MISMATCH = "Artifact follow-up does not match the frozen operation"
MSG_COMPLETE_UNCOMMITTED = "Artifact follow-up cannot complete before the core is committed"
MSG_FAIL_UNCOMMITTED = "Artifact follow-up cannot fail before the core is committed"

MSG_NO_CHECKPOINT = "No recoverable follow-up checkpoint was found"
MSG_CANNOT_REPLAY = (
    "Follow-up dispatch state cannot be replayed safely; the original request attempt "
    "requires explicit manual recovery"
)

# What a runtime may report a follow-up ended as (`superseded` is the host's to assign).
FAIL_STATUSES = (
    FollowupStatus.FAILED,
    FollowupStatus.CANCELLED,
    FollowupStatus.BUDGET_EXCEEDED,
    FollowupStatus.UNKNOWN,
    FollowupStatus.RECOVERY_REQUIRED,
)
MAX_COMPLETED_REQUESTS = 1000


def _check_requests(requests: Sequence[str]) -> list[str]:
    if isinstance(requests, str) or len(requests) > MAX_COMPLETED_REQUESTS:
        raise invalid(
            MSG_ARGUMENT_INVALID, "requests", f"At most {MAX_COMPLETED_REQUESTS} request ids."
        )
    return [check_id(r, "requests", MSG_ARGUMENT_INVALID) for r in requests]


def followup_begin(*, context: OperationContext) -> FollowupSummary:
    """`begin_followup`: a committed, unsuperseded operation starts its follow-up requests."""
    context.check()
    with transaction.atomic(durable=True):
        mutation, operation = lock_checked_operation(
            context, missing=MSG_FOLLOWUP_MISSING, mismatch=MSG_FOLLOWUP_MISMATCH
        )
        if (
            operation.status == OperationStatus.CORE_COMMITTED
            and operation.projection_status == ProjectionStatus.ACTIVE
            and operation.followup_status == FollowupStatus.NOT_STARTED
        ):
            operation.followup_status = FollowupStatus.RUNNING
            mutation.save_operation(operation)
            mutation.flush()  # transient records show again: live views must see it
    return followup_summary(operation)


def _missing_summary(
    operation_id: str, *, requests: list[str], message: str | None = None
) -> FollowupSummary:
    return FollowupSummary(
        operation_id=operation_id,
        status=FollowupStatus.RECOVERY_REQUIRED,
        completed_requests=requests,
        core_committed=False,
        message=message,
    )


def _settled(operation: Operation) -> bool:
    return operation.followup_status in TERMINAL_FOLLOWUP or operation.followup_status in (
        FollowupStatus.UNKNOWN,
        FollowupStatus.RECOVERY_REQUIRED,
    )


def _supersede_operation_end(mutation: WorldMutation, operation_id: str, reason: str) -> None:
    """Supersede the operation's `save=none` and `operation_end` records."""
    records = Record.objects.filter(operation_id=operation_id, superseded=False).filter(
        Q(save_mode=Save.NONE) | Q(invalidation=Invalidation.OPERATION_END)
    )
    for record in records.defer("payload").order_by("sequence"):
        mutation.supersede(record, reason)


def followup_complete(*, operation_id: str, requests: Sequence[str]) -> FollowupSummary:
    """`complete_followup`: the follow-up finished; the operation completes. Its `save=none`
    and `operation_end` records are superseded."""
    check_id(operation_id, "operation_id", MSG_ARGUMENT_INVALID)
    completed = _check_requests(requests)
    with transaction.atomic(durable=True):
        locked = lock_operation(operation_id)
        if locked is None:
            return _missing_summary(operation_id, requests=[])
        mutation, operation = locked
        if operation.status == OperationStatus.RUNNING or _settled(operation):
            return followup_summary(operation)
        if operation.status != OperationStatus.CORE_COMMITTED:
            raise invariant(MSG_COMPLETE_UNCOMMITTED, operation_id=operation_id)
        _supersede_operation_end(mutation, operation_id, "operation_end")
        operation.status = OperationStatus.COMPLETED
        operation.followup_status = FollowupStatus.COMPLETED
        operation.completed_requests = completed
        operation.message = ""
        mutation.save_operation(operation)
        mutation.flush()
    return followup_summary(operation)


def followup_fail(
    *, operation_id: str, status: str, message: str, requests: Sequence[str] = ()
) -> FollowupSummary:
    """`fail_followup`: the follow-up ended without completing (failed, cancelled, over
    budget, unknown, needing recovery). Its `save=none`/`operation_end` records go."""
    check_id(operation_id, "operation_id", MSG_ARGUMENT_INVALID)
    if status not in FAIL_STATUSES:
        raise invalid(MSG_ARGUMENT_INVALID, "status", f"Must be one of {list(FAIL_STATUSES)}.")
    check_message(message)
    completed = _check_requests(requests)
    with transaction.atomic(durable=True):
        locked = lock_operation(operation_id)
        if locked is None:
            return _missing_summary(operation_id, requests=completed, message=message)
        mutation, operation = locked
        if _settled(operation):
            return followup_summary(operation)
        if operation.status != OperationStatus.CORE_COMMITTED:
            raise invariant(MSG_FAIL_UNCOMMITTED, operation_id=operation_id)
        _supersede_operation_end(mutation, operation_id, "followup_failed")
        operation.followup_status = status
        operation.message = message
        operation.completed_requests = completed
        mutation.save_operation(operation)
        mutation.flush()
    return followup_summary(operation)


def followup_resume(*, operation_id: str) -> FollowupSummary:
    """`resume_followup`: an open follow-up cannot be replayed safely after a restart, so it
    becomes `recovery_required` with a message for manual recovery."""
    check_id(operation_id, "operation_id", MSG_ARGUMENT_INVALID)
    with transaction.atomic(durable=True):
        locked = lock_operation(operation_id)
        if locked is None:
            return _missing_summary(operation_id, requests=[], message=MSG_NO_CHECKPOINT)
        mutation, operation = locked
        if operation.status == OperationStatus.RUNNING:
            return followup_summary(operation)
        if operation.followup_status in TERMINAL_FOLLOWUP or (
            operation.followup_status == FollowupStatus.RECOVERY_REQUIRED
        ):
            return followup_summary(operation)
        operation.followup_status = FollowupStatus.RECOVERY_REQUIRED
        operation.message = MSG_CANNOT_REPLAY
        mutation.save_operation(operation)
        mutation.flush()
    return followup_summary(operation)
