"""The artifact store's tables: worlds, operations, records and projection events (spec 06).

A **world** is a conversation. Its `World` row is the lock that serialises every mutation of
the world and holds the counter of its gap-free sequence, shared by records and events.

Records are immutable after insert except for three projection columns (`activated`,
`superseded`, `bound_head`) that mirror the world's event log: each is written in the same
transaction as the event that changes it, so reads never replay the log while
`verify_artifacts` can (and compares).
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q

from artifacts.choices import (
    CONTEXT_FIELDS,
    FINGERPRINT_MAX,
    ID_MAX,
    MESSAGE_MAX,
    NAME_MAX,
    OPEN_FOLLOWUP,
    TERMINAL_FOLLOWUP,
    ContentType,
    EventKind,
    FollowupStatus,
    Invalidation,
    OperationStatus,
    ProjectionStatus,
    Save,
    Strategy,
)
from artifacts.state import OPERATION_STATE, operation_state_problem, request_attempts_problem
from conversations.models import Conversation

__all__ = [
    "CONTEXT_FIELDS",
    "FINGERPRINT_MAX",
    "ID_MAX",
    "MESSAGE_MAX",
    "NAME_MAX",
    "OPEN_FOLLOWUP",
    "TERMINAL_FOLLOWUP",
    "ContentType",
    "Event",
    "EventKind",
    "FollowupStatus",
    "Invalidation",
    "Operation",
    "OperationStatus",
    "ProjectionStatus",
    "Record",
    "Save",
    "Strategy",
    "World",
]


class World(models.Model):
    """One per conversation that has artifacts. Its row is the world's mutation lock: every
    write to the world's records and events happens while it is locked, so the next sequence
    (one past the highest record or event) is read and used without a race."""

    conversation = models.OneToOneField(
        Conversation, primary_key=True, on_delete=models.CASCADE, related_name="artifact_world"
    )
    # +1 by every call that writes an operation's state, which can change the projection
    # without an event (`WorldMutation.flush`); with the sequence it makes
    # `selectors.artifacts_version`, what the inspector and the event stream watch
    state_version = models.PositiveBigIntegerField(default=0, db_default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation_id"]

    def __str__(self) -> str:
        return f"world {self.pk}"


class Operation(models.Model):
    """One unit of agent work that may emit artifacts, with its frozen context."""

    id = models.CharField(primary_key=True, max_length=ID_MAX)
    world = models.ForeignKey(World, on_delete=models.CASCADE, related_name="operations")
    parent_head = models.CharField(max_length=ID_MAX)
    preset_id = models.CharField(max_length=ID_MAX)
    preset_revision = models.CharField(max_length=ID_MAX)
    preset_scripts_enabled = models.BooleanField()
    status = models.CharField(
        max_length=32, choices=OperationStatus.choices, default=OperationStatus.RUNNING
    )
    followup_status = models.CharField(
        max_length=32, choices=FollowupStatus.choices, default=FollowupStatus.NOT_STARTED
    )
    projection_status = models.CharField(
        max_length=16, choices=ProjectionStatus.choices, default=ProjectionStatus.ACTIVE
    )
    head = models.CharField(max_length=ID_MAX, blank=True, default="")  # "" = not yet bound
    message = models.TextField(blank=True, default="")  # "" = no message
    completed_requests = models.JSONField(default=list, blank=True)
    # {request_id: current attempt}: monotonic; older attempts of a request are stale.
    request_attempts = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["world_id", "created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=OPERATION_STATE, name="artifact_operation_state"),
            models.CheckConstraint(
                condition=Q(projection_status__in=ProjectionStatus.values),
                name="artifact_operation_projection_status",
            ),
        ]
        indexes = [
            # begin_operation/reconcile_head look for the world's operations that are still open
            models.Index(fields=["world", "status"], name="artifact_op_world_status_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.pk} ({self.status}/{self.followup_status})"

    @property
    def context(self) -> dict[str, Any]:
        return {
            "world_id": self.world_id,
            "parent_head": self.parent_head,
            "operation_id": self.pk,
            "preset_id": self.preset_id,
            "preset_revision": self.preset_revision,
            "preset_scripts_enabled": self.preset_scripts_enabled,
        }

    def state_problem(self) -> str | None:
        return operation_state_problem(
            status=self.status,
            followup_status=self.followup_status,
            projection_status=self.projection_status,
            head=self.head,
            message=self.message,
            completed_requests=self.completed_requests,
        ) or request_attempts_problem(self.request_attempts)

    @property
    def is_open_followup(self) -> bool:
        """Committed core with a follow-up that may still act (the seed's `isOpenExtension`)."""
        return self.status == OperationStatus.CORE_COMMITTED and self.followup_status in (
            OPEN_FOLLOWUP
        )

    @property
    def is_open(self) -> bool:
        """Still able to change the projection: running, or an open follow-up."""
        return self.status == OperationStatus.RUNNING or self.is_open_followup

    @property
    def is_live(self) -> bool:
        """Running, or committed with its follow-up running (the seed's `isActiveInteraction`):
        the only time `transient` records show."""
        return self.status == OperationStatus.RUNNING or (
            self.status == OperationStatus.CORE_COMMITTED
            and self.followup_status == FollowupStatus.RUNNING
        )

    @property
    def is_stale(self) -> bool:
        """Results arriving now are recorded but superseded at once."""
        return (
            self.projection_status == ProjectionStatus.SUPERSEDED
            or self.status in (OperationStatus.CORE_FAILED, OperationStatus.COMPLETED)
            or self.followup_status
            in (
                FollowupStatus.SUPERSEDED,
                FollowupStatus.UNKNOWN,
                FollowupStatus.RECOVERY_REQUIRED,
                FollowupStatus.FAILED,
                FollowupStatus.CANCELLED,
                FollowupStatus.BUDGET_EXCEEDED,
            )
        )

    @property
    def core_committed(self) -> bool:
        return self.status in (
            OperationStatus.CORE_MATERIALIZATION_PENDING,
            OperationStatus.CORE_COMMITTED,
            OperationStatus.COMPLETED,
        )


class Record(models.Model):
    """One emitted artifact. Immutable after insert but for the projection columns."""

    # db_index off: the (world, sequence) unique index serves every world-scoped lookup
    world = models.ForeignKey(
        World, on_delete=models.CASCADE, related_name="records", db_index=False
    )
    sequence = models.PositiveBigIntegerField()
    record_id = models.CharField(max_length=64)  # artifact:<sequence>:<16 hex of payload>
    # db_index off: (operation, tool_call_id) leads with it
    operation = models.ForeignKey(
        Operation, on_delete=models.CASCADE, related_name="records", db_index=False
    )
    # the operation identity at emit time (verify_artifacts checks it still matches)
    parent_head = models.CharField(max_length=ID_MAX)
    preset_id = models.CharField(max_length=ID_MAX)
    preset_revision = models.CharField(max_length=ID_MAX)
    preset_scripts_enabled = models.BooleanField()
    request_id = models.CharField(max_length=ID_MAX)
    request_attempt = models.PositiveIntegerField()
    # the declaration it was emitted under
    output = models.CharField(max_length=NAME_MAX)
    channel = models.CharField(max_length=NAME_MAX)
    key = models.CharField(max_length=NAME_MAX, blank=True, default="")
    content_type = models.CharField(max_length=32, choices=ContentType.choices)
    renderer = models.CharField(max_length=NAME_MAX, blank=True, default="")
    renderer_revision = models.CharField(max_length=NAME_MAX, blank=True, default="")
    save_mode = models.CharField(max_length=16, choices=Save.choices)  # the declaration's `save`
    strategy = models.CharField(max_length=16, choices=Strategy.choices)
    invalidation = models.CharField(max_length=16, choices=Invalidation.choices)
    # the call
    tool_call_id = models.CharField(max_length=ID_MAX)
    call_fingerprint = models.CharField(max_length=FINGERPRINT_MAX)
    payload_fingerprint = models.CharField(max_length=FINGERPRINT_MAX)
    record_fingerprint = models.CharField(max_length=FINGERPRINT_MAX)
    # The payload as text (JSON text for application/json). NULL for save=none: that payload
    # lives only in the cache (artifacts/ephemeral.py), never in the database. NULL, not "":
    # an empty string is a valid text payload.
    payload = models.TextField(null=True, blank=True)  # noqa: DJ001
    payload_bytes = models.PositiveIntegerField()
    # Running totals of the request attempt, including this record: emit reads them off the
    # attempt's latest records (two index probes) instead of summing the attempt.
    attempt_bytes = models.PositiveBigIntegerField()
    output_emits = models.PositiveIntegerField()  # records of this output in the attempt
    # projection state, mirrored from this record's events in the same transaction
    activated = models.BooleanField(default=False)
    superseded = models.BooleanField(default=False)
    bound_head = models.CharField(max_length=ID_MAX, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["world_id", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["world", "sequence"], name="artifact_record_sequence"),
            # one record per tool call: the idempotency key of emit
            models.UniqueConstraint(
                fields=["operation", "tool_call_id"], name="artifact_record_tool_call"
            ),
            models.CheckConstraint(
                condition=Q(save_mode="none", payload__isnull=True)
                | ~Q(save_mode="none") & Q(payload__isnull=False),
                name="artifact_record_ephemeral_payload_not_stored",
            ),
            models.CheckConstraint(
                condition=Q(strategy="upsert") & ~Q(key="") | ~Q(strategy="upsert") & Q(key=""),
                name="artifact_record_key_iff_upsert",
            ),
            models.CheckConstraint(
                condition=Q(renderer="", renderer_revision="")
                | ~Q(renderer="") & ~Q(renderer_revision=""),
                name="artifact_record_renderer_pair",
            ),
            models.CheckConstraint(
                condition=Q(sequence__gte=1, request_attempt__gte=1),
                name="artifact_record_positive_numbers",
            ),
        ]
        indexes = [
            # These two lead with request_id, not operation, so that the only index leading
            # with operation is `artifact_record_tool_call`: emit's tool-call probe (operation,
            # tool_call_id) then cannot be planned as a scan of every record of the operation
            # when the planner has no statistics yet (a new database, before its first ANALYZE).
            # emit: the attempt's byte total (its latest record) and older attempts' records
            models.Index(
                fields=["request_id", "operation", "request_attempt", "sequence"],
                name="artifact_record_attempt_idx",
            ),
            # emit: max_emits (the latest record of the output in the attempt)
            models.Index(
                fields=["request_id", "operation", "request_attempt", "output", "sequence"],
                name="artifact_record_output_idx",
            ),
            # projection reads and begin/reconcile scan only records not yet superseded
            models.Index(
                fields=["world", "sequence"],
                name="artifact_record_live_idx",
                condition=Q(superseded=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.world_id} {self.record_id}"

    @property
    def call_context(self) -> dict[str, Any]:
        """The frozen operation context the record was emitted under (its call fingerprint
        covers it)."""
        return {name: getattr(self, name) for name in CONTEXT_FIELDS}

    @property
    def fingerprint_fields(self) -> dict[str, Any]:
        """Every immutable field, as `record_fingerprint` covers them."""
        return {
            "record_id": self.record_id,
            "sequence": self.sequence,
            "world_id": self.world_id,
            "operation_id": self.operation_id,
            "parent_head": self.parent_head,
            "preset_id": self.preset_id,
            "preset_revision": self.preset_revision,
            "preset_scripts_enabled": self.preset_scripts_enabled,
            "request_id": self.request_id,
            "request_attempt": self.request_attempt,
            "output": self.output,
            "channel": self.channel,
            "key": self.key,
            "content_type": self.content_type,
            "renderer": self.renderer,
            "renderer_revision": self.renderer_revision,
            "save": self.save_mode,
            "strategy": self.strategy,
            "invalidation": self.invalidation,
            "tool_call_id": self.tool_call_id,
            "tool_name": "artifact_emit",
            "call_fingerprint": self.call_fingerprint,
            "payload_fingerprint": self.payload_fingerprint,
            "payload_bytes": self.payload_bytes,
            "attempt_bytes": self.attempt_bytes,
            "output_emits": self.output_emits,
        }


class Event(models.Model):
    """An append-only projection event. `record_id` names a record of the same world by its
    public id (no foreign key: like the seed's log, a dangling name is corruption that
    `verify_artifacts` reports, not something the schema hides)."""

    world = models.ForeignKey(
        World, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    sequence = models.PositiveBigIntegerField()
    kind = models.CharField(max_length=16, choices=EventKind.choices)
    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="events")
    record_id = models.CharField(max_length=64, blank=True, default="")
    reason = models.CharField(max_length=64, blank=True, default="")
    head = models.CharField(max_length=ID_MAX, blank=True, default="")
    # clear / ignored_call: the cleared output and the call's identity
    output = models.CharField(max_length=NAME_MAX, blank=True, default="")
    channel = models.CharField(max_length=NAME_MAX, blank=True, default="")
    key = models.CharField(max_length=NAME_MAX, blank=True, default="")
    tool_call_id = models.CharField(max_length=ID_MAX, blank=True, default="")
    call_fingerprint = models.CharField(max_length=FINGERPRINT_MAX, blank=True, default="")
    request_id = models.CharField(max_length=ID_MAX, blank=True, default="")
    request_attempt = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["world_id", "sequence"]
        constraints = [
            models.UniqueConstraint(fields=["world", "sequence"], name="artifact_event_sequence"),
            # clear/ignored_call are tool calls: one event per tool-call id per operation
            models.UniqueConstraint(
                fields=["operation", "tool_call_id"],
                condition=~Q(tool_call_id=""),
                name="artifact_event_tool_call",
            ),
            models.CheckConstraint(
                condition=Q(kind__in=EventKind.values), name="artifact_event_kind"
            ),
        ]
        indexes = [
            # projection reads: the world's clears after its oldest live record
            models.Index(
                fields=["world", "sequence"],
                name="artifact_event_clear_idx",
                condition=Q(kind="clear"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.world_id} #{self.sequence} {self.kind}"
