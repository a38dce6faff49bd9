"""Rules of notifications, the stores, slash commands, meta, providers, skills, bundles and the
user directory that a mutation sweep found no test protecting."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from conversations.models import Conversation, Run, RunStatus
from core import clock
from core.auth import user_principal
from core.errors import HostError
from core.validation import json_size
from extensions_host.contributions.models import (
    DeliveryStatus,
    ExtensionSecret,
    ExtensionSettings,
    Notification,
    NotificationDelivery,
    NotifierHealth,
)
from extensions_host.contributions.services import stores
from extensions_host.contributions.services.notify import (
    Eligible,
    backoff_seconds,
    notification_deliver,
    notification_emit,
    notification_run_settled,
    notifications_due,
    notifier_health,
)
from extensions_host.contributions.services.slash import slash_command_run
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.sdk import Extension, Notifier, StateError

from .exts import ctx_of, make_host_ext, make_notifier_ext, make_slash_ext


def emitted(capture, **overrides) -> Notification:
    fields = {"type": "job.failed", "user": "owner", "title": "Job failed"} | overrides
    with capture(execute=True):
        return notification_emit(**fields)


# --- notifications: what is recorded ----------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "given", "stored"),
    [
        ("conversation_id", "c" * 70, 64),
        ("job_id", "j" * 250, 200),
        ("user", "u" * 160, 150),
        ("title", "t" * 300, 200),
        ("body", "b" * 5000, 4000),
    ],
)
def test_a_notification_field_is_cut_to_its_column_bound(
    db, django_capture_on_commit_callbacks, field, given, stored
):
    notification = emitted(django_capture_on_commit_callbacks, **{field: given})
    notification.refresh_from_db()
    assert len(getattr(notification, field)) == stored


def test_a_notification_without_a_title_is_titled_by_its_type(
    db, django_capture_on_commit_callbacks
):
    assert emitted(django_capture_on_commit_callbacks, title="").title == "job.failed"


def test_a_notification_without_a_recipient_reaches_the_notifier_with_no_user(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    received = []
    install(make_notifier_ext(notify=lambda ctx, event: received.append(event)))
    emitted(django_capture_on_commit_callbacks, user=None)
    assert notification_deliver(delivery_id=enqueued[0][0]) == "delivered"
    assert received[0].user is None


def test_an_emit_given_its_notifiers_schedules_deliveries_to_those_only(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    install(
        make_notifier_ext("ntfy", notify=lambda ctx, event: None),
        make_notifier_ext("mail", notify=lambda ctx, event: None),
    )
    notification = emitted(django_capture_on_commit_callbacks, notifiers=[Eligible("mail", "push")])
    assert list(notification.deliveries.values_list("extension_id", flat=True)) == ["mail"]
    assert emitted(django_capture_on_commit_callbacks, notifiers=[]).deliveries.count() == 0


def test_each_delivery_calls_the_notifier_it_names(
    install, notify_settings, enqueued, django_capture_on_commit_callbacks
):
    called = []
    install(
        Extension(
            id="ntfy",
            version="1.0.0",
            grants={"notify"},
            notifiers=[
                Notifier("push", notify=lambda ctx, event: called.append("push")),
                Notifier("sms", notify=lambda ctx, event: called.append("sms")),
            ],
        )
    )
    emitted(django_capture_on_commit_callbacks)
    for delivery in NotificationDelivery.objects.order_by("notifier"):
        assert notification_deliver(delivery_id=delivery.pk) == "delivered"
    assert called == ["push", "sms"]


# --- retries and health ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempts", "seconds"), [(1, 2.0), (2, 4.0), (5, 32.0), (6, 60.0), (20, 60.0)]
)
def test_the_backoff_doubles_per_attempt_up_to_its_cap(notify_settings, attempts, seconds):
    assert backoff_seconds(attempts) == seconds


def failing_once(calls: list[int]):
    def notify(ctx, event):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("blip")

    return notify


def test_a_failure_that_will_be_retried_counts_in_health_without_degrading(
    install, notify_settings, enqueued, fake_clock, django_capture_on_commit_callbacks
):
    install(make_notifier_ext(notify=failing_once([])))
    emitted(django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        assert notification_deliver(delivery_id=enqueued[0][0]) == "retry"
    health = NotifierHealth.objects.get()
    assert (health.status, health.consecutive_failures, health.failed_deliveries) == ("ok", 1, 0)
    assert (health.last_error, health.last_failure_at) == ("blip", fake_clock.now_ms())
    [listed] = notifier_health()
    assert (listed["status"], listed["consecutive_failures"], listed["last_error"]) == (
        "ok",
        1,
        "blip",
    )


def test_the_next_success_makes_a_degraded_notifier_ok_again(
    install, notify_settings, enqueued, fake_clock, django_capture_on_commit_callbacks
):
    notify_settings.HOST_NOTIFY_MAX_ATTEMPTS = 1
    install(make_notifier_ext(notify=failing_once([])))
    emitted(django_capture_on_commit_callbacks)
    assert notification_deliver(delivery_id=enqueued[0][0]) == "failed"
    assert NotifierHealth.objects.get().status == "degraded"
    fake_clock.advance(seconds=5)
    emitted(django_capture_on_commit_callbacks)
    assert notification_deliver(delivery_id=enqueued[-1][0]) == "delivered"
    health = NotifierHealth.objects.get()
    assert (health.status, health.consecutive_failures) == ("ok", 0)
    assert (health.failed_deliveries, health.delivered) == (1, 1)
    assert health.last_success_at == fake_clock.now_ms()
    [listed] = notifier_health()
    assert (listed["status"], listed["delivered"], listed["failed_deliveries"]) == ("ok", 1, 1)


def test_a_notifier_that_never_delivered_reads_ok_with_no_counts(install):
    install(make_notifier_ext(notify=lambda ctx, event: None))
    assert notifier_health() == [
        {
            "extension_id": "ntfy",
            "name": "push",
            "status": "ok",
            "consecutive_failures": 0,
            "failed_deliveries": 0,
            "delivered": 0,
            "last_error": "",
        }
    ]


# --- the sweep's due deliveries ---------------------------------------------------------------


def pending_due_in(notification: Notification, offsets_ms: list[int]) -> list[int]:
    now = clock.now_ms()
    return [
        NotificationDelivery.objects.create(
            notification=notification,
            extension_id=f"ext{n}",
            notifier="push",
            status=DeliveryStatus.PENDING,
            next_attempt_at=now + offset,
        ).pk
        for n, offset in enumerate(offsets_ms)
    ]


def test_due_deliveries_come_longest_waiting_first_one_page_at_a_time(db, fake_clock):
    notification = Notification.objects.create(type="job.failed", title="x")
    later, earliest, middle = pending_due_in(notification, [-1000, -3000, -2000])
    assert notifications_due(limit=2) == [earliest, middle]
    assert notifications_due() == [earliest, middle, later]


def test_a_delivery_is_due_at_exactly_its_next_attempt_time(db, fake_clock):
    notification = Notification.objects.create(type="job.failed", title="x")
    at_now, _in_one_ms = pending_due_in(notification, [0, 1])
    assert notifications_due() == [at_now]


# --- run.settled -----------------------------------------------------------------------------


def settled_run(conversation, *, name: str, outcome: str, reason: str) -> int:
    chat = conversation("rs1")
    chat.name = name
    chat.save(update_fields=["name"])
    now = clock.now()
    return Run.objects.create(
        conversation=chat,
        status=RunStatus.RELEASED,
        claimed_at=now,
        lease_expires_at=now,
        outcome=outcome,
        reason=reason,
    ).pk


@pytest.mark.parametrize(
    ("name", "reason", "title", "body"),
    [
        ("Trip plans", "", "Run settled in Trip plans", "answered"),
        ("", "out of ideas", "Run settled in rs1", "answered: out of ideas"),
    ],
    ids=["named, no reason", "unnamed, with a reason"],
)
def test_a_run_settled_notification_names_the_conversation_and_the_outcome(
    install, conversation, enqueued, django_capture_on_commit_callbacks, name, reason, title, body
):
    install(make_notifier_ext(notify=lambda ctx, event: None))
    run_id = settled_run(conversation, name=name, outcome="answered", reason=reason)
    with django_capture_on_commit_callbacks(execute=True):
        notification = notification_run_settled(run_id=run_id)
    assert (notification.title, notification.body) == (title, body)


def test_no_run_settled_notification_for_a_run_that_does_not_exist(install, enqueued):
    install(make_notifier_ext(notify=lambda ctx, event: None))
    assert notification_run_settled(run_id=987654) is None
    assert not Notification.objects.exists()


# --- stores ----------------------------------------------------------------------------------


@pytest.fixture
def vault(install):
    install(make_host_ext("vault", grants={"state"}))
    return ctx_of("vault")


@pytest.mark.parametrize(
    ("key", "kept"),
    [("k" * 128, True), ("k" * 129, False), ("", False), (123, False)],
    ids=["128 characters", "129 characters", "empty", "not a string"],
)
def test_a_secret_key_is_1_to_128_characters_of_text(vault, key, kept):
    if kept:
        vault.stores.secrets.set(key, "v")
        assert vault.stores.secrets.keys() == [key]
        return
    with pytest.raises(StateError, match="Secret key must be"):
        vault.stores.secrets.set(key, "v")
    assert not ExtensionSecret.objects.exists()


def test_a_secret_value_of_exactly_64_kib_is_kept(vault):
    value = "v" * 64 * 1024
    vault.stores.secrets.set("big", value)
    assert vault.stores.secrets.get("big") == value


def test_a_secret_value_that_is_not_a_string_is_refused(vault):
    with pytest.raises(StateError, match="Secret value must be"):
        vault.stores.secrets.set("k", 12345)
    assert not ExtensionSecret.objects.exists()


def test_a_secret_no_key_can_open_does_not_hide_the_others_from_redaction(vault):
    """The unreadable secret sorts first (secrets are ordered by key)."""
    ExtensionSecret.objects.create(
        extension_id="vault", key="a_lost", ciphertext="gAAAA-not-ours", key_id="gone"
    )
    vault.stores.secrets.set("z_kept", "visible-secret")
    assert stores.secret_values("vault") == ["visible-secret"]


def test_reencryption_in_batches_visits_every_row_once(vault, settings):
    """Rows alternate between an old key and a key nobody has, two to a batch, so a batch
    both ends on an unreadable row and is followed by another."""
    settings.HOST_SECRET_KEYS_OLD = []
    settings.HOST_SECRET_KEY = "old-key-for-the-batches"
    for n in range(5):
        if n % 2:
            ExtensionSecret.objects.create(
                extension_id="vault", key=f"k{n}", ciphertext="gAAAA-lost", key_id="gone"
            )
        else:
            vault.stores.secrets.set(f"k{n}", f"value {n}")
    settings.HOST_SECRET_KEYS_OLD = ["old-key-for-the-batches"]
    settings.HOST_SECRET_KEY = "the-new-key-after-rotation"
    assert stores.secrets_reencrypt(batch=2) == {"reencrypted": 3, "unreadable": 2}
    _, current, _ = stores.keyring()
    assert ExtensionSecret.objects.filter(key_id=current).count() == 3


def test_stored_settings_that_are_not_an_object_read_as_empty(vault):
    ExtensionSettings.objects.create(extension_id="vault", value=["not", "an", "object"])
    assert vault.stores.settings.get() == {}


def nested(depth: int) -> dict[str, Any]:
    """An object whose innermost value is `depth` levels below the top."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def padded(size: int) -> dict[str, str]:
    """An object whose compact JSON encoding is `size` bytes."""
    return {"k": "x" * (size - json_size({"k": ""}))}


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        (nested(32), True),
        (nested(33), False),
        (padded(64 * 1024), True),
        (padded(64 * 1024 + 1), False),
    ],
    ids=["32 deep", "33 deep", "64 KiB", "64 KiB + 1"],
)
def test_settings_are_bounded_at_32_levels_and_64_kib(vault, value, kept):
    if kept:
        assert stores.settings_validate(extension_id="vault", value=value) == value
        return
    with pytest.raises(HostError, match="Extension settings are invalid"):
        stores.settings_validate(extension_id="vault", value=value)


def test_an_extensions_directories_are_private_to_the_host_user(vault, settings, tmp_path):
    settings.HOST_DATA_DIR = str(tmp_path)
    for kind in ("data", "cache", "state"):
        path = Path(getattr(vault.stores.paths, kind))
        assert path == tmp_path / kind / "vault"
        assert stat.S_IMODE(path.stat().st_mode) == 0o700


@pytest.mark.parametrize(
    "read",
    [lambda vault: vault.stores.secrets.keys(), lambda vault: vault.stores.settings.get()],
    ids=["secret keys", "settings"],
)
def test_another_extensions_frame_cannot_read_its_secret_keys_or_settings(vault, install, read):
    vault.stores.secrets.set("api_key", "s3cret")
    vault.stores.settings.set({"channel": "#ops"})
    install(make_host_ext("reader", grants={"state"}))
    stolen: list[Any] = []
    with pytest.raises(BaseException, match="another extension's context"):
        ctx_of("reader").update(lambda ctx: stolen.append(read(vault)))
    assert stolen == []


def test_secrets_of_the_same_key_stay_apart_between_extensions(install):
    install(make_host_ext("vault", grants={"state"}), make_host_ext("other", grants={"state"}))
    vault, other = ctx_of("vault"), ctx_of("other")
    vault.stores.secrets.set("token", "vault-token")
    other.stores.secrets.set("token", "other-token")
    other.stores.secrets.set("only_other", "x")
    vault.stores.secrets.delete("token")
    assert other.stores.secrets.get("token") == "other-token"
    assert vault.stores.secrets.keys() == []
    assert stores.secret_values("vault") == []


def test_settings_set_for_an_extension_gone_from_the_roster_is_a_state_error(vault):
    RosterEntry.objects.filter(pk="vault").delete()
    with pytest.raises(StateError, match="Extension is not in the roster"):
        vault.stores.settings.set({"channel": "#ops"})


# --- slash commands --------------------------------------------------------------------------


def slash(client, cid: str, name: str, args: str = ""):
    return client.post(f"/v1/conversations/{cid}/commands/{name}", {"args": args}, format="json")


def test_an_extension_command_gets_its_arguments_as_typed_and_the_callers_admin_flag(
    install, api, staff, conversation
):
    seen = []

    def record(ctx, invocation):
        seen.append((invocation.args, invocation.admin, ctx.caller.admin))

    install(make_slash_ext(run=record))
    conversation("c1", who=staff)
    assert slash(api(staff), "c1", "todo", "  buy milk ").json() == {}
    assert seen == [("  buy milk ", True, True)]


@pytest.mark.parametrize(
    ("returned", "notice"),
    [("n" * 2500, "n" * 2000), ({"notice": "done"}, "done")],
    ids=["cut to 2000", "as given"],
)
def test_an_extension_commands_notice_is_at_most_2000_characters(
    install, api, owner, conversation, returned, notice
):
    install(make_slash_ext(run=lambda ctx, invocation: returned))
    conversation("c1")
    assert slash(api(owner), "c1", "todo").json() == {"notice": notice}


def test_a_notice_that_is_not_text_is_a_defect_of_the_command(install, api, owner, conversation):
    install(make_slash_ext(run=lambda ctx, invocation: {"notice": 5}))
    conversation("c1")
    assert slash(api(owner), "c1", "todo").status_code == 503
    row = RosterEntry.objects.get(pk="todo")
    assert (row.status, row.reason) == (
        ExtensionStatus.STOPPED,
        "slash todo defect: Slash command result must be {notice} or a string",
    )


@pytest.mark.parametrize(
    ("sharing", "cause"),
    [("private", "not_found"), ("users", "forbidden"), ("public", "forbidden")],
)
def test_the_slash_service_runs_a_command_only_for_the_conversations_owner(
    install, member, conversation, sharing, cause
):
    """Its own rule, whoever calls it: the API checks access first only to answer 404/403
    before reading the body."""
    seen = []
    install(make_slash_ext(run=lambda ctx, invocation: seen.append(invocation.name)))
    conversation("c1", sharing=sharing)

    with pytest.raises(HostError) as refused:
        slash_command_run(
            principal=user_principal(member, "token"), conversation_id="c1", name="todo", args=""
        )

    assert refused.value.cause == cause
    assert seen == []


def test_help_shows_an_arguments_hint_only_for_commands_that_take_one(
    install, api, owner, conversation
):
    conversation("c1")
    lines = slash(api(owner), "c1", "help").json()["notice"].splitlines()
    assert lines[0] == "/help — List the commands"
    assert "/share private|users|public — Share the conversation" in lines


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("rename", "r" * 201, "rename needs the new name (1..200 characters)"),
        ("share", "everyone", "share needs one of private, users, public"),
        ("fork", "", "Nothing to fork: the conversation has no entries yet"),
    ],
)
def test_a_core_command_refuses_what_it_cannot_do_with_its_message(
    api, owner, conversation, name, args, message
):
    conversation("c1")
    response = slash(api(owner), "c1", name, args)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == message


def test_rename_takes_a_name_of_200_characters(api, owner, conversation):
    conversation("c1")
    assert slash(api(owner), "c1", "rename", "r" * 200).status_code == 200
    assert Conversation.objects.get(pk="c1").name == "r" * 200
