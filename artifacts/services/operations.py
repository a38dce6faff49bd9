"""Operation lifecycle: begin, request attempts, head reconciliation and the core result
(committed, awaiting materialization, failed). The follow-up phase is in `followups.py`.

Each call locks its world, so calls on one world are serialised, and each is safe to retry:
repeating a call that already took effect changes nothing (events are appended only for
records whose mirrored state still lacks them).
"""

from __future__ import annotations

from collections import defaultdict

from django.db import IntegrityError, transaction

from artifacts.models import (
    MESSAGE_MAX,
    FollowupStatus,
    Invalidation,
    Operation,
    OperationStatus,
    ProjectionStatus,
    Record,
)
from artifacts.selectors import ACTIVE, CLEARED, SUPERSEDED, followup_summary
from artifacts.services.world import MSG_WORLD_NOT_FOUND, WorldMutation, head_check, invariant
from artifacts.types import (
    MSG_ARGUMENT_INVALID,
    AttemptResult,
    FollowupSummary,
    OperationContext,
    ReconcileResult,
    RequestContext,
    check_id,
)
from conversations.models import Conversation
from core.errors import HostError

# Invariant messages (409). The seed's wording, its "extension" phase named follow-up here.
MSG_BEGIN_MISMATCH = "Artifact operation is bound to a different frozen payload"
MSG_ATTEMPT_MISSING = "Artifact request attempt is missing an operation checkpoint"
MSG_ATTEMPT_MISMATCH = "Artifact request attempt does not match the frozen operation"
MSG_COMMIT_MISSING = "Core commit is missing an artifact-operation checkpoint"
MSG_COMMIT_COMPLETED_HEAD = "Completed artifact operation has a conflicting core head"
MSG_COMMIT_FAILED = "An artifact operation whose core failed cannot be committed again"
MSG_COMMIT_COMMITTED_HEAD = "Committed artifact operation has a conflicting core head"
MSG_PENDING_HEAD = "Artifact operation awaiting materialization has a conflicting core head"
MSG_RECORD_HEAD = "Artifact record is bound to a different core head"
MSG_PENDING_MISSING = "Artifact operation awaiting materialization does not exist"
MSG_PENDING_MISMATCH = (
    "Artifact operation awaiting materialization does not match the frozen operation"
)
MSG_PENDING_FAILED = "An artifact operation whose core failed cannot await materialization"
MSG_FAILED_MISSING = "Core failure is missing an artifact-operation checkpoint"

# Operation messages written by the host.
MSG_SUPERSEDED_BY_OPERATION = "This follow-up was superseded by a newer operation"
MSG_SUPERSEDED_BY_HEAD = "This follow-up was superseded by a newer head"


def same_context(operation: Operation, context: OperationContext) -> bool:
    return (
        operation.world_id,
        operation.parent_head,
        operation.pk,
        operation.preset_id,
        operation.preset_revision,
        operation.preset_scripts_enabled,
    ) == context.identity()


def check_message(message: str, field_name: str = "message") -> str:
    return check_id(message, field_name, MSG_ARGUMENT_INVALID, limit=MESSAGE_MAX)


def _world_of(operation_id: str) -> str | None:
    return Operation.objects.filter(pk=operation_id).values_list("world_id", flat=True).first()


def missing_or_mismatch(operation_id: str, *, missing: str, mismatch: str) -> HostError:
    """The invariant error of a call whose context names a world without a row: such a world
    has no operations, so an operation under this id is another world's (`mismatch`), and
    none at all is `missing`."""
    exists = Operation.objects.filter(pk=operation_id).exists()
    return invariant(mismatch if exists else missing, operation_id=operation_id)


def lock_checked_operation(
    context: OperationContext, *, missing: str, mismatch: str
) -> tuple[WorldMutation, Operation]:
    """Lock the world of the caller's operation, then read the operation under that lock: the
    invariant error `missing` when there is no operation under that id, `mismatch` when it is
    not the caller's (the checks every call naming its operation starts with)."""
    mutation = WorldMutation.lock(context.world_id)
    if mutation is None:
        raise missing_or_mismatch(context.operation_id, missing=missing, mismatch=mismatch)
    operation = Operation.objects.filter(pk=context.operation_id).first()
    if operation is None:
        raise invariant(missing, operation_id=context.operation_id)
    if not same_context(operation, context):
        raise invariant(mismatch, operation_id=context.operation_id)
    return mutation, operation


def lock_operation(operation_id: str) -> tuple[WorldMutation, Operation] | None:
    """Lock the world of an operation named only by id, then read it under that lock.
    None when there is no such operation (its world can only go with it)."""
    world_id = _world_of(operation_id)
    if world_id is None:
        return None
    mutation = WorldMutation.lock(world_id)
    operation = Operation.objects.filter(pk=operation_id).first()
    if mutation is None or operation is None:
        return None
    return mutation, operation


# --- head reconciliation -----------------------------------------------------------------------


def _reconcile(
    mutation: WorldMutation, head: str, except_operation_id: str | None
) -> ReconcileResult:
    """Supersede active `head_change` records bound to another head, and mark open operations
    bound to another head superseded (the seed's `reconcileHead`, under the caller's lock)."""
    view = mutation.view()
    affected: set[str] = set()
    superseded_records: list[str] = []
    for record in view.records:
        if record.operation_id == except_operation_id or view.status(record) != ACTIVE:
            continue
        if record.invalidation != Invalidation.HEAD_CHANGE:
            continue
        if (record.bound_head or record.parent_head) == head:
            continue
        mutation.supersede(record, "head_change")
        superseded_records.append(record.record_id)
        affected.add(record.operation_id)
    for operation in view.operations.values():
        if operation.pk == except_operation_id or operation.world_id != mutation.world_id:
            continue
        if (operation.head or operation.parent_head) != head and operation.is_open:
            affected.add(operation.pk)
    superseded_operations: list[str] = []
    for operation_id in sorted(affected):
        operation = view.operations[operation_id]
        if not operation.is_open:
            continue
        before = (operation.followup_status, operation.message, operation.projection_status)
        if operation.is_open_followup:
            operation.followup_status = FollowupStatus.SUPERSEDED
            operation.message = MSG_SUPERSEDED_BY_HEAD
        operation.projection_status = ProjectionStatus.SUPERSEDED
        if (operation.followup_status, operation.message, operation.projection_status) != before:
            mutation.save_operation(operation)
            superseded_operations.append(operation_id)
    return ReconcileResult(
        world_id=mutation.world_id,
        head=head,
        superseded_records=superseded_records,
        superseded_operations=superseded_operations,
    )


def head_reconcile(
    *, world_id: str, head: str, except_operation_id: str | None = None
) -> ReconcileResult:
    """`reconcile_head`: bring a world's projection in line with its current head."""
    check_id(world_id, "world_id", MSG_ARGUMENT_INVALID, limit=64)
    check_id(head, "head", MSG_ARGUMENT_INVALID)
    if except_operation_id is not None:
        check_id(except_operation_id, "except_operation_id", MSG_ARGUMENT_INVALID)
    with transaction.atomic(durable=True):
        mutation = WorldMutation.lock(world_id)
        if mutation is None and not Conversation.objects.filter(pk=world_id).exists():
            raise HostError("store", "not_found", MSG_WORLD_NOT_FOUND)
        head_check(world_id, head, field_name="head")
        if mutation is None:
            return ReconcileResult(world_id, head, [], [])  # no operations: nothing to do
        result = _reconcile(mutation, head, except_operation_id)
        mutation.flush()
    return result


# --- operations and request attempts -----------------------------------------------------------


def operation_begin(*, context: OperationContext) -> Operation:
    """`begin_operation`: reconcile the world to the parent head, create the operation if new,
    and supersede what a new operation invalidates: earlier `new_operation` records, and every
    record of an earlier operation whose follow-up is still open (that operation becomes
    superseded). Beginning an existing operation again (same context) changes nothing."""
    context.check()
    with transaction.atomic(durable=True):
        mutation = WorldMutation.lock_or_create(context.world_id)
        existing = Operation.objects.filter(pk=context.operation_id).first()
        if existing is not None:
            if not same_context(existing, context):
                raise invariant(MSG_BEGIN_MISMATCH, operation_id=context.operation_id)
            # A retry. The first call reconciled and superseded in the same transaction that
            # created the operation, so nothing of it is missing; whatever changed since was
            # done by later calls, which a retry must not undo: reconciling the world back to
            # this operation's parent head, or treating the operations begun after it as
            # "earlier" ones, would supersede newer operations and their panels. (The seed
            # re-runs both passes, safe only while no newer operation exists.)
            return existing
        head_check(context.world_id, context.parent_head, field_name="parent_head")
        # A caller must not rely on a later read to invalidate what the parent head replaced.
        _reconcile(mutation, context.parent_head, context.operation_id)
        view = mutation.view()
        operation = Operation(
            id=context.operation_id,
            world_id=context.world_id,
            parent_head=context.parent_head,
            preset_id=context.preset_id,
            preset_revision=context.preset_revision,
            preset_scripts_enabled=context.preset_scripts_enabled,
        )
        try:
            # The world lock serialises the calls of one world, not two worlds' begins under
            # one id: the later insert of such a race meets the first's primary key. In a
            # savepoint, so the id can be read again and answered as one call later would be.
            with transaction.atomic():
                mutation.save_operation(operation, create=True)
        except IntegrityError:
            winner = Operation.objects.filter(pk=context.operation_id).first()
            if winner is None or same_context(winner, context):
                raise  # not that race (the same context is serialised by the world lock)
            raise invariant(MSG_BEGIN_MISMATCH, operation_id=context.operation_id) from None
        view.operations[operation.pk] = operation
        records_by_operation: dict[str, list[Record]] = defaultdict(list)
        for record in view.records:
            records_by_operation[record.operation_id].append(record)
        for prior in list(view.operations.values()):
            if prior.pk == operation.pk or prior.world_id != context.world_id:
                continue
            open_followup = prior.is_open_followup
            for record in records_by_operation.get(prior.pk, ()):
                if view.status(record) != ACTIVE:
                    continue
                if open_followup or record.invalidation == Invalidation.NEW_OPERATION:
                    mutation.supersede(record, "new_operation")
            if open_followup:
                prior.projection_status = ProjectionStatus.SUPERSEDED
                prior.followup_status = FollowupStatus.SUPERSEDED
                prior.message = MSG_SUPERSEDED_BY_OPERATION
                mutation.save_operation(prior)
        mutation.flush()
    return operation


def request_attempt_begin(*, context: RequestContext) -> AttemptResult:
    """`begin_request_attempt`: register an attempt (monotonic per request), then supersede
    the records of the request's older attempts. Ignored for finished or superseded
    operations and for attempts older than the current one."""
    context.check()
    request_id, attempt = context.request_id, context.request_attempt
    with transaction.atomic(durable=True):
        mutation, operation = lock_checked_operation(
            context.operation, missing=MSG_ATTEMPT_MISSING, mismatch=MSG_ATTEMPT_MISMATCH
        )
        current = operation.request_attempts.get(request_id)
        ignored = (
            operation.status in (OperationStatus.CORE_FAILED, OperationStatus.COMPLETED)
            or operation.projection_status == ProjectionStatus.SUPERSEDED
            or (current is not None and attempt < current)
        )
        if ignored:
            return AttemptResult(operation.pk, request_id, attempt, current, recorded=False)
        if current is None or attempt > current:
            operation.request_attempts = {**operation.request_attempts, request_id: attempt}
            mutation.save_operation(operation)
        older = Record.objects.filter(
            operation_id=operation.pk,
            request_id=request_id,
            request_attempt__lt=attempt,
            superseded=False,
        ).defer("payload")
        superseded = 0
        for record in older.order_by("sequence"):
            superseded += mutation.supersede(
                record, "request_attempt_superseded", with_request=True
            )
        mutation.flush()
    return AttemptResult(operation.pk, request_id, attempt, attempt, True, superseded)


# --- the core result ---------------------------------------------------------------------------


def _activate_committed(mutation: WorldMutation, operation: Operation, head: str) -> None:
    """Bind the operation's effective records to `head` and activate the pending ones."""
    if operation.projection_status == ProjectionStatus.SUPERSEDED:
        return
    view = mutation.view()
    for record in view.records:
        if record.operation_id != operation.pk:
            continue
        status = view.status(record)
        if status in (SUPERSEDED, CLEARED):
            continue
        if record.bound_head and record.bound_head != head:
            raise invariant(MSG_RECORD_HEAD, record_id=record.record_id)
        mutation.bind_head(record, head)
        if status != ACTIVE:
            mutation.activate(record)


def operation_mark_core_committed(*, context: OperationContext, head: str) -> Operation:
    """`mark_core_committed`: the operation's core result committed at `head`. Reconciles the
    world to `head`, binds and activates the operation's pending records. The same head again
    only repairs; a different head is an invariant error."""
    context.check()
    check_id(head, "head", MSG_ARGUMENT_INVALID)
    with transaction.atomic(durable=True):
        mutation, operation = lock_checked_operation(
            context, missing=MSG_COMMIT_MISSING, mismatch=MSG_BEGIN_MISMATCH
        )
        head_check(context.world_id, head, field_name="head")
        operation = mutation.adopt(operation)  # the reconcile below works on the world's view
        if operation.status == OperationStatus.COMPLETED:
            if operation.head != head:
                raise invariant(MSG_COMMIT_COMPLETED_HEAD, operation_id=operation.pk)
            return operation
        if operation.status == OperationStatus.CORE_FAILED:
            raise invariant(MSG_COMMIT_FAILED, operation_id=operation.pk)
        if operation.status == OperationStatus.CORE_COMMITTED:
            if operation.head != head:
                raise invariant(MSG_COMMIT_COMMITTED_HEAD, operation_id=operation.pk)
            _activate_committed(mutation, operation, head)
            mutation.flush()
            return operation
        recovered = operation.status == OperationStatus.CORE_MATERIALIZATION_PENDING
        if recovered and operation.head != head:
            raise invariant(MSG_PENDING_HEAD, operation_id=operation.pk)
        _reconcile(mutation, head, operation.pk)
        operation.status = OperationStatus.CORE_COMMITTED
        operation.head = head
        if recovered:
            operation.followup_status = FollowupStatus.NOT_STARTED
            operation.completed_requests = []
            operation.message = ""
        mutation.save_operation(operation)
        _activate_committed(mutation, operation, head)
        mutation.flush()
    return operation


def operation_mark_core_materialization_pending(
    *, context: OperationContext, head: str, message: str
) -> FollowupSummary:
    """`mark_core_materialization_pending`: the core committed at `head` but its result is not
    materialized yet; the follow-up needs recovery until `mark_core_committed` arrives."""
    context.check()
    check_id(head, "head", MSG_ARGUMENT_INVALID)
    check_message(message)
    with transaction.atomic(durable=True):
        mutation, operation = lock_checked_operation(
            context, missing=MSG_PENDING_MISSING, mismatch=MSG_PENDING_MISMATCH
        )
        head_check(context.world_id, head, field_name="head")
        if operation.status == OperationStatus.CORE_FAILED:
            raise invariant(MSG_PENDING_FAILED, operation_id=operation.pk)
        if operation.status in (OperationStatus.CORE_COMMITTED, OperationStatus.COMPLETED):
            return followup_summary(operation)
        if (
            operation.status == OperationStatus.CORE_MATERIALIZATION_PENDING
            and operation.head != head
        ):
            raise invariant(MSG_PENDING_HEAD, operation_id=operation.pk)
        operation.status = OperationStatus.CORE_MATERIALIZATION_PENDING
        operation.followup_status = FollowupStatus.RECOVERY_REQUIRED
        operation.message = message
        operation.completed_requests = []
        operation.head = head
        mutation.save_operation(operation)
        mutation.flush()
    return followup_summary(operation)


def operation_mark_core_failed(*, operation_id: str, message: str | None = None) -> FollowupSummary:
    """`mark_core_failed`: the core failed; every record of the operation is superseded.
    Only a running operation can fail; a missing one is an invariant error (spec 07: a call on
    a missing operation is 409; the seed ignores it)."""
    check_id(operation_id, "operation_id", MSG_ARGUMENT_INVALID)
    if message is not None:
        check_message(message)
    with transaction.atomic(durable=True):
        locked = lock_operation(operation_id)
        if locked is None:
            raise invariant(MSG_FAILED_MISSING, operation_id=operation_id)
        mutation, operation = locked
        if operation.status != OperationStatus.RUNNING:
            return followup_summary(operation)
        records = Record.objects.filter(operation_id=operation_id, superseded=False)
        for record in records.defer("payload").order_by("sequence"):
            mutation.supersede(record, "core_failed")
        operation.status = OperationStatus.CORE_FAILED
        operation.followup_status = FollowupStatus.FAILED
        operation.projection_status = ProjectionStatus.SUPERSEDED
        if message is not None:
            operation.message = message
        mutation.save_operation(operation)
        mutation.flush()
    return followup_summary(operation)
