"""Notifiers: one outbox, asynchronous delivery, bounded retries with backoff, degraded
health, never a stop."""

from __future__ import annotations

import datetime as dt
import time
from functools import partial

import pytest

from core import clock
from extensions_host.contributions import tasks
from extensions_host.contributions.models import (
    DeliveryStatus,
    Notification,
    NotificationDelivery,
    NotifierHealth,
)
from extensions_host.contributions.services import notify
from extensions_host.contributions.services.notify import (
    notification_deliver,
    notification_emit,
    notifications_due,
    notifications_prune,
    notifications_sweep,
)
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime.deadlines import MAX_DEADLINE_SECONDS, seconds_left
from extensions_host.sdk import Extension, Notifier, Retry

from .exts import make_notifier_ext


def emit(capture, **overrides):
    fields = {
        "type": "interaction.pending",
        "user": "owner",
        "title": "A question is waiting",
        "body": "Pick one",
        "conversation_id": "c1",
    } | overrides
    with capture(execute=True):
        return notification_emit(**fields)


def test_a_notification_is_delivered_to_every_notifier_with_its_event(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    received = []
    install(
        make_notifier_ext("ntfy", notify=lambda ctx, event: received.append(("ntfy", event))),
        make_notifier_ext("mail", notify=lambda ctx, event: received.append(("mail", event))),
    )
    notification = emit(django_capture_on_commit_callbacks)
    assert len(enqueued) == 2  # one task per notifier, after commit
    for delivery_id, countdown in enqueued:
        assert countdown is None
        assert notification_deliver(delivery_id=delivery_id) == "delivered"
    assert sorted(name for name, _ in received) == ["mail", "ntfy"]
    event = received[0][1]
    assert event.type == "interaction.pending"
    assert event.user == "owner"
    assert event.url == "https://hyphae.example/inspect/c1"
    assert event.title == "A question is waiting"
    assert set(notification.deliveries.values_list("status", flat=True)) == {"delivered"}


def test_nothing_is_enqueued_before_the_cause_commits(install, notify_settings, enqueued):
    install(make_notifier_ext(notify=lambda ctx, event: None))
    notification_emit(type="job.failed", user=None, title="Job failed", job_id="ext:x:nightly")
    assert enqueued == []  # still inside the (test) transaction: on_commit has not run
    assert Notification.objects.get().url == ""  # no conversation: no url


def test_a_failing_notifier_is_retried_a_bounded_number_of_times_then_degraded(
    install, api, member, notify_settings, enqueued, fake_clock, django_capture_on_commit_callbacks
):
    attempts = []

    def down(ctx, event):
        attempts.append(event.title)
        raise ConnectionError("ntfy.example is unreachable")

    install(make_notifier_ext(notify=down))
    emit(django_capture_on_commit_callbacks)
    (delivery_id, _), *_ = enqueued
    outcomes = []
    for _ in range(5):
        with django_capture_on_commit_callbacks(execute=True):
            outcomes.append(notification_deliver(delivery_id=delivery_id))
        fake_clock.advance(seconds=60)
    assert outcomes == ["retry", "retry", "failed", "not_due", "not_due"]
    assert len(attempts) == 3  # bounded
    assert [countdown for _, countdown in enqueued[1:]] == [2.0, 4.0]  # exponential backoff
    delivery = NotificationDelivery.objects.get(pk=delivery_id)
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 3)
    assert delivery.last_error == "ntfy.example is unreachable"
    health = NotifierHealth.objects.get(extension_id="ntfy", notifier="push")
    assert health.status == "degraded"
    assert RosterEntry.objects.get(pk="ntfy").status == ExtensionStatus.RUNNING
    meta = api(member).get("/v1/meta").json()
    assert meta["health"]["status"] == "degraded"
    [notifier] = meta["notifiers"]
    assert notifier["status"] == "degraded"
    assert notifier["failed_deliveries"] == 1
    [extension] = meta["extensions"]
    assert extension["status"] == "running"
    assert extension["health"] == {
        "status": "degraded",
        "detail": "notifier push degraded: ntfy.example is unreachable",
    }


def test_a_retry_waits_for_its_backoff(
    install, notify_settings, enqueued, fake_clock, django_capture_on_commit_callbacks
):
    calls = []

    def flaky(ctx, event):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("blip")

    install(make_notifier_ext(notify=flaky))
    emit(django_capture_on_commit_callbacks)
    delivery_id = enqueued[0][0]
    with django_capture_on_commit_callbacks(execute=True):
        assert notification_deliver(delivery_id=delivery_id) == "retry"
    assert notification_deliver(delivery_id=delivery_id) == "not_due"  # too early
    fake_clock.advance(seconds=2)
    assert notification_deliver(delivery_id=delivery_id) == "delivered"
    health = NotifierHealth.objects.get()
    assert (health.status, health.consecutive_failures, health.delivered) == ("ok", 0, 1)


def test_a_notifier_asking_to_retry_later_is_not_tried_again_before_its_own_delay(
    install, notify_settings, enqueued, fake_clock, django_capture_on_commit_callbacks
):
    calls = []

    def rate_limited(ctx, event):
        calls.append(1)
        if len(calls) == 1:
            raise Retry(after_seconds=600, reason="rate limited")

    install(make_notifier_ext(notify=rate_limited))
    emit(django_capture_on_commit_callbacks)
    delivery_id = enqueued[0][0]
    asked_at = fake_clock.now_ms()
    with django_capture_on_commit_callbacks(execute=True):
        assert notification_deliver(delivery_id=delivery_id) == "retry"

    delivery = NotificationDelivery.objects.get(pk=delivery_id)
    assert delivery.next_attempt_at == asked_at + 600_000  # not the 2 s default backoff
    assert enqueued[1] == (delivery_id, 600.0)
    fake_clock.advance(seconds=599)
    assert notification_deliver(delivery_id=delivery_id) == "not_due"
    fake_clock.advance(seconds=1)
    assert notification_deliver(delivery_id=delivery_id) == "delivered"
    assert len(calls) == 2


def test_a_notifier_past_its_deadline_fails_without_a_stop(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    notify_settings.HOST_HOOK_DEADLINE_WORKER_MS = 50  # the deadline of a notifier without one

    def slow(ctx, event):
        time.sleep(2)  # interrupted by the notifier deadline (SIGALRM on this main thread)

    install(make_notifier_ext(notify=slow))
    emit(django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        assert notification_deliver(delivery_id=enqueued[0][0]) == "retry"
    delivery = NotificationDelivery.objects.get()
    assert delivery.last_error == "notifier push exceeded its deadline"
    assert RosterEntry.objects.get(pk="ntfy").status == ExtensionStatus.RUNNING


def notifier_deadline(install, capture, enqueued, **declared) -> float:
    """The seconds a `notify` call of an extension declared with `declared` (its `deadline_s`,
    its notifier's as `notifier_deadline_s`) has when it starts."""
    left: list[float] = []
    notifier = Notifier(
        "push",
        notify=lambda ctx, event: left.append(seconds_left()),
        deadline_s=declared.pop("notifier_deadline_s", None),
    )
    install(
        Extension(id="ntfy", version="1.0.0", grants={"notify"}, notifiers=[notifier], **declared)
    )
    return _delivered(capture, enqueued, left)


def _delivered(capture, enqueued, left: list[float]) -> float:
    emit(capture)
    assert notification_deliver(delivery_id=enqueued[-1][0]) == "delivered"
    [seconds] = left
    return seconds


def test_a_notifier_without_a_deadline_gets_the_worker_default_of_30_s(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    left = notifier_deadline(install, django_capture_on_commit_callbacks, enqueued)
    assert 29 < left <= 30


def test_a_notifier_inherits_its_extensions_deadline_s(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    left = notifier_deadline(install, django_capture_on_commit_callbacks, enqueued, deadline_s=60)
    assert 59 < left <= 60


def test_a_notifier_gets_the_staff_deadline_override_of_its_extension(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    left: list[float] = []
    install(make_notifier_ext(notify=lambda ctx, event: left.append(seconds_left())))
    RosterEntry.objects.filter(pk="ntfy").update(deadline_seconds=120)
    assert 119 < _delivered(django_capture_on_commit_callbacks, enqueued, left) <= 120


def test_a_notifiers_own_deadline_s_comes_before_its_extensions(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    left = notifier_deadline(
        install, django_capture_on_commit_callbacks, enqueued, deadline_s=60, notifier_deadline_s=7
    )
    assert 6 < left <= 7


def test_a_stopped_extension_s_notifier_is_skipped(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    calls = []
    install(make_notifier_ext(notify=lambda ctx, event: calls.append(event)))
    emit(django_capture_on_commit_callbacks)
    RosterEntry.objects.filter(pk="ntfy").update(status=ExtensionStatus.STOPPED, reason="x")
    assert notification_deliver(delivery_id=enqueued[0][0]) == "skipped"
    assert calls == []


def test_only_notifiers_with_the_grant_admitted_get_deliveries(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    install(make_notifier_ext(notify=lambda ctx, event: None))
    RosterEntry.objects.filter(pk="ntfy").update(admitted_grants=[])
    emit(django_capture_on_commit_callbacks)
    assert NotificationDelivery.objects.count() == 0


@pytest.mark.parametrize(
    "change",
    [{"admitted_grants": []}, {"revision": "another-revision"}],
    ids=["grant withdrawn", "roster at another revision"],
)
def test_a_notifier_unavailable_since_the_emit_is_skipped_without_running(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks, change
):
    calls = []
    install(make_notifier_ext(notify=lambda ctx, event: calls.append(event)))
    emit(django_capture_on_commit_callbacks)
    RosterEntry.objects.filter(pk="ntfy").update(**change)
    assert notification_deliver(delivery_id=enqueued[0][0]) == "skipped"
    assert calls == []
    delivery = NotificationDelivery.objects.get()
    assert (delivery.status, delivery.delivered_at) == (DeliveryStatus.SKIPPED, None)


def test_a_secret_in_a_failure_is_redacted(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    def leaky(ctx, event):
        token = ctx.stores.secrets.get("token")
        raise ConnectionError(f"auth failed for {token}")

    install(make_notifier_ext(notify=leaky))
    from extensions_host.contributions.services.stores import secret_set

    secret_set(extension_id="ntfy", key="token", value="s3cr3t-value-123")
    emit(django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        notification_deliver(delivery_id=enqueued[0][0])
    assert NotificationDelivery.objects.get().last_error == "auth failed for [redacted]"


def test_the_sweep_re_enqueues_lost_and_abandoned_deliveries(
    install, notify_settings, enqueued, fake_clock, django_capture_on_commit_callbacks
):
    install(make_notifier_ext(notify=lambda ctx, event: None))
    emit(django_capture_on_commit_callbacks)
    delivery = NotificationDelivery.objects.get()
    # a worker claimed it and died: in flight, its lease running
    NotificationDelivery.objects.filter(pk=delivery.pk).update(
        status=DeliveryStatus.IN_FLIGHT, attempts=1, next_attempt_at=fake_clock.now_ms() + 1000
    )
    enqueued.clear()
    assert notifications_sweep() == 0
    fake_clock.advance(seconds=2)
    assert notifications_sweep() == 1
    assert enqueued == [(delivery.pk, None)]
    assert notification_deliver(delivery_id=delivery.pk) == "delivered"
    assert NotificationDelivery.objects.get().attempts == 2


def test_an_unknown_type_is_refused():
    from core.errors import HostError

    with pytest.raises(HostError, match="Notification type must be"):
        notification_emit(type="run.exploded", user=None, title="x")


def test_settling_a_run_notifies_its_conversation_owner_after_the_commit(
    install, owner, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    from conversations.services.settle import run_settle
    from tests.background.conftest import claimed_runs

    received = []
    install(make_notifier_ext(notify=lambda ctx, event: received.append(event)))
    answered, unanswered = claimed_runs(owner, 2, "ns")
    with django_capture_on_commit_callbacks(execute=True):
        run_settle(run_id=unanswered, status="unanswered", reason="the model gave up")
    notification = Notification.objects.get()
    assert (notification.type, notification.conversation_id) == ("run.settled", "ns00001")
    assert notification.user == owner.username
    assert notification.body == "unanswered: the model gave up"
    [(delivery_id, _)] = enqueued
    assert notification_deliver(delivery_id=delivery_id) == "delivered"
    [event] = received
    assert (event.type, event.user) == ("run.settled", owner.username)
    assert event.url == "https://hyphae.example/inspect/ns00001"
    assert answered  # the other run stays claimed: one notification per settlement


def test_settling_records_no_notification_when_no_extension_has_a_notifier(
    install, owner, enqueued, django_capture_on_commit_callbacks
):
    from conversations.services.settle import run_settle
    from tests.background.conftest import claimed_runs

    install()
    [run_id] = claimed_runs(owner, 1, "nn")
    with django_capture_on_commit_callbacks(execute=True):
        run_settle(run_id=run_id, status="unanswered", reason="nothing to say")
    assert Notification.objects.count() == 0
    assert enqueued == []


@pytest.mark.parametrize(
    "change",
    [{"admitted_grants": []}, {"status": ExtensionStatus.STOPPED, "reason": "x"}],
    ids=["notify not admitted", "extension stopped"],
)
def test_settling_records_no_notification_when_no_notifier_is_eligible(
    install, owner, enqueued, django_capture_on_commit_callbacks, change
):
    """A loaded extension declares a notifier, but it may not run: nobody would receive it."""
    from conversations.services.settle import run_settle
    from tests.background.conftest import claimed_runs

    install(make_notifier_ext(notify=lambda ctx, event: None))
    RosterEntry.objects.filter(pk="ntfy").update(**change)
    [run_id] = claimed_runs(owner, 1, "ne")
    with django_capture_on_commit_callbacks(execute=True):
        run_settle(run_id=run_id, status="unanswered", reason="nothing to say")
    assert Notification.objects.count() == 0
    assert NotificationDelivery.objects.count() == 0
    assert enqueued == []


def test_without_a_public_url_a_notification_carries_no_link(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    received = []
    install(make_notifier_ext(notify=lambda ctx, event: received.append(event)))
    notify_settings.HOST_PUBLIC_URL = ""
    notification = emit(django_capture_on_commit_callbacks)
    assert notification.url == ""
    assert notification_deliver(delivery_id=enqueued[0][0]) == "delivered"
    assert received[0].url is None
    notify_settings.HOST_PUBLIC_URL = "https://hyphae.example/"
    assert emit(django_capture_on_commit_callbacks).url == "https://hyphae.example/inspect/c1"


def test_a_failed_attempt_does_not_reopen_a_delivery_finished_meanwhile(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    def fail_after_another_worker_delivered(ctx, event):
        # a worker that took over a lapsed claim delivered it while this attempt was failing
        NotificationDelivery.objects.update(status=DeliveryStatus.DELIVERED)
        raise ConnectionError("transport down")

    install(make_notifier_ext(notify=fail_after_another_worker_delivered))
    emit(django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        assert notification_deliver(delivery_id=enqueued[0][0]) == "retry"
    assert NotificationDelivery.objects.get().status == DeliveryStatus.DELIVERED


def test_a_claim_outlasts_the_longest_notifier_deadline_so_the_sweep_leaves_it_alone(
    install, notify_settings, enqueued, fake_clock, django_capture_on_commit_callbacks
):
    due_during_the_call = []

    def slow(ctx, event):
        fake_clock.advance(seconds=MAX_DEADLINE_SECONDS)  # as long as any deadline allows
        due_during_the_call.append(notifications_due())

    install(make_notifier_ext(notify=slow))
    emit(django_capture_on_commit_callbacks)
    assert notification_deliver(delivery_id=enqueued[0][0]) == "delivered"
    assert due_during_the_call == [[]]
    assert NotificationDelivery.objects.get().attempts == 1


# --- pruning finished notifications -----------------------------------------------------------


def stored(title: str, *, age_days: float, statuses: tuple[str, ...] = ("delivered",)):
    """A notification `age_days` old (host clock) with one delivery per status."""
    notification = Notification.objects.create(type="job.failed", title=title)
    Notification.objects.filter(pk=notification.pk).update(
        created_at=clock.now() - dt.timedelta(days=age_days)
    )
    for n, status in enumerate(statuses):
        NotificationDelivery.objects.create(
            notification=notification, extension_id=f"ext{n}", notifier="push", status=status
        )
    return notification


def titles() -> set[str]:
    return set(Notification.objects.values_list("title", flat=True))


def test_finished_notifications_older_than_the_retention_are_pruned_with_their_deliveries(
    db, fake_clock, settings
):
    settings.HOST_NOTIFICATION_RETENTION_DAYS = 30
    stored("old delivered", age_days=31)
    stored("old mixed", age_days=31, statuses=("delivered", "failed", "skipped"))
    stored("old without deliveries", age_days=31, statuses=())
    stored("young", age_days=29)
    assert notifications_prune() == (3, False)
    assert titles() == {"young"}
    assert NotificationDelivery.objects.count() == 1  # the young one's: the others cascaded
    fake_clock.advance(seconds=2 * 86400)  # the young one is now 31 days old
    assert notifications_prune() == (1, False)
    assert not Notification.objects.exists()
    assert not NotificationDelivery.objects.exists()


@pytest.mark.parametrize("open_status", ["pending", "in_flight"])
def test_a_notification_with_a_delivery_still_due_is_kept_however_old(db, fake_clock, open_status):
    """Pending covers a retry waiting for its backoff; in flight, a worker calling it now."""
    kept = stored("open", age_days=400, statuses=("delivered", open_status))
    assert notifications_prune() == (0, False)
    assert titles() == {"open"}
    NotificationDelivery.objects.filter(notification=kept, status=open_status).update(
        status=DeliveryStatus.FAILED
    )
    assert notifications_prune() == (1, False)
    assert not Notification.objects.exists()


def test_the_notification_retention_is_the_setting(db, fake_clock, settings):
    settings.HOST_NOTIFICATION_RETENTION_DAYS = 7
    stored("eight days", age_days=8)
    stored("six days", age_days=6)
    assert notifications_prune() == (1, False)
    assert titles() == {"six days"}


def test_a_notification_prune_deletes_one_page_oldest_first(db, fake_clock):
    for n in range(5):
        stored(f"n{n}", age_days=40 - n)
    assert notifications_prune(limit=2) == (2, True)
    assert titles() == {"n2", "n3", "n4"}


def test_the_notification_prune_task_re_enqueues_itself_while_pages_are_full(
    db, fake_clock, monkeypatch, django_capture_on_commit_callbacks
):
    for n in range(5):
        stored(f"n{n}", age_days=31)
    monkeypatch.setattr(notify, "notifications_prune", partial(notifications_prune, limit=2))
    enqueued: list[int] = []
    monkeypatch.setattr(tasks.notifications_prune, "delay", lambda: enqueued.append(1))
    calls = 0
    while True:
        calls += 1
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            tasks.notifications_prune()
        if not callbacks:
            break
    assert not Notification.objects.exists()
    assert (calls, len(enqueued)) == (3, 2)  # pages of 2, 2, then 1 (not full: no re-enqueue)


def test_a_notification_is_stamped_and_pruned_on_the_host_clock(
    db, fake_clock, settings, django_capture_on_commit_callbacks
):
    settings.HOST_NOTIFICATION_RETENTION_DAYS = 30
    emit(django_capture_on_commit_callbacks)  # no notifier: no delivery to wait for
    fake_clock.advance(seconds=30 * 86400)
    assert notifications_prune() == (0, False)  # exactly the retention: not older yet
    fake_clock.advance(ms=1)
    assert notifications_prune() == (1, False)
