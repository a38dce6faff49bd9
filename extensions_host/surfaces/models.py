"""Attention items, ambient surfaces, interactions, tool-call results and notification events.

Visibility of attention and ambient is never stored: it is a query-time join on the roster
(running and granted `attention`), so a stop hides an extension's items everywhere at once and a
resume shows them again, with nothing to rewrite.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

LEVEL_RANK = {"action": 0, "warning": 1, "info": 2}


class AttentionLevel(models.TextChoices):
    INFO = "info", "info"
    WARNING = "warning", "warning"
    ACTION = "action", "action"


class AttentionItem(models.Model):
    """One outstanding attention item of one extension on one conversation."""

    extension = models.ForeignKey(
        "extensions_host.RosterEntry", on_delete=models.CASCADE, related_name="attention_items"
    )
    conversation = models.ForeignKey(
        "conversations.Conversation", on_delete=models.CASCADE, related_name="attention_items"
    )
    item_id = models.CharField(max_length=256)
    level = models.CharField(max_length=8, choices=AttentionLevel)
    # 0 action, 1 warning, 2 info: the view orders by it (most urgent first)
    level_rank = models.PositiveSmallIntegerField()
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True, default="")
    command = models.JSONField(null=True, blank=True)
    expires_at_ms = models.BigIntegerField(null=True, blank=True)
    # host clock (epoch ms) of the last set: the order within a level
    set_at_ms = models.BigIntegerField()

    class Meta:
        ordering = ["conversation", "level_rank", "-set_at_ms", "extension", "item_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["extension", "conversation", "item_id"], name="attention_item_unique"
            ),
            models.CheckConstraint(
                condition=Q(level__in=["info", "warning", "action"]), name="attention_level_valid"
            ),
        ]
        indexes = [
            # the conversation view: one conversation's items in display order
            models.Index(
                fields=["conversation", "level_rank", "-set_at_ms"], name="attention_view_idx"
            ),
            # the 1,024-per-extension bound counts an extension's unexpired items; the prune
            # sweep (services.attention.attention_prune_expired) reads expired ones
            models.Index(fields=["extension", "expires_at_ms"], name="attention_owner_idx"),
            models.Index(
                fields=["expires_at_ms"],
                name="attention_expiry_idx",
                condition=Q(expires_at_ms__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.extension_id}/{self.item_id}@{self.conversation_id}"


class AmbientSurface(models.Model):
    """One ambient surface of a conversation: the first extension to write `key` there owns it;
    a clear empties it (`cleared`) and keeps the ownership."""

    conversation = models.ForeignKey(
        "conversations.Conversation", on_delete=models.CASCADE, related_name="ambient_surfaces"
    )
    key = models.CharField(max_length=64)
    extension = models.ForeignKey(
        "extensions_host.RosterEntry", on_delete=models.CASCADE, related_name="ambient_surfaces"
    )
    place = models.CharField(max_length=8)
    max_rows = models.PositiveSmallIntegerField(null=True, blank=True)
    overflow = models.CharField(max_length=10, default="drop")
    refresh_ms = models.PositiveIntegerField(null=True, blank=True)
    body = models.JSONField(null=True, blank=True)
    details = models.JSONField(null=True, blank=True)
    cleared = models.BooleanField(default=False)
    updated_at_ms = models.BigIntegerField()

    class Meta:
        ordering = ["conversation", "place", "key"]
        constraints = [
            models.UniqueConstraint(fields=["conversation", "key"], name="ambient_key_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.key}@{self.conversation_id} ({self.extension_id})"


class InteractionStatus(models.TextChoices):
    PENDING = "pending", "pending"
    ANSWERED = "answered", "answered"
    SKIPPED = "skipped", "skipped"
    EXPIRED = "expired", "expired"
    CANCELLED = "cancelled", "cancelled"


class Interaction(models.Model):
    """A question or approval an extension put to the user of a conversation."""

    conversation = models.ForeignKey(
        "conversations.Conversation", on_delete=models.CASCADE, related_name="interactions"
    )
    call_id = models.CharField(max_length=128)
    extension = models.ForeignKey(
        "extensions_host.RosterEntry", on_delete=models.CASCADE, related_name="interactions"
    )
    kind = models.CharField(max_length=64)
    prompt = models.TextField()
    options = models.JSONField(null=True, blank=True)
    status = models.CharField(
        max_length=10, choices=InteractionStatus, default=InteractionStatus.PENDING
    )
    answer = models.JSONField(null=True, blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at_ms = models.BigIntegerField()
    settled_at_ms = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["conversation", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "call_id"], name="interaction_call_unique"
            ),
            models.CheckConstraint(
                condition=Q(status__in=InteractionStatus.values), name="interaction_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.call_id}@{self.conversation_id} ({self.status})"


class ToolCallResult(models.Model):
    """The recorded result of one tool call of a run: `tool_call_id` is the idempotency key
    within the run; `fingerprint` is sha256 over (extension, tool, arguments)."""

    run = models.ForeignKey("conversations.Run", on_delete=models.CASCADE, related_name="+")
    tool_call_id = models.CharField(max_length=128)
    extension_id = models.CharField(max_length=64)
    tool = models.CharField(max_length=64)
    arguments = models.JSONField(default=dict)
    fingerprint = models.CharField(max_length=64)
    ok = models.BooleanField(default=False)
    result = models.JSONField(null=True, blank=True)
    reason = models.CharField(max_length=512, blank=True, default="")
    entry = models.ForeignKey(
        "conversations.Entry", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="tool_call_unique"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} {self.tool_call_id} ({'ok' if self.ok else 'failed'})"
