"""The artifact store (spec 06). Every rule lives in these modules; views and commands call them.

Spec name → service:
    begin_operation                   operation_begin
    begin_request_attempt             request_attempt_begin
    reconcile_head                    head_reconcile
    emit / clear                      artifact_emit / artifact_clear
    mark_core_committed               operation_mark_core_committed
    mark_core_materialization_pending operation_mark_core_materialization_pending
    mark_core_failed                  operation_mark_core_failed
    begin/complete/fail/resume_followup  followup_begin/complete/fail/resume
    read_followup, read_followup_summaries, read_active_projection, read_debug
                                      artifacts.selectors: followup_read, followup_summaries,
                                      projection_read, debug_read
    (integrity)                       integrity_check (manage.py verify_artifacts, admin)
"""

from __future__ import annotations

from artifacts.services.emit import artifact_clear, artifact_emit
from artifacts.services.followups import (
    followup_begin,
    followup_complete,
    followup_fail,
    followup_resume,
)
from artifacts.services.integrity import Problem, integrity_check
from artifacts.services.operations import (
    head_reconcile,
    operation_begin,
    operation_mark_core_committed,
    operation_mark_core_failed,
    operation_mark_core_materialization_pending,
    request_attempt_begin,
)
from artifacts.types import (
    AttemptResult,
    ClearResult,
    Declaration,
    EmitResult,
    FollowupSummary,
    OperationContext,
    ReconcileResult,
    RequestContext,
)

__all__ = [
    "AttemptResult",
    "ClearResult",
    "Declaration",
    "EmitResult",
    "FollowupSummary",
    "OperationContext",
    "Problem",
    "ReconcileResult",
    "RequestContext",
    "artifact_clear",
    "artifact_emit",
    "followup_begin",
    "followup_complete",
    "followup_fail",
    "followup_resume",
    "head_reconcile",
    "integrity_check",
    "operation_begin",
    "operation_mark_core_committed",
    "operation_mark_core_failed",
    "operation_mark_core_materialization_pending",
    "request_attempt_begin",
]
