"""Host-wide models: the timestamped base, API tokens and the audit log."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from core import clock


class TimestampedModel(models.Model):
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class TokenScope(models.TextChoices):
    READ = "read", "read"
    WRITE = "write", "write"
    RUNTIME = "runtime", "runtime"


class ApiToken(TimestampedModel):
    """A per-user API token. Only a SHA-256 digest is stored; the prefix identifies it in lists."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True, default="")
    prefix = models.CharField(max_length=16, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    scope = models.CharField(max_length=16, choices=TokenScope, default=TokenScope.WRITE)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user_id}, {self.scope})"


class AuditEntry(models.Model):
    """Append-only record of staff actions and extension stops. `actor` is a plain string so
    history survives user deletion."""

    # the host clock, as the prune of host-API call entries and the console's windows read it
    at = models.DateTimeField(default=clock.now, editable=False, db_index=True)
    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=64, db_index=True)
    target = models.CharField(max_length=256, blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target}"


class IdempotencyResult(models.Model):
    """A stored response for an idempotency key (commands' `Idempotency-Key`, …), pruned after
    24 hours by the hourly sweep."""

    scope = models.CharField(max_length=256)
    key = models.CharField(max_length=256)
    request_fingerprint = models.CharField(max_length=64)
    status = models.PositiveSmallIntegerField()
    body = models.JSONField(null=True)
    # the host clock, which the prune compares with (spec 02 §6: one clock for due times)
    created_at = models.DateTimeField(default=clock.now, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="idempotency_scope_key_unique")
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.key}"


class LifecycleEvent(models.Model):
    """The lifecycle outbox: written in the same transaction as the change that caused it,
    delivered to subscribed extensions by a worker (spec 03)."""

    kind = models.CharField(max_length=64)
    # no foreign key: the event outlives what it describes (deletions, retention)
    conversation_id = models.CharField(max_length=64, blank=True, default="")
    payload = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.conversation_id}"
