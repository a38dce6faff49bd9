"""Background state: timers, settled cursors, the lifecycle delivery ledger, workers, jobs,
idle marks, delivery kicks and sweep marks.

Only `Timer` references the roster by foreign key (its rows are written only by frames of
that extension, which hold the roster row anyway). The other tables carry the extension id as
plain text: a fan-out or a kick must never take a key-share lock on a roster row and so wait
for a stop that is waiting for frames.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from django.db import models
from django.db.models import Q

from core import clock
from extensions_host.models import RosterEntry

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations  # a dev requirement: for the type checker only


class Timer(models.Model):
    """A pending timer of one extension: `(extension, key)` → `due_at` (epoch ms, host clock).

    `fire_at` is when the sweep next offers it: `due_at`, or later after a `Retry`.
    """

    # no index of its own: `timer_key_unique` leads with it (a second index on `extension` alone
    # made the planner, with stale statistics, scan an extension's timers per `set`)
    extension = models.ForeignKey(
        RosterEntry, on_delete=models.CASCADE, related_name="timers", db_index=False
    )
    key = models.CharField(max_length=256)
    due_at = models.BigIntegerField()
    fire_at = models.BigIntegerField()
    retry_attempt = models.PositiveSmallIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["extension", "key"], name="timer_key_unique"),
            models.CheckConstraint(condition=Q(due_at__gte=0), name="timer_due_at_non_negative"),
        ]
        indexes = [
            # consumed by the fire sweep (services.timers.timers_fire_page: due first, then id)
            # and the next-wake query (services.wake.timer_next_fire_at)
            models.Index(fields=["fire_at", "id"], name="timer_fire_idx"),
        ]

    def __str__(self) -> str:
        due = clock.from_ms(self.due_at)  # the console's title: a UTC time, not epoch ms
        return f"{self.extension_id}/{self.key} @ {due:%Y-%m-%d %H:%M:%S} UTC"


class Mark(models.Model):
    """A named instant, watermark or lease shared by every process (epoch ms, or null):
    `timer_wake` (the one coalesced next wake), `timer_pump` and `timer_help` (the leases of the
    waiting sweep and its helper), `idle_watermark` (the idle sweep), and `lifecycle_fanout`,
    whose row lock lets one lifecycle fan-out run at a time (its value is unused)."""

    name = models.CharField(primary_key=True, max_length=64)
    value = models.BigIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} = {self.value}"


class Kick(models.Model):
    """A coalesced "delivery wanted" flag per (channel, consumer): a trigger enqueues a task
    only when it flips `pending` from false (or the last kick is stale, i.e. its task was
    lost); the task clears it before it reads, so a later change kicks again."""

    channel = models.CharField(max_length=16)
    extension_id = models.CharField(max_length=64)
    pending = models.BooleanField(default=False)
    kicked_at = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["channel", "extension_id"], name="kick_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.channel}:{self.extension_id} pending={self.pending}"


class SettledCursor(models.Model):
    """A settled consumer's cursor: the highest settled sequence it has received. Advanced in
    the same transaction as its `on_settled` frame."""

    extension_id = models.CharField(primary_key=True, max_length=64)
    position = models.BigIntegerField(default=0)
    retry_attempt = models.PositiveSmallIntegerField(default=0)
    # after a Retry the batch is offered again from this instant (epoch ms)
    not_before = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.extension_id} at {self.position}"


class LifecycleFanout(models.Model):
    """Marks an outbox event as fanned out into per-extension deliveries.

    Outbox ids come from a sequence, so a smaller id can commit after a larger one: a watermark
    over ids could skip it. The fan-out therefore looks for events without a mark (an
    anti-join over the small undelivered tail), never for "ids above N".
    """

    event_id = models.BigIntegerField(primary_key=True)
    # host clock: the prune compares it with the host clock
    at = models.DateTimeField(default=clock.now)

    def __str__(self) -> str:
        return f"event {self.event_id} fanned out"


class LifecycleDelivery(models.Model):
    """One pending delivery of an outbox event to one subscribed extension; deleted in the
    same transaction as the handler's effects (exactly once)."""

    extension_id = models.CharField(max_length=64)
    event_id = models.BigIntegerField()
    kind = models.CharField(max_length=64)
    conversation_id = models.CharField(max_length=64, blank=True, default="")
    retry_attempt = models.PositiveSmallIntegerField(default=0)
    not_before = models.BigIntegerField(default=0)

    class Meta:
        verbose_name_plural = "lifecycle deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["extension_id", "event_id"], name="lifecycle_delivery_unique"
            ),
        ]
        indexes = [
            # the delivery page of one extension, in event order (services.lifecycle)
            models.Index(fields=["extension_id", "event_id"], name="lifecycle_delivery_idx"),
            # the per-conversation order check (an earlier pending event blocks later ones)
            models.Index(
                fields=["extension_id", "conversation_id", "event_id"],
                name="lifecycle_delivery_conv_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.event_id} → {self.extension_id}"


class LifecycleConsumer(models.Model):
    """One row per subscribed extension: locked (skip-locked) by the delivering task, so one
    extension's events are delivered by one worker at a time, in order."""

    extension_id = models.CharField(primary_key=True, max_length=64)
    delivered = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.extension_id}: {self.delivered} delivered"


class Outcome(models.TextChoices):
    OK = "ok", "ok"
    FAILED = "failed", "failed"
    SKIPPED = "skipped", "skipped"


def worker_lease_live(now: int) -> Q:
    """A run holds the worker: one claimed it (a token) and its lease has not run out by `now`.
    The one rule of the claim, beat's pending-wake sweep and the workers list."""
    return ~Q(running_token="") & Q(running_until__isnull=False, running_until__gt=now)


class WorkerLease(TypedDict):
    """What `WorkerStateQuerySet.with_lease` adds to each row."""

    lease_live: bool


if TYPE_CHECKING:
    LeasedWorkerState = WithAnnotations["WorkerState", WorkerLease]


class WorkerStateQuerySet(models.QuerySet["WorkerState"]):
    def with_lease(self, now: int) -> models.QuerySet[LeasedWorkerState]:
        """Each row with `lease_live` (`worker_lease_live`: true or false, never null)."""
        live = models.ExpressionWrapper(worker_lease_live(now), output_field=models.BooleanField())
        # the plugin types `annotate()` in a custom QuerySet method with a TypedDict of its own
        # that never matches a declared one (typeddjango/django-stubs#1190)
        return self.annotate(lease_live=live)  # type: ignore[return-value]

    def lease_free(self, now: int) -> WorkerStateQuerySet:
        """The rows no run holds: none claimed them, or the lease of the run that did ran out."""
        return self.exclude(worker_lease_live(now))


class WorkerState(models.Model):
    """A declared worker's run state: the one pending wake (last wins), the run in flight
    (token + start, a lease so a crashed run does not block forever) and the last outcome."""

    extension_id = models.CharField(max_length=64)
    name = models.CharField(max_length=64)
    pending_wake = models.JSONField(null=True, blank=True)
    running_token = models.CharField(max_length=32, blank=True, default="")
    running_since = models.BigIntegerField(null=True, blank=True)
    running_until = models.BigIntegerField(null=True, blank=True)
    runs = models.PositiveIntegerField(default=0)
    last_run_at = models.BigIntegerField(null=True, blank=True)
    last_outcome = models.CharField(max_length=16, choices=Outcome, blank=True)
    last_error = models.CharField(max_length=512, blank=True, default="")
    last_duration_ms = models.PositiveIntegerField(null=True, blank=True)

    objects = WorkerStateQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["extension_id", "name"], name="worker_state_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.extension_id}/{self.name}"


class JobState(models.Model):
    """A declared job's schedule state. `next_run_at` only moves forward with every instant it
    passes run, counted (`missed_runs`, `overlap_skips`) or held behind a run (a `JobTrigger`
    of `HELD_ACTOR`); it never jumps silently."""

    id = models.CharField(primary_key=True, max_length=200)  # ext:<extension>:<name>
    extension_id = models.CharField(max_length=64)
    name = models.CharField(max_length=64)
    next_run_at = models.BigIntegerField(null=True, blank=True)
    # the declared schedule `next_run_at` follows (`Job.schedule_text`; "" on rows older than
    # this column): a declaration with another one moves it (services.jobs.jobs_ensure)
    # db_default: rows inserted by code older than this column (a rolling deploy) get it too
    schedule = models.TextField(blank=True, default="", db_default="")
    last_run_at = models.BigIntegerField(null=True, blank=True)
    last_scheduled_for = models.BigIntegerField(null=True, blank=True)
    last_outcome = models.CharField(max_length=16, choices=Outcome, blank=True)
    last_error = models.CharField(max_length=512, blank=True, default="")
    last_duration_ms = models.PositiveIntegerField(null=True, blank=True)
    runs = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)
    missed_runs = models.PositiveIntegerField(default=0)
    last_missed_at = models.BigIntegerField(null=True, blank=True)
    overlap_skips = models.PositiveIntegerField(default=0)
    retry_attempt = models.PositiveSmallIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # consumed by the job sweep (services.jobs.jobs_due)
            models.Index(fields=["next_run_at"], name="job_next_run_idx"),
        ]

    def __str__(self) -> str:
        return self.id


# the actor of a scheduled instant held behind a run (a manual trigger's actor is a username,
# but a manual trigger never has `scheduled_for`)
HELD_ACTOR = "schedule"


class JobTrigger(models.Model):
    """A run of a job the schedule pointer does not cover, consumed by the run: a manual trigger
    (admin or `POST /v1/jobs/{id}/trigger`, `not_before` = now), a `Retry` of a run (actor
    `retry`, `not_before` = after its delay, `scheduled_for` = the instant being retried), or a
    scheduled instant held behind a trigger's run (actor `HELD_ACTOR`, `scheduled_for` = the
    instant, `not_before` = the end of the run it waited for, `missed_runs` = the instants
    counted as missed when it was held, which its run reports)."""

    job = models.ForeignKey(JobState, on_delete=models.CASCADE, related_name="triggers")
    actor = models.CharField(max_length=150)
    not_before = models.BigIntegerField()
    scheduled_for = models.BigIntegerField(null=True, blank=True)
    retry_attempt = models.PositiveSmallIntegerField(default=0)
    # db_default: rows inserted by code older than this column (a rolling deploy) get it too
    missed_runs = models.PositiveIntegerField(default=0, db_default=0)

    class Meta:
        indexes = [models.Index(fields=["job", "not_before"], name="job_trigger_due_idx")]

    def __str__(self) -> str:
        return f"{self.job_id} by {self.actor}"

    @property
    def held(self) -> bool:
        """A scheduled instant held behind a run (not a manual trigger or a `Retry`)."""
        return self.scheduled_for is not None and self.actor == HELD_ACTOR


class IdleMark(models.Model):
    """The activity instant a conversation's `conversation_idle` was emitted for: once per idle
    period; new activity (a later `last_activity_at`) re-arms it. Kept here rather than on the
    conversation so the idle sweep never writes conversation rows; deleted with it."""

    # written under the conversation's row lock: the key's own lock on it costs nothing
    conversation = models.OneToOneField(
        "conversations.Conversation", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    activity_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.conversation_id} idle since {self.activity_at:%Y-%m-%d %H:%M:%S}"
