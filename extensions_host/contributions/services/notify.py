"""Notifications (spec 05): ONE outbox for `interaction.pending`, `job.failed` and
`run.settled`, delivered to every registered notifier asynchronously (Celery), each call
deadline-bounded and retried with exponential backoff a bounded number of times.

A `notify` call is a hook run in a worker: its deadline is the notifier's `deadline_s`, else the
staff override or the extension's `deadline_s`, else the worker default (30 s); overrunning it
is a failed delivery, retried like any other. A notifier that exhausts its retries is reported
degraded (in `/v1/meta` health) — it is not stopped: a transport being down is not a defect of
the extension. The next success makes it ok.

- `notification_emit(...)`: called by the code that causes the event, in its transaction.
- `notification_deliver(delivery_id=)`: the task body (claim → call outside any transaction →
  record the outcome).
- `notifications_sweep()`: beat's safety net for lost tasks and crashed workers.
- `notifications_prune()`: the hourly prune of finished notifications older than
  HOST_NOTIFICATION_RETENTION_DAYS.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet

from core import clock
from core.errors import HostError, bound_text
from core.services import delete_page
from extensions_host import registry
from extensions_host.contributions.models import (
    DeliveryStatus,
    Notification,
    NotificationDelivery,
    NotificationType,
    NotifierHealth,
)
from extensions_host.contributions.outside import (
    DeliveryFailure,
    notify_deadline,
    run_best_effort,
)
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import detached_context
from extensions_host.runtime.deadlines import MAX_DEADLINE_SECONDS
from extensions_host.sdk import NotificationEvent
from extensions_host.services.roster import extensions_running_with

logger = logging.getLogger("extensions_host.contributions.notify")

TITLE_MAX = 200
BODY_MAX = 4000
SWEEP_PAGE = 200
PRUNE_PAGE = 1000
# a delivery in one of these may still run: its notification is kept
OPEN_DELIVERY = (DeliveryStatus.PENDING, DeliveryStatus.IN_FLIGHT)
MSG_TYPE_INVALID = "Notification type must be interaction.pending, job.failed or run.settled"


@dataclass(frozen=True)
class Eligible:
    extension_id: str
    notifier: str


def notification_url(conversation_id: str | None) -> str:
    """`<HOST_PUBLIC_URL>/inspect/<conversation_id>` when a public URL is configured."""
    base = settings.HOST_PUBLIC_URL.rstrip("/")
    return f"{base}/inspect/{conversation_id}" if base and conversation_id else ""


def notifiers_eligible() -> list[Eligible]:
    """Every notifier of an installed, running extension with `notify` admitted."""
    return [
        Eligible(extension_id, notifier.name)
        for extension_id, loaded in extensions_running_with("notify")
        for notifier in loaded.definition.contributions.notifiers
    ]


def notification_emit(
    *,
    type: str,
    user: Any,
    title: str,
    body: str = "",
    conversation_id: str | None = None,
    job_id: str | None = None,
    notifiers: list[Eligible] | None = None,
) -> Notification:
    """Record a notification in the caller's transaction (so it commits with its cause) and
    schedule one delivery per eligible notifier (`notifiers`, when the caller already read
    them) after commit. `user` is the recipient: a username, a user or None."""
    if type not in NotificationType.values:
        raise HostError("contract", "invalid", MSG_TYPE_INVALID)
    username = user.get_username() if hasattr(user, "get_username") else (user or "")
    notification = Notification.objects.create(
        type=type,
        conversation_id=(conversation_id or "")[:64],
        job_id=(job_id or "")[:200],
        user=str(username)[:150],
        title=bound_text(title or type, TITLE_MAX),
        body=bound_text(body or "", BODY_MAX),
        url=notification_url(conversation_id),
    )
    deliveries = NotificationDelivery.objects.bulk_create(
        [
            NotificationDelivery(
                notification=notification,
                extension_id=item.extension_id,
                notifier=item.notifier,
                next_attempt_at=clock.now_ms(),
            )
            for item in (notifiers_eligible() if notifiers is None else notifiers)
        ]
    )
    ids = [d.pk for d in deliveries if d.pk is not None]
    if not ids:  # SQLite before 3.35 / some backends do not return ids from bulk_create
        ids = list(notification.deliveries.values_list("pk", flat=True))
    for delivery_id in ids:
        _enqueue(delivery_id)
    return notification


def _enqueue(delivery_id: int, countdown: float | None = None) -> None:
    from extensions_host.contributions import tasks

    def send() -> None:
        if countdown:
            tasks.notifier_deliver.apply_async((delivery_id,), countdown=countdown)
        else:
            tasks.notifier_deliver.delay(delivery_id)

    transaction.on_commit(send, robust=True)


def event_of(notification: Notification) -> NotificationEvent:
    return NotificationEvent(
        type=notification.type,
        conversation_id=notification.conversation_id or None,
        job_id=notification.job_id or None,
        user=notification.user or None,
        title=notification.title,
        body=notification.body,
        url=notification.url or None,
    )


def backoff_seconds(attempts: int) -> float:
    """Exponential: base × 2^(attempts−1), capped."""
    base = settings.HOST_NOTIFY_BACKOFF_SECONDS
    return float(min(base * 2 ** max(attempts - 1, 0), settings.HOST_NOTIFY_BACKOFF_MAX_SECONDS))


def _claim(delivery_id: int, lease_ms: int) -> NotificationDelivery | None:
    """Take the delivery if it is due (pending, or in flight past its lease): one attempt is
    counted now, so a worker that dies mid-call still uses it up."""
    now = clock.now_ms()
    with transaction.atomic(durable=True):
        row = (
            NotificationDelivery.objects.select_for_update(skip_locked=True)
            .select_related("notification")
            .filter(
                pk=delivery_id,
                status__in=[DeliveryStatus.PENDING, DeliveryStatus.IN_FLIGHT],
                next_attempt_at__lte=now,
            )
            .first()
        )
        if row is None:
            return None
        row.status = DeliveryStatus.IN_FLIGHT
        row.attempts += 1
        row.next_attempt_at = now + lease_ms
        row.save(update_fields=["status", "attempts", "next_attempt_at"])
    return row


def notification_deliver(*, delivery_id: int) -> str:
    """Deliver one notification to one notifier; returns what happened (delivered, retry,
    failed, skipped, not_due)."""
    # the lease outlasts any notifier deadline (≤ 300 s), so only a dead worker's claim lapses
    row = _claim(delivery_id, lease_ms=int((MAX_DEADLINE_SECONDS + 60) * 1000))
    if row is None:
        return "not_due"
    loaded = registry.get(row.extension_id)
    roster = RosterEntry.objects.filter(pk=row.extension_id).first()
    notifier = next(
        (
            n
            for n in (loaded.definition.contributions.notifiers if loaded else [])
            if n.name == row.notifier
        ),
        None,
    )
    if (
        loaded is None
        or roster is None
        or notifier is None
        or roster.status != ExtensionStatus.RUNNING
        or roster.revision != loaded.revision
        or "notify" not in roster.admitted_grants
    ):
        # stopped means stopped everywhere: a stopped notifier's code does not run (and
        # notifications are best-effort, so nothing is replayed later)
        _finish(row, DeliveryStatus.SKIPPED, "Notifier is unavailable")
        return "skipped"
    ctx = detached_context(extension_id=row.extension_id, hook=f"notifier {notifier.name}")
    if ctx is None:
        _finish(row, DeliveryStatus.SKIPPED, "Notifier is unavailable")
        return "skipped"
    event = event_of(row.notification)
    try:
        run_best_effort(
            loaded=loaded,
            hook=f"notifier {notifier.name}",
            limit=notify_deadline(loaded, row=roster, declared=notifier.deadline_s),
            call=lambda: notifier.notify(ctx, event),
        )
    except DeliveryFailure as failure:
        return _failed(row, failure)
    _finish(row, DeliveryStatus.DELIVERED, "")
    _health(row.extension_id, row.notifier, ok=True)
    return "delivered"


def _finish(row: NotificationDelivery, status: str, error: str) -> None:
    NotificationDelivery.objects.filter(pk=row.pk).update(
        status=status,
        last_error=error[:512],
        delivered_at=clock.now_ms() if status == DeliveryStatus.DELIVERED else None,
    )


def _failed(row: NotificationDelivery, failure: DeliveryFailure) -> str:
    logger.warning(
        "notifier_failed",
        extra={
            "event": "notifier_failed",
            "extension_id": row.extension_id,
            "notifier": row.notifier,
            "attempt": row.attempts,
            "error": failure.message,
        },
    )
    if row.attempts >= settings.HOST_NOTIFY_MAX_ATTEMPTS:
        _finish(row, DeliveryStatus.FAILED, failure.message)
        _health(row.extension_id, row.notifier, ok=False, error=failure.message, final=True)
        return "failed"
    wait = max(backoff_seconds(row.attempts), failure.retry_after or 0)
    with transaction.atomic(durable=True):
        NotificationDelivery.objects.filter(pk=row.pk, status=DeliveryStatus.IN_FLIGHT).update(
            status=DeliveryStatus.PENDING,
            next_attempt_at=clock.now_ms() + int(wait * 1000),
            last_error=failure.message[:512],
        )
        _health(row.extension_id, row.notifier, ok=False, error=failure.message, final=False)
        _enqueue(row.pk, countdown=wait)
    return "retry"


def _health(
    extension_id: str, notifier: str, *, ok: bool, error: str = "", final: bool = False
) -> None:
    """Ok again on success; degraded once a delivery exhausted its retries."""
    now = clock.now_ms()
    NotifierHealth.objects.get_or_create(extension_id=extension_id, notifier=notifier)
    rows = NotifierHealth.objects.filter(extension_id=extension_id, notifier=notifier)
    if ok:
        rows.update(
            status=NotifierHealth.Status.OK,
            consecutive_failures=0,
            delivered=F("delivered") + 1,
            last_success_at=now,
        )
        return
    changes: dict[str, Any] = {
        "consecutive_failures": F("consecutive_failures") + 1,
        "last_error": error[:512],
        "last_failure_at": now,
    }
    if final:
        changes |= {
            "status": NotifierHealth.Status.DEGRADED,
            "failed_deliveries": F("failed_deliveries") + 1,
        }
    rows.update(**changes)


def notifications_due(*, limit: int = SWEEP_PAGE) -> list[int]:
    """Deliveries whose time has come and no task is known to hold: pending and due, or in
    flight past the claim's lease (served by `delivery_due_idx`)."""
    return list(
        NotificationDelivery.objects.filter(
            Q(status=DeliveryStatus.PENDING) | Q(status=DeliveryStatus.IN_FLIGHT),
            next_attempt_at__lte=clock.now_ms(),
        )
        .order_by("next_attempt_at", "id")
        .values_list("pk", flat=True)[:limit]
    )


def notifications_sweep() -> int:
    """Beat's safety net: re-enqueue due deliveries (a lost task, a worker that died)."""
    from extensions_host.contributions import tasks

    ids = notifications_due()
    for delivery_id in ids:
        tasks.notifier_deliver.delay(delivery_id)
    return len(ids)


def _prunable(cutoff: dt.datetime) -> QuerySet[Notification]:
    """Notifications created before `cutoff` with no delivery that may still run."""
    open_deliveries = NotificationDelivery.objects.filter(
        notification_id=OuterRef("pk"), status__in=OPEN_DELIVERY
    )
    return Notification.objects.filter(created_at__lt=cutoff).filter(~Exists(open_deliveries))


def notifications_prune(*, limit: int = PRUNE_PAGE) -> tuple[int, bool]:
    """Delete one page of notifications older than HOST_NOTIFICATION_RETENTION_DAYS (host
    clock) whose deliveries are all final (delivered, failed, skipped; none at all counts too),
    oldest first, their deliveries with them. One still pending (a retry waiting for its
    backoff included) or in flight is kept. Returns (deleted, more may remain): the task
    re-enqueues itself while pages are full, so a backlog drains without one unbounded DELETE."""
    cutoff = clock.now() - dt.timedelta(days=settings.HOST_NOTIFICATION_RETENTION_DAYS)
    # served by the created_at index; the delivery check by the deliveries' notification index
    return delete_page(_prunable(cutoff), order=("created_at", "pk"), limit=limit)


def notifier_health() -> list[dict[str, Any]]:
    """Every notifier of an installed extension with its delivery health."""
    rows = {(h.extension_id, h.notifier): h for h in NotifierHealth.objects.all()}
    result = []
    for extension_id, loaded in registry.loaded().items():
        for notifier in loaded.definition.contributions.notifiers:
            health = rows.get((extension_id, notifier.name))
            result.append(
                {
                    "extension_id": extension_id,
                    "name": notifier.name,
                    "status": health.status if health else NotifierHealth.Status.OK,
                    "consecutive_failures": health.consecutive_failures if health else 0,
                    "failed_deliveries": health.failed_deliveries if health else 0,
                    "delivered": health.delivered if health else 0,
                    "last_error": health.last_error if health else "",
                }
            )
    return result


def notification_run_settled(*, run_id: int) -> Notification | None:
    """`run.settled` for the conversation's owner, after the settle committed (best-effort,
    like every notification). Nothing is recorded unless some notifier is eligible (running,
    `notify` admitted): a notification nobody would receive is only a row to prune."""
    # the loaded check reads no row: settling stays free when no extension has a notifier
    if not any(loaded.definition.contributions.notifiers for loaded in registry.loaded().values()):
        return None
    notifiers = notifiers_eligible()
    if not notifiers:
        return None
    from conversations.models import Run

    run = Run.objects.select_related("conversation__owner").filter(pk=run_id).first()
    if run is None:
        return None
    body = run.outcome if not run.reason else f"{run.outcome}: {run.reason}"
    with transaction.atomic():
        return notification_emit(
            type=NotificationType.RUN_SETTLED,
            user=run.conversation.owner,
            title=f"Run settled in {run.conversation.name or run.conversation_id}",
            body=body,
            conversation_id=run.conversation_id,
            notifiers=notifiers,
        )
