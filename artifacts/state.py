"""The operation state machine: the seed's `validArtifactOperationState`, in one place.

`operation_state_problem` is the rule; `OPERATION_STATE` restates what SQL can express of it
as the `Operation` check constraint; every write of an operation runs the Python check first
(`WorldMutation.save_operation`), and `verify_artifacts` runs it over stored rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db.models import Q

from artifacts.choices import FollowupStatus, OperationStatus, ProjectionStatus


def _nonblank(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def operation_state_problem(
    *,
    status: str,
    followup_status: str,
    projection_status: str,
    head: str,
    message: str,
    completed_requests: Sequence[Any],
) -> str | None:
    """Why this operation state is not one of the seed's `validArtifactOperationState`
    combinations, or None when it is. `""` stands for an absent head or message.

    The one place the state machine lives; `Operation.Meta.constraints` restates what SQL can
    express of it, and every write goes through `WorldMutation.save_operation`.
    """
    if status not in OperationStatus.values:
        return f"unknown status {status!r}"
    if followup_status not in FollowupStatus.values:
        return f"unknown follow-up status {followup_status!r}"
    if projection_status not in ProjectionStatus.values:
        return f"unknown projection status {projection_status!r}"
    if not isinstance(completed_requests, list | tuple) or not all(
        _nonblank(item) for item in completed_requests
    ):
        return "completed requests must be non-empty strings"
    no_requests = len(completed_requests) == 0
    has_head, has_message = _nonblank(head), _nonblank(message)
    if status == OperationStatus.RUNNING:
        if followup_status != FollowupStatus.NOT_STARTED:
            return "a running operation has a follow-up that has not started"
        if not no_requests or message != "" or head != "":
            return "a running operation has no completed requests, message or head"
        return None
    if status == OperationStatus.CORE_FAILED:
        if followup_status != FollowupStatus.FAILED:
            return "an operation whose core failed has a failed follow-up"
        if not no_requests or head != "":
            return "an operation whose core failed has no completed requests or head"
        if projection_status != ProjectionStatus.SUPERSEDED:
            return "an operation whose core failed has a superseded projection"
        return None
    if status == OperationStatus.CORE_MATERIALIZATION_PENDING:
        if followup_status != FollowupStatus.RECOVERY_REQUIRED:
            return "an operation awaiting materialization requires recovery"
        if not no_requests or projection_status != ProjectionStatus.ACTIVE:
            return "an operation awaiting materialization is active with no completed requests"
        if not has_head or not has_message:
            return "an operation awaiting materialization has a head and a message"
        return None
    if status == OperationStatus.COMPLETED:
        if followup_status != FollowupStatus.COMPLETED:
            return "a completed operation has a completed follow-up"
        if not has_head or message != "":
            return "a completed operation has a head and no message"
        return None
    # core_committed
    if not has_head:
        return "a committed operation has a head"
    if followup_status == FollowupStatus.COMPLETED:
        return "a committed operation's follow-up cannot be completed before the operation is"
    if followup_status in (FollowupStatus.NOT_STARTED, FollowupStatus.RUNNING):
        if not no_requests or message != "":
            return "an open follow-up has no completed requests or message"
        return None
    if not has_message:
        return "a settled follow-up has a message"
    if (
        followup_status == FollowupStatus.SUPERSEDED
        and projection_status != ProjectionStatus.SUPERSEDED
    ):
        return "a superseded follow-up has a superseded projection"
    return None


def request_attempts_problem(attempts: Any) -> str | None:
    """Why a `{request_id: attempt}` map is malformed, or None."""
    if not isinstance(attempts, Mapping):
        return "request attempts must be an object"
    for request_id, attempt in attempts.items():
        if not _nonblank(request_id):
            return "request ids must be non-empty"
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            return f"request {request_id!r} has an invalid attempt"
    return None


def _empty(field: str) -> Q:
    return Q(**{field: ""})


# What SQL can say of `operation_state_problem` (whitespace-only strings and JSON contents
# are left to the Python check, which every write runs first).
_NO_REQUESTS = Q(completed_requests=[])
OPERATION_STATE = (
    Q(
        status="running",
        followup_status="not_started",
        message="",
        head="",
    )
    & _NO_REQUESTS
    | Q(status="core_failed", followup_status="failed", projection_status="superseded", head="")
    & _NO_REQUESTS
    | Q(
        status="core_materialization_pending",
        followup_status="recovery_required",
        projection_status="active",
    )
    & _NO_REQUESTS
    & ~_empty("head")
    & ~_empty("message")
    | Q(status="completed", followup_status="completed", message="") & ~_empty("head")
    | Q(status="core_committed")
    & ~_empty("head")
    & (
        Q(followup_status__in=["not_started", "running"], message="") & _NO_REQUESTS
        | Q(
            followup_status__in=[
                "failed",
                "cancelled",
                "budget_exceeded",
                "unknown",
                "recovery_required",
            ]
        )
        & ~_empty("message")
        | Q(followup_status="superseded", projection_status="superseded") & ~_empty("message")
    )
)
