"""The roster (one row per installed extension) and extension-owned state: records, documents,
document declarations, usage counters."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from core.models import TimestampedModel


class ExtensionStatus(models.TextChoices):
    RUNNING = "running", "running"
    STOPPED = "stopped", "stopped"
    UNINSTALLED = "uninstalled", "uninstalled"


class RosterEntry(TimestampedModel):
    """The database's record of one installed extension (spec 02 §2).

    Status lives here, not in memory: every frame reads it under `FOR SHARE`, a stop writes it
    under `FOR UPDATE`, so a committed stop is honoured by every process.
    """

    id = models.CharField(primary_key=True, max_length=64)
    version = models.CharField(max_length=64)
    revision = models.CharField(max_length=64)
    fingerprint = models.CharField(max_length=64, blank=True, default="")
    requested_grants = models.JSONField(default=list, blank=True)
    admitted_grants = models.JSONField(default=list, blank=True)
    status = models.CharField(
        max_length=16, choices=ExtensionStatus, default=ExtensionStatus.RUNNING
    )
    reason = models.CharField(max_length=512, blank=True, default="")
    stopped_at = models.DateTimeField(null=True, blank=True)
    failing_hook = models.CharField(max_length=128, blank=True, default="")
    # the id of the `extension_stopped` log event, shown in the admin to find the full cause
    stop_event_id = models.CharField(max_length=32, blank=True, default="")
    # the state ledger: version and revision of the last write of the extension's state
    state_version = models.PositiveIntegerField(null=True, blank=True)
    ledger_revision = models.CharField(max_length=64, blank=True, default="")
    # bumped by every resume and revision change: processes re-run `activate` when it moves
    activation_epoch = models.PositiveIntegerField(default=0)
    deadline_seconds = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.001), MaxValueValidator(300)],
        help_text="Per-extension hook deadline override (≤ 300 s).",
    )
    # Auto-resume needs both: the current definition's declaration (`Extension(auto_resume=…)`,
    # rewritten by every sync) and staff's switch (kept across versions). See
    # `auto_resume_effective`.
    declared_auto_resume = models.BooleanField(
        default=True,
        # also the column's default: a process still running the code before this column
        # (a rolling deploy) inserts rows without it (docs/operating.md)
        db_default=True,
        editable=False,
        help_text="What the installed version declares (auto_resume=…); set by sync_roster.",
    )
    auto_resume = models.BooleanField(
        default=True,
        help_text=(
            "Staff switch: off keeps this extension stopped after a stop until staff resume it. "
            "On, it auto-resumes only if the extension also declares auto_resume."
        ),
    )
    restart_count = models.PositiveSmallIntegerField(default=0)
    last_error = models.CharField(max_length=512, blank=True, default="")
    next_auto_resume_at = models.DateTimeField(null=True, blank=True)
    # per-extension quota overrides by name (max_records, max_bytes, max_timers, max_attention)
    quotas = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["id"]
        verbose_name = "extension"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["running", "stopped", "uninstalled"]),
                name="roster_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(deadline_seconds__isnull=True)
                | Q(deadline_seconds__gt=0, deadline_seconds__lte=300),
                name="roster_deadline_bounded",
            ),
        ]
        indexes = [
            # consumed by the auto-resume sweep (services.roster.roster_auto_resume_due)
            models.Index(
                fields=["next_auto_resume_at"],
                name="roster_auto_resume_idx",
                condition=Q(status="stopped", next_auto_resume_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.version} ({self.status})"

    @property
    def auto_resume_effective(self) -> bool:
        """Whether a stop is auto-resumed: declared by the installed version and not turned off
        by staff (`HOST_AUTO_RESUME` aside)."""
        return self.declared_auto_resume and self.auto_resume

    @property
    def pending_grants(self) -> list[str]:
        return sorted(set(self.requested_grants) - set(self.admitted_grants))


class RosterSyncLock(models.Model):
    """A singleton row locked `FOR UPDATE` by `sync_roster`: serialises syncs cluster-wide
    (a row lock, not a session advisory lock, so it is safe behind connection poolers)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="roster_sync_singleton")]

    def __str__(self) -> str:
        return "roster sync lock"


class ExtensionRecord(models.Model):
    """One record of a collection: the encoded (validated) JSON and its size in bytes."""

    # no index of its own: `record_key_unique` leads with it (a second index on `extension`
    # alone made the planner, with stale statistics, scan an extension's records per put)
    extension = models.ForeignKey(
        RosterEntry, on_delete=models.CASCADE, related_name="records", db_index=False
    )
    collection = models.CharField(max_length=64)
    key = models.CharField(max_length=256)
    # NULL, not "": no index (the partial index below covers indexed records only)
    index = models.CharField(max_length=256, null=True, blank=True)  # noqa: DJ001
    value = models.TextField()
    size_bytes = models.PositiveIntegerField()

    class Meta:
        ordering = ["extension_id", "collection", "key"]  # no join to the roster
        constraints = [
            models.UniqueConstraint(
                fields=["extension", "collection", "key"], name="record_key_unique"
            ),
        ]
        indexes = [
            # pages filtered by index, ordered by key
            models.Index(
                fields=["extension", "collection", "index", "key"],
                name="record_index_idx",
                condition=Q(index__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.extension_id}/{self.collection}/{self.key}"


class MigrationStaging(models.Model):
    """Migrated records are written here first, then swapped in, all in one transaction, so
    a migration never holds every record in memory and a failed one leaves nothing behind."""

    extension_id = models.CharField(max_length=64)
    collection = models.CharField(max_length=64)
    key = models.CharField(max_length=256)
    index = models.CharField(max_length=256, null=True, blank=True)  # noqa: DJ001 (as above)
    value = models.TextField()
    size_bytes = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["extension_id", "collection", "key"], name="staging_key_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.extension_id}/{self.collection}/{self.key} (staged)"


class DocumentDeclaration(models.Model):
    """A declared document kind (written by `sync_roster`); conversation fork reads its policy
    even when the extension's code is not loaded."""

    class Fork(models.TextChoices):
        COPY = "copy", "copy"
        RESET = "reset", "reset"

    extension = models.ForeignKey(
        RosterEntry, on_delete=models.CASCADE, related_name="document_declarations"
    )
    name = models.CharField(max_length=64)
    initial = models.TextField()
    max_bytes = models.PositiveIntegerField()
    fork = models.CharField(max_length=8, choices=Fork.choices)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["extension", "name"], name="document_decl_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.extension_id}/{self.name}"


class ExtensionDocument(models.Model):
    """The stored document of one conversation for `(extension, name)`."""

    extension = models.ForeignKey(RosterEntry, on_delete=models.CASCADE, related_name="documents")
    name = models.CharField(max_length=64)
    conversation = models.ForeignKey(
        "conversations.Conversation", on_delete=models.CASCADE, related_name="+"
    )
    value = models.TextField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["extension", "name", "conversation"], name="document_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.extension_id}/{self.name}@{self.conversation_id}"


class UsageSlot(models.Model):
    """One of a few counters per extension whose sum is the extension's stored usage.

    Frames add their deltas to the slot of their process/thread, so concurrent writers of one
    extension rarely contend on one row (quotas are checked against the committed sum plus the
    frame's own delta: the overshoot is bounded by what concurrent frames write).
    """

    extension = models.ForeignKey(RosterEntry, on_delete=models.CASCADE, related_name="usage")
    slot = models.PositiveSmallIntegerField()
    records = models.BigIntegerField(default=0)
    bytes = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["extension", "slot"], name="usage_slot_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.extension_id}#{self.slot}: {self.records} records, {self.bytes} bytes"
