"""The artifact store's vocabularies and bounds (spec 06)."""

from __future__ import annotations

from django.db import models

ID_MAX = 255
# An operation's frozen context (spec 06), in the order the call fingerprints use.
CONTEXT_FIELDS = (
    "world_id",
    "parent_head",
    "operation_id",
    "preset_id",
    "preset_revision",
    "preset_scripts_enabled",
)
NAME_MAX = 200
FINGERPRINT_MAX = 71  # "sha256:" + 64 hex digits
MESSAGE_MAX = 2000


class OperationStatus(models.TextChoices):
    RUNNING = "running", "running"
    CORE_FAILED = "core_failed", "core failed"
    CORE_MATERIALIZATION_PENDING = (
        "core_materialization_pending",
        "core materialization pending",
    )
    CORE_COMMITTED = "core_committed", "core committed"
    COMPLETED = "completed", "completed"


class FollowupStatus(models.TextChoices):
    NOT_STARTED = "not_started", "not started"
    RUNNING = "running", "running"
    COMPLETED = "completed", "completed"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"
    BUDGET_EXCEEDED = "budget_exceeded", "budget exceeded"
    UNKNOWN = "unknown", "unknown"
    RECOVERY_REQUIRED = "recovery_required", "recovery required"
    SUPERSEDED = "superseded", "superseded"


# A follow-up that may still act: the seed's "open extension" statuses.
OPEN_FOLLOWUP = frozenset({"not_started", "running", "unknown", "recovery_required"})
TERMINAL_FOLLOWUP = frozenset({"completed", "failed", "cancelled", "budget_exceeded", "superseded"})


class ProjectionStatus(models.TextChoices):
    ACTIVE = "active", "active"
    SUPERSEDED = "superseded", "superseded"


class ContentType(models.TextChoices):
    TEXT_PLAIN = "text/plain", "text/plain"
    TEXT_MARKDOWN = "text/markdown", "text/markdown"
    APPLICATION_JSON = "application/json", "application/json"
    TEXT_HTML = "text/html", "text/html"


class Save(models.TextChoices):
    NONE = "none", "none"
    OPERATION = "operation", "operation"
    COMMIT = "commit", "commit"


class Strategy(models.TextChoices):
    APPEND = "append", "append"
    REPLACE = "replace", "replace"
    UPSERT = "upsert", "upsert"
    TRANSIENT = "transient", "transient"
    HIDDEN = "hidden", "hidden"


class Invalidation(models.TextChoices):
    NEW_OPERATION = "new_operation", "new operation"
    HEAD_CHANGE = "head_change", "head change"
    OPERATION_END = "operation_end", "operation end"
    EXPLICIT_CLEAR = "explicit_clear", "explicit clear"
    NEVER = "never", "never"


class EventKind(models.TextChoices):
    ACTIVATE = "activate", "activate"
    SUPERSEDE = "supersede", "supersede"
    BIND_HEAD = "bind_head", "bind head"
    CLEAR = "clear", "clear"
    IGNORED_CALL = "ignored_call", "ignored call"
