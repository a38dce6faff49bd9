"""Conversations, transcript entries, submissions, runs and the settled-sequence counter."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q

from core.models import TimestampedModel

# The one conversation-id rule (ids are client-chosen): 1-64 of A-Z a-z 0-9 _ -. `\A…\Z`, not
# `^…$`: `$` also matches before a trailing newline, so "x\n" would pass. The OpenAPI schema
# shows it as `^…$` (drf-spectacular translates the anchors for ECMA).
CONVERSATION_ID_RE = r"\A[A-Za-z0-9_-]{1,64}\Z"
_CONVERSATION_ID = re.compile(CONVERSATION_ID_RE)
conversation_id_validator = RegexValidator(CONVERSATION_ID_RE, "Use 1-64 of A-Z a-z 0-9 _ -.")


def conversation_id_valid(value: object) -> bool:
    """Whether `value` could be a conversation id. Check before any query: an id that cannot
    exist is simply not found (a NUL in it would be a driver error on PostgreSQL)."""
    return isinstance(value, str) and _CONVERSATION_ID.match(value) is not None


class Sharing(models.TextChoices):
    PRIVATE = "private", "private"
    USERS = "users", "users"
    PUBLIC = "public", "public"


class Conversation(TimestampedModel):
    id = models.CharField(primary_key=True, max_length=64, validators=[conversation_id_validator])
    # PROTECT: users are deleted only through the transfer service, never by cascade.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="conversations"
    )
    sharing = models.CharField(max_length=16, choices=Sharing, default=Sharing.PRIVATE)
    name = models.CharField(max_length=200, blank=True, default="")
    source = models.CharField(max_length=64, blank=True, default="")
    archived = models.BooleanField(default=False)
    archived_at = models.DateTimeField(null=True, blank=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    forked_at_entry = models.BigIntegerField(null=True, blank=True)
    # Stamped at exactly two moments: submission admission and run settlement.
    last_activity_at = models.DateTimeField()
    # Bumped on every observable change; watchers compare versions.
    version = models.BigIntegerField(default=0)

    # Not columns: what `selectors.conversation_view` and the detail view attach for the reader
    # (typed here so they are declared in one place).
    access: str
    attention: list[dict[str, Any]]
    ambient: list[dict[str, Any]]

    class Meta:
        indexes = [
            # the conversation list, newest activity first
            models.Index(fields=["-last_activity_at", "id"], name="conv_activity_idx"),
            models.Index(fields=["owner", "-last_activity_at"], name="conv_owner_activity_idx"),
            # consumed by the retention sweep (services.conversations_retention_sweep): only
            # archived rows are ever candidates, so the index stays small
            models.Index(
                fields=["archived_at"], name="conv_retention_idx", condition=Q(archived=True)
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(sharing__in=Sharing.values), name="conversation_sharing_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.name or self.id


class Role(models.TextChoices):
    USER = "user", "user"
    ASSISTANT = "assistant", "assistant"
    TOOL = "tool", "tool"
    SYSTEM = "system", "system"
    EXTENSION = "extension", "extension"


class Entry(models.Model):
    """An append-only transcript row. Only `withdrawn` ever changes."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="entries")
    role = models.CharField(max_length=16, choices=Role)
    content = models.JSONField(default=list)
    run = models.ForeignKey(
        "Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="entries"
    )
    submission = models.OneToOneField(
        "Submission", null=True, blank=True, on_delete=models.SET_NULL, related_name="entry"
    )
    # NULL, not "": the unique constraint below only covers appends that gave a key
    entry_key = models.CharField(max_length=128, null=True, blank=True)  # noqa: DJ001
    withdrawn = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "entries"
        constraints = [
            models.UniqueConstraint(
                fields=["run", "entry_key"],
                name="entry_key_unique_per_run",
                condition=Q(entry_key__isnull=False),
            ),
        ]
        indexes = [models.Index(fields=["conversation", "id"], name="entry_conv_idx")]

    def __str__(self) -> str:
        return f"{self.conversation_id}#{self.pk} {self.role}"


class Delivery(models.TextChoices):
    FOLLOW_UP = "follow_up", "follow_up"
    STEER = "steer", "steer"


class SubmissionStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    CLAIMED = "claimed", "claimed"
    CONSUMED = "consumed", "consumed"
    WITHDRAWN = "withdrawn", "withdrawn"


class OriginKind(models.TextChoices):
    USER = "user", "user"
    EXTENSION = "extension", "extension"


class Submission(TimestampedModel):
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="submissions"
    )
    request_id = models.CharField(max_length=128)
    parts = models.JSONField(default=list)
    delivery = models.CharField(max_length=16, choices=Delivery, default=Delivery.FOLLOW_UP)
    not_before = models.DateTimeField(null=True, blank=True)
    origin_kind = models.CharField(max_length=16, choices=OriginKind)
    origin_user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    origin_extension_id = models.CharField(max_length=64, blank=True, default="")
    correlation = models.CharField(max_length=256, blank=True, default="")
    # sha256 of the canonical content: an idempotent retry must match it exactly
    fingerprint = models.CharField(max_length=64)
    status = models.CharField(
        max_length=16, choices=SubmissionStatus, default=SubmissionStatus.QUEUED
    )
    run = models.ForeignKey(
        "Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="submissions"
    )
    release_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "request_id"], name="submission_request_id_unique"
            ),
        ]
        indexes = [
            # the claim query: queued submissions per conversation, in admission order
            models.Index(
                fields=["conversation", "id"],
                name="submission_queued_idx",
                condition=Q(status="queued"),
            ),
            # consumed by claim-any (services.run_claim without a conversation): the oldest
            # queued submissions across all conversations, in admission order
            models.Index(
                fields=["id"], name="submission_queue_fifo_idx", condition=Q(status="queued")
            ),
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id}/{self.request_id} ({self.status})"


class RunStatus(models.TextChoices):
    CLAIMED = "claimed", "claimed"
    SETTLED = "settled", "settled"
    RELEASED = "released", "released"


class Outcome(models.TextChoices):
    ANSWERED = "answered", "answered"
    UNANSWERED = "unanswered", "unanswered"


class Run(TimestampedModel):
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="runs")
    claim_key = models.CharField(max_length=128, null=True, blank=True, unique=True)
    status = models.CharField(max_length=16, choices=RunStatus, default=RunStatus.CLAIMED)
    claimed_at = models.DateTimeField()
    lease_expires_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    settled_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome, blank=True, default="")
    answer_entry = models.ForeignKey(
        Entry, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.CharField(max_length=512, blank=True, default="")
    # Gap-free in commit order (see services.run_settle); null until settled.
    settled_sequence = models.BigIntegerField(null=True, blank=True, unique=True)
    # What the claim captured for this run: participants, prompt sections, tools, files, …
    capture = models.JSONField(default=dict, blank=True)

    # Not a column: the run's inputs, attached by the run detail view for its serializer
    input_list: list[Submission]

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(status="claimed"),
                name="one_unsettled_run_per_conversation",
            ),
            models.CheckConstraint(
                condition=Q(status="settled", settled_sequence__isnull=False)
                | ~Q(status="settled") & Q(settled_sequence__isnull=True),
                name="settled_runs_have_a_sequence",
            ),
        ]
        indexes = [
            # consumed by the lease-expiry sweep
            models.Index(
                fields=["lease_expires_at"], name="run_lease_idx", condition=Q(status="claimed")
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.conversation_id} ({self.status})"


class SettledCounter(models.Model):
    """The single row whose lock makes the settled sequence gap-free in commit order."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    value = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="settled_counter_singleton")]

    def __str__(self) -> str:
        return f"settled sequence at {self.value}"
