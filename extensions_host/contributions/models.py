"""Stores (secrets, settings) and the notification outbox with its delivery state and the
health of each notifier."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from core import clock
from core.models import TimestampedModel
from extensions_host.models import RosterEntry


class ExtensionSecret(TimestampedModel):
    """One secret of one extension, encrypted at rest (Fernet). The plaintext never reaches
    the database, the cache, a log or the admin; `key_id` names the host key that encrypted
    it, so a rotation can prove no row is left under an old key."""

    extension = models.ForeignKey(RosterEntry, on_delete=models.CASCADE, related_name="secrets")
    key = models.CharField(max_length=128)
    ciphertext = models.TextField()
    key_id = models.CharField(max_length=16)

    class Meta:
        ordering = ["extension", "key"]
        constraints = [
            models.UniqueConstraint(fields=["extension", "key"], name="secret_key_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.extension_id}/{self.key}"


class ExtensionSettings(TimestampedModel):
    """The settings of one extension: a validated JSON object (absent reads as `{}`)."""

    extension = models.OneToOneField(
        RosterEntry, on_delete=models.CASCADE, primary_key=True, related_name="settings"
    )
    value = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name = "extension settings"
        verbose_name_plural = "extension settings"

    def __str__(self) -> str:
        return f"settings of {self.extension_id}"


class NotificationType(models.TextChoices):
    INTERACTION_PENDING = "interaction.pending", "interaction.pending"
    JOB_FAILED = "job.failed", "job.failed"
    RUN_SETTLED = "run.settled", "run.settled"


class Notification(models.Model):
    """The notification outbox: one row per event, written in the transaction of its cause;
    every registered notifier gets a `NotificationDelivery`."""

    type = models.CharField(max_length=32, choices=NotificationType)
    conversation_id = models.CharField(max_length=64, blank=True, default="")
    job_id = models.CharField(max_length=200, blank=True, default="")
    user = models.CharField(max_length=150, blank=True, default="")  # a username, not a FK
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True, default="")
    url = models.CharField(max_length=2048, blank=True, default="")
    # the host clock, as the prune and the console's failed-job window read it
    created_at = models.DateTimeField(default=clock.now, editable=False, db_index=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(type__in=NotificationType.values), name="notification_type_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.title}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "pending"
    IN_FLIGHT = "in_flight", "in flight"
    DELIVERED = "delivered", "delivered"
    FAILED = "failed", "failed"
    SKIPPED = "skipped", "skipped"


class NotificationDelivery(models.Model):
    """One notification to one notifier: claimed by a worker (attempts counted at the claim,
    so a crashed worker still uses up an attempt), retried with backoff, bounded."""

    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="deliveries"
    )
    extension_id = models.CharField(max_length=64)
    notifier = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=DeliveryStatus, default=DeliveryStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    # host clock (epoch ms): when the next attempt may start; for in-flight rows, when the
    # claim's lease ends (a worker that died mid-delivery is retried by the sweep after it)
    next_attempt_at = models.BigIntegerField(default=0)
    last_error = models.CharField(max_length=512, blank=True, default="")
    delivered_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "notification deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["notification", "extension_id", "notifier"], name="delivery_unique"
            ),
            models.CheckConstraint(
                condition=Q(status__in=DeliveryStatus.values), name="delivery_status_valid"
            ),
        ]
        indexes = [
            # consumed by the delivery sweep (services.notify.notifications_due)
            models.Index(
                fields=["next_attempt_at", "id"],
                name="delivery_due_idx",
                condition=Q(status__in=["pending", "in_flight"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.notification_id} → {self.extension_id}/{self.notifier} ({self.status})"


class NotifierHealth(models.Model):
    """Delivery health of one notifier: degraded after a delivery exhausted its retries, ok
    again after the next success. A failing notifier never stops its extension."""

    class Status(models.TextChoices):
        OK = "ok", "ok"
        DEGRADED = "degraded", "degraded"

    extension_id = models.CharField(max_length=64)
    notifier = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OK)
    consecutive_failures = models.PositiveIntegerField(default=0)
    failed_deliveries = models.PositiveIntegerField(default=0)
    delivered = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=512, blank=True, default="")
    last_failure_at = models.BigIntegerField(null=True, blank=True)
    last_success_at = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["extension_id", "notifier"]
        verbose_name_plural = "notifier health"
        constraints = [
            models.UniqueConstraint(
                fields=["extension_id", "notifier"], name="notifier_health_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.extension_id}/{self.notifier}: {self.status}"
