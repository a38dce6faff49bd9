"""The lifecycle outbox (grant `lifecycle`, spec 03): fan-out and delivery. (The handlers' read
API is in `reader`, `shutdown` in `shutdown`, idle detection in `idle`.)

1. **Outbox**: `core.models.LifecycleEvent` rows are written by the services that cause them,
   in the cause's transaction (create, fork, archive, idle, user deleted).
2. **Fan-out** (`lifecycle_fanout`): events without a fan-out mark are turned into one pending
   `LifecycleDelivery` per subscribed extension (lifecycle granted, not uninstalled — stopped
   ones too, so they catch up after resume — with a handler for the kind or a worker that
   wakes on it), and marked, in one transaction. A process that does not have every such
   extension loaded at the roster's revision (a rolling deploy) fans out nothing: the events
   stay unmarked for a process that does. Outbox ids come from a sequence, so a smaller
   id can commit after a larger one; the fan-out never uses an id watermark, it looks for
   unmarked events, so a late commit is fanned out by the next pass. One fan-out page at a
   time, cluster-wide: each page's transaction first locks the `lifecycle_fanout` mark row
   `FOR UPDATE`, so a second fan-out (beat's tick, or the kick of an event committed
   meanwhile) waits for the page in progress and then sees its marks and what arrived since.
   (Pages claimed side by side, skip-locked, let a later event of a conversation be fanned
   out, and delivered, while an earlier one still sat in the other page.)
3. **Delivery** (`lifecycle_deliver`): per extension, one deliverer at a time (its consumer row
   is locked, skip-locked), in event order, each event in its own frame (a savepoint of one
   group commit); the pending row is deleted in the frame, with the handler's effects: exactly
   once. Events of one conversation are delivered in the order they happened: an event waits
   while an earlier one of its conversation is pending for that extension (retrying, or stopped
   behind). A failing handler stops the extension; its rows stay and are delivered after resume.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef

from core import clock
from core.models import LifecycleEvent
from extensions_host import registry
from extensions_host.background.declarations import WorkerWake, workers_of
from extensions_host.background.models import (
    LifecycleConsumer,
    LifecycleDelivery,
    LifecycleFanout,
    Mark,
)
from extensions_host.background.services import workers as worker_service
from extensions_host.background.services.common import (
    CHANNEL_FANOUT,
    CHANNEL_LIFECYCLE,
    FANOUT_KEY,
    eligible_ids,
    enqueue,
    enqueue_call,
    kick,
    kick_clear,
    kick_ensure,
    logger,
    page_with_retries,
)
from extensions_host.background.services.reader import ConversationReader, LifecycleEventView
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.registry import LoadedExtension
from extensions_host.runtime import FramePage, HookContext, run_frame
from extensions_host.runtime.transient import with_transient_retries
from extensions_host.sdk import LIFECYCLE_EVENTS

FANOUT_PAGE = 256
DELIVERY_PAGE = 64
FANOUT_LOCK = "lifecycle_fanout"  # the `Mark` row each fan-out page locks: one at a time


# --- fan-out ---------------------------------------------------------------------------------


def subscribed_kinds(loaded: LoadedExtension) -> frozenset[str]:
    """Event kinds an extension takes: a handler for it, or a worker that wakes on it."""
    definition = loaded.definition
    kinds = set(definition.hooks.lifecycle)
    for worker in workers_of(definition):
        kinds.update(worker.wake_on)
    return frozenset(kinds & LIFECYCLE_EVENTS)


def subscribers() -> dict[str, frozenset[str]] | None:
    """Extension id → kinds, for every lifecycle-granted extension that is not uninstalled
    (stopped ones included: they receive their events after resume).

    None when one of them is not loaded here at the roster's revision (a rolling deploy): this
    process cannot tell what that extension subscribes to, and an event marked fanned out never
    reaches it, so this process fans out nothing and the events wait for a process that has
    every subscriber's code — as a timer of such an extension waits for one (spec 02 §2,
    mixed versions)."""
    loaded = registry.loaded()
    rows = RosterEntry.objects.exclude(status=ExtensionStatus.UNINSTALLED).values_list(
        "id", "revision", "admitted_grants"
    )
    result: dict[str, frozenset[str]] = {}
    unknown: list[str] = []
    for ext_id, revision, grants in rows:
        if "lifecycle" not in (grants or []):
            continue
        here = loaded.get(ext_id)
        if here is None or here.revision != revision:
            unknown.append(ext_id)
            continue
        kinds = subscribed_kinds(here)
        if kinds:
            result[ext_id] = kinds
    if unknown:
        logger.info(
            "lifecycle fan-out left to another process: not loaded here at the roster's "
            "revision: %s",
            ", ".join(sorted(unknown)),
        )
        return None
    return result


def lifecycle_fanout(*, limit: int = FANOUT_PAGE) -> tuple[set[str], bool]:
    """Fan one page of unmarked outbox events out to their subscribers. Returns (extensions
    that got deliveries, more events may be waiting). A process that lacks a subscriber's code
    at the roster's revision fans out nothing (and reports nothing more: the next tick's task,
    on any process, tries again)."""
    subs = subscribers()
    if subs is None:
        return set(), False

    def step() -> tuple[set[str], int]:
        with transaction.atomic(durable=True):
            _fanout_lock()
            events = list(
                LifecycleEvent.objects.filter(
                    ~Exists(LifecycleFanout.objects.filter(event_id=OuterRef("pk")))
                )
                .order_by("pk")
                .values_list("pk", "kind", "conversation_id")[:limit]
            )
            deliveries = [
                LifecycleDelivery(
                    extension_id=ext_id,
                    event_id=event_id,
                    kind=kind,
                    conversation_id=conversation_id,
                )
                for event_id, kind, conversation_id in events
                for ext_id, kinds in subs.items()
                if kind in kinds
            ]
            LifecycleDelivery.objects.bulk_create(deliveries, ignore_conflicts=True)
            LifecycleFanout.objects.bulk_create(
                [LifecycleFanout(event_id=event_id) for event_id, _, _ in events],
                ignore_conflicts=True,
            )
            touched = {d.extension_id for d in deliveries}
            if touched:
                LifecycleConsumer.objects.bulk_create(
                    [LifecycleConsumer(extension_id=e) for e in touched], ignore_conflicts=True
                )
                kick_ensure(CHANNEL_LIFECYCLE, touched)
        return touched, len(events)

    touched, count = with_transient_retries(step)
    return touched, count == limit


def _fanout_lock() -> None:
    """Lock the fan-out's mark row until this transaction ends, waiting for the page of another
    fan-out in progress (a short wait: a page runs no hook). Created on first use. (SQLite's
    IMMEDIATE transactions already run one writer at a time.)"""

    def lock() -> bool:
        return Mark.objects.select_for_update().filter(name=FANOUT_LOCK).exists()

    if not lock():
        Mark.objects.bulk_create([Mark(name=FANOUT_LOCK, value=None)], ignore_conflicts=True)
        lock()


def lifecycle_deliver(*, extension_id: str, limit: int = DELIVERY_PAGE) -> bool:
    """Deliver one page of pending events to one extension. Returns True when more of its
    events are deliverable now."""
    loaded = registry.get(extension_id)
    if loaded is None or not eligible_ids("lifecycle", ids=[extension_id]):
        return False

    def body(page: FramePage) -> bool:
        consumer = list(
            LifecycleConsumer.objects.select_for_update(skip_locked=True)
            .filter(pk=extension_id)
            .values_list("pk", flat=True)
        )
        if not consumer:
            return False  # another worker is delivering this extension's events
        rows = _deliverable(extension_id, limit)
        events = LifecycleEvent.objects.in_bulk([row.event_id for row in rows])
        delivered: list[int] = []
        progressed, page_full = True, False
        for row in rows:
            event = events.get(row.event_id)
            if event is None:  # pruned or deleted by hand: nothing left to deliver
                delivered.append(row.pk)
                continue
            outcome = _deliver_one(page, loaded, row, event)
            if outcome == "ok":
                delivered.append(row.pk)
            elif outcome == "retry":
                continue
            elif outcome == "page":
                page_full = True  # no time left here for its whole deadline: the next page
                break
            else:
                progressed = False
                break  # stopped (or not runnable here): the rest wait for resume
        if delivered:
            LifecycleDelivery.objects.filter(pk__in=delivered).delete()
            LifecycleConsumer.objects.filter(pk=extension_id).update(
                delivered=F("delivered") + len(delivered)
            )
        # events held back behind an earlier one of their conversation may be deliverable
        # now: go on while pages make progress
        return progressed and (bool(delivered) or page_full)

    return page_with_retries(body)


def _deliverable(extension_id: str, limit: int) -> list[LifecycleDelivery]:
    """Pending rows due now, in event order, none behind an earlier pending event of the same
    conversation (per-conversation order)."""
    earlier = LifecycleDelivery.objects.filter(
        extension_id=extension_id,
        conversation_id=OuterRef("conversation_id"),
        event_id__lt=OuterRef("event_id"),
    ).exclude(conversation_id="")
    return list(
        LifecycleDelivery.objects.filter(extension_id=extension_id, not_before__lte=clock.now_ms())
        .filter(~Exists(earlier))
        .order_by("event_id")[:limit]
    )


def _deliver_one(
    page: FramePage, loaded: LoadedExtension, row: LifecycleDelivery, event: LifecycleEvent
) -> str:
    handler = loaded.definition.hooks.lifecycle.get(event.kind)
    wakes = [w.name for w in workers_of(loaded.definition) if event.kind in w.wake_on]
    data = dict(event.payload or {})

    def call(ctx: HookContext) -> Any:
        if handler is None:
            return None  # only workers wake on this kind
        reader = ConversationReader(ctx, event.conversation_id) if event.conversation_id else None
        view = LifecycleEventView(
            event_id=event.pk,
            kind=event.kind,
            conversation_id=event.conversation_id,
            data=data,
            reader=reader,
        )
        return handler(ctx, view)

    def finish(_: Any) -> None:
        wake = WorkerWake(event=event.kind, conversation_id=event.conversation_id)
        for name in wakes:
            worker_service.worker_wake(extension_id=loaded.id, name=name, wake=wake)

    outcome = run_frame(
        extension_id=loaded.id,
        hook=event.kind,
        call=call,
        boundary="worker",
        page=page,
        finish=finish,
        retry_attempt=row.retry_attempt,
        item=f"{row.pk}",
    )
    if outcome.status == "retry":
        delay = math.ceil((outcome.retry_after or 1) * 1000)
        LifecycleDelivery.objects.filter(pk=row.pk).update(
            retry_attempt=F("retry_attempt") + 1, not_before=clock.now_ms() + delay
        )
    if outcome.status == "skipped" and outcome.skip == "page":
        return "page"
    return outcome.status


def lifecycle_deliver_all(*, extension_id: str, budget_s: float | None = None) -> bool:
    """The per-extension task body: clear the kick, deliver pages for up to `budget_s`.
    Returns True when more are deliverable (the task re-enqueues itself)."""
    kick_clear(CHANNEL_LIFECYCLE, extension_id)
    budget = settings.HOST_SWEEP_BUDGET_SECONDS if budget_s is None else budget_s
    ends = time.monotonic() + budget
    while lifecycle_deliver(extension_id=extension_id):
        if time.monotonic() >= ends:
            return True
    return False


def lifecycle_fanout_all(*, budget_s: float | None = None) -> bool:
    """The fan-out task body: fan out pages, then kick the extensions that got deliveries."""
    kick_clear(CHANNEL_FANOUT, FANOUT_KEY)
    budget = settings.HOST_SWEEP_BUDGET_SECONDS if budget_s is None else budget_s
    ends = time.monotonic() + budget
    touched: set[str] = set()
    more = True
    while more:
        page_touched, more = lifecycle_fanout()
        touched |= page_touched
        if more and time.monotonic() >= ends:
            break
    lifecycle_kick(touched)
    return more


def lifecycle_pending_extensions() -> list[str]:
    """Running subscribers with deliverable events (beat's safety net)."""
    ids = eligible_ids("lifecycle")
    if not ids:
        return []
    return sorted(
        set(
            LifecycleDelivery.objects.filter(
                extension_id__in=ids, not_before__lte=clock.now_ms()
            ).values_list("extension_id", flat=True)
        )
    )


def lifecycle_sweep() -> None:
    """Beat: fan out what is waiting, and kick every extension with deliverable events."""
    lifecycle_fanout_kick()
    lifecycle_kick(lifecycle_pending_extensions())


def lifecycle_kick(extension_ids: Iterable[str]) -> list[str]:
    from extensions_host.background import tasks

    ids = eligible_ids("lifecycle", ids=extension_ids)
    if not ids:
        return []
    kick_ensure(CHANNEL_LIFECYCLE, ids)
    started = kick(CHANNEL_LIFECYCLE, ids)
    for extension_id in started:
        enqueue_call(tasks.deliver_lifecycle.delay, extension_id)
    return started


def lifecycle_fanout_kick() -> bool:
    """After an outbox event commits (and on every tick): one fan-out task, coalesced."""
    from extensions_host.background import tasks

    kick_ensure(CHANNEL_FANOUT, [FANOUT_KEY])
    if kick(CHANNEL_FANOUT, [FANOUT_KEY]):
        enqueue(tasks.lifecycle_fanout.delay)
        return True
    return False


def lifecycle_prune(*, older_than: dt.timedelta = dt.timedelta(hours=1), limit: int = 1000) -> int:
    """Delete outbox events fanned out more than `older_than` ago (host clock) and delivered to
    every subscriber (the hourly prune). Returns how many were deleted."""
    cutoff = clock.now() - older_than
    with transaction.atomic(durable=True):
        done = list(
            LifecycleEvent.objects.filter(
                Exists(LifecycleFanout.objects.filter(event_id=OuterRef("pk"), at__lt=cutoff))
            )
            .filter(~Exists(LifecycleDelivery.objects.filter(event_id=OuterRef("pk"))))
            .values_list("pk", flat=True)[:limit]
        )
        LifecycleEvent.objects.filter(pk__in=done).delete()
        LifecycleFanout.objects.filter(event_id__in=done).delete()
    return len(done)


def on_outbox_event(created: bool) -> None:
    """`post_save` of an outbox row: after the cause's transaction commits, fan it out.

    A signal rather than a call in `core.services.lifecycle_record`: core must not import the
    background app. The receiver holds no logic; it only schedules the kick after commit.
    """
    if created:
        transaction.on_commit(_fanout_kick_quietly, robust=True)


def _fanout_kick_quietly() -> None:
    try:
        lifecycle_fanout_kick()
    except Exception:  # never fail the committed cause; beat fans out within a tick
        logger.exception("lifecycle fan-out kick failed")
