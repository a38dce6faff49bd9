"""Stops, crash counts, records and state migrations: rules the rest of the suite left
unguarded (spec 02 §3, §4, §5, §7)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.db import OperationalError, transaction
from pydantic import BaseModel, field_validator

from core.errors import HostError
from core.models import AuditEntry
from extensions_host import registry
from extensions_host.models import ExtensionRecord, ExtensionStatus, MigrationStaging
from extensions_host.runtime import crashes, run_frame, run_page, secret_sources, stop_listeners
from extensions_host.runtime.stops import REASON_MAX, REDACTED, redact_secrets
from extensions_host.sdk import MAX_RECORD_BYTES, Collection, Extension, ExtensionStop, TimerEvent
from extensions_host.services.migrations import PROBLEM_IN_REASON_MAX

from .conftest import fire_timer, roster, write
from .exts import Item, make_ext


def with_secrets(monkeypatch: pytest.MonkeyPatch, *values: str) -> None:
    """`alpha`'s secret store holds `values`."""
    monkeypatch.setattr(
        "extensions_host.runtime.stops.secret_sources",
        [*secret_sources, lambda ext_id: list(values) if ext_id == "alpha" else []],
    )


def raising(message: str) -> Any:
    def hook(ctx: Any, timer: Any) -> None:
        raise RuntimeError(message)

    return hook


def keep_then_raise(kept: list[Any], message: str) -> Any:
    def hook(ctx: Any, timer: Any) -> None:
        kept.append(ctx)
        raise RuntimeError(message)

    return hook


def listening(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The extensions the stop listeners hear of, in order."""
    heard: list[str] = []
    monkeypatch.setattr(
        "extensions_host.runtime.stops.stop_listeners", [*stop_listeners, heard.append]
    )
    return heard


def keeping(kept: list[Any]) -> Any:
    """An `on_timer` hook that keeps its context, for a write after its frame ended."""

    def hook(ctx: Any, timer: Any) -> None:
        kept.append(ctx)

    return hook


# --- stop reasons: redaction and bound --------------------------------------------------------


@pytest.mark.parametrize(
    "token",
    [
        "sk-ABCDEFGHIJKLMNOPQRSTUVWX",
        "ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "xoxb-1234567890-abcdef",
        "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.c2lnbmF0dXJlMTIz",
    ],
    ids=["openai", "github", "slack", "jwt"],
)
def test_a_token_shaped_value_in_a_reason_is_redacted_without_a_bearer_prefix(install, token):
    install(make_ext("alpha", on_timer=raising(f"upstream said {token} is invalid")))

    fire_timer("alpha")

    assert roster("alpha").reason == f"on_timer defect: upstream said {REDACTED} is invalid"


def test_the_audit_entry_and_the_log_event_of_a_stop_carry_the_redacted_reason(
    install, monkeypatch, caplog
):
    with_secrets(monkeypatch, "s3cr3t-v4lue")
    install(make_ext("alpha", on_timer=raising("upstream refused s3cr3t-v4lue")))

    with caplog.at_level(logging.ERROR, logger="extensions_host.stops"):
        fire_timer("alpha")

    redacted = f"on_timer defect: upstream refused {REDACTED}"
    assert roster("alpha").reason == redacted
    audit = AuditEntry.objects.get(action="extension_stopped", target="alpha")
    assert audit.detail["reason"] == redacted
    (event,) = [r for r in caplog.records if r.getMessage() == "extension_stopped"]
    assert event.reason == redacted


def test_a_broken_secret_source_neither_blocks_a_stop_nor_the_other_sources(install, monkeypatch):
    def broken(extension_id: str) -> list[str]:
        raise RuntimeError("secret store unreachable")

    monkeypatch.setattr(
        "extensions_host.runtime.stops.secret_sources",
        [broken, lambda ext_id: [12345, None, "s3cr3t-v4lue"]],
    )
    install(make_ext("alpha", on_timer=raising("upstream refused s3cr3t-v4lue, 12345")))

    fire_timer("alpha")

    row = roster("alpha")
    assert row.status == ExtensionStatus.STOPPED
    assert row.reason == f"on_timer defect: upstream refused {REDACTED}, 12345"


def test_a_secret_of_four_characters_is_redacted_and_a_shorter_one_is_not(install, monkeypatch):
    with_secrets(monkeypatch, "q7Zx", "k9W")
    install(make_ext("alpha", on_timer=raising("pin q7Zx, code k9W")))

    fire_timer("alpha")

    assert roster("alpha").reason == f"on_timer defect: pin {REDACTED}, code k9W"


def test_a_secret_containing_another_secret_is_redacted_whole(install, monkeypatch):
    with_secrets(monkeypatch, "alpha-key-1234", "alpha-key-1234-and-its-tail")
    install(make_ext("alpha", on_timer=raising("sent alpha-key-1234-and-its-tail upstream")))

    fire_timer("alpha")

    assert roster("alpha").reason == f"on_timer defect: sent {REDACTED} upstream"


def test_a_secret_straddling_the_512_character_bound_is_redacted_before_the_cut(
    install, monkeypatch
):
    secret = "straddling-secret-value-0123456789"
    with_secrets(monkeypatch, secret)
    prefix = "on_timer defect: "
    # the secret starts 20 characters before the bound: cut first, its head would stay in clear
    message = "x" * (REASON_MAX - 20 - len(prefix)) + secret
    install(make_ext("alpha", on_timer=raising(message)))

    fire_timer("alpha")

    reason = roster("alpha").reason
    assert reason == prefix + "x" * (REASON_MAX - 20 - len(prefix)) + REDACTED
    assert secret[:8] not in reason


def test_a_kept_command_result_has_secrets_removed_from_keys_and_nested_lists(db, monkeypatch):
    with_secrets(monkeypatch, "s3cr3t-v4lue")

    kept = redact_secrets(
        {"token s3cr3t-v4lue": [["shown once: s3cr3t-v4lue"], {"n": 1}], "ok": True},
        "alpha",
    )

    assert kept == {
        f"token {REDACTED}": [[f"shown once: {REDACTED}"], {"n": 1}],
        "ok": True,
    }
    assert redact_secrets({"other": "s3cr3t-v4lue"}, "beta") == {"other": "s3cr3t-v4lue"}


# --- the stop record ---------------------------------------------------------------------------


def test_a_second_stop_of_a_stopped_extension_keeps_the_first_and_reports_its_reason(install):
    kept: list[Any] = []
    install(make_ext("alpha", on_timer=keep_then_raise(kept, "first failure")))
    fire_timer("alpha")
    first = roster("alpha")

    # the kept context writes outside any frame: a defect, but the extension is stopped already
    with pytest.raises(ExtensionStop) as raised:
        kept[0].collection("item").put(Item(key="late"))

    assert raised.value.reason == "on_timer defect: first failure"
    row = roster("alpha")
    assert (row.status, row.reason, row.stopped_at, row.stop_event_id) == (
        ExtensionStatus.STOPPED,
        first.reason,
        first.stopped_at,
        first.stop_event_id,
    )
    assert AuditEntry.objects.filter(action="extension_stopped", target="alpha").count() == 1


def test_a_defect_of_an_older_revisions_code_does_not_stop_the_newer_revision(install):
    kept: list[Any] = []
    install(make_ext("alpha", on_timer=keeping(kept)))
    assert fire_timer("alpha").ok
    install(make_ext("alpha", version="2.0.0"))  # a new revision was synced meanwhile

    with pytest.raises(ExtensionStop):
        kept[0].collection("item").put(Item(key="late"))

    row = roster("alpha")
    assert (row.status, row.reason) == (ExtensionStatus.RUNNING, "")
    assert not AuditEntry.objects.filter(action="extension_stopped").exists()


def test_stop_listeners_hear_a_stop_once_and_not_a_stop_that_changed_nothing(install, monkeypatch):
    """A write outside any frame, with no host transaction open, stops in its own commit: the
    listeners hear it at once."""
    heard = listening(monkeypatch)
    kept: list[Any] = []
    install(make_ext("alpha", on_timer=keeping(kept)), make_ext("beta"))
    assert fire_timer("alpha").ok

    for _ in range(2):  # the second finds it stopped already
        with pytest.raises(ExtensionStop):
            kept[0].collection("item").put(Item(key="late"))

    assert heard == ["alpha"]
    assert roster("alpha").status == ExtensionStatus.STOPPED


def test_a_stop_inside_a_host_transaction_is_heard_only_when_it_commits(
    install, monkeypatch, django_capture_on_commit_callbacks
):
    heard = listening(monkeypatch)
    kept: list[Any] = []
    install(make_ext("alpha", on_timer=keeping(kept)))
    assert fire_timer("alpha").ok

    with django_capture_on_commit_callbacks(execute=True):
        with transaction.atomic():
            with pytest.raises(ExtensionStop):
                kept[0].collection("item").put(Item(key="late"))
            assert heard == []
            assert roster("alpha").status == ExtensionStatus.STOPPED

    assert heard == ["alpha"]


def test_a_transient_error_writing_a_stop_in_a_page_retries_the_page_and_the_stop_is_kept(
    install, monkeypatch
):
    from core.services import audit_record

    failed: list[int] = []

    def locked_once(**kwargs: Any) -> Any:
        if not failed:
            failed.append(1)
            raise OperationalError("database is locked")
        return audit_record(**kwargs)

    monkeypatch.setattr("extensions_host.runtime.stops.audit_record", locked_once)
    install(make_ext("alpha", on_timer=raising("boom")))
    hook = registry.get("alpha").definition.hooks.single["on_timer"]
    event = TimerEvent(key="t", due_at=0, fired_at=0)

    def page_body(page: Any) -> str:
        call = lambda ctx: hook(ctx, event)  # noqa: E731
        return run_frame(extension_id="alpha", hook="on_timer", call=call, page=page).status

    assert run_page(page_body, time_limit_s=10) == "stopped"
    assert failed == [1]
    row = roster("alpha")
    assert (row.status, row.reason) == (ExtensionStatus.STOPPED, "on_timer defect: boom")


def test_a_stop_that_cannot_be_written_after_every_retry_is_logged_as_not_durable(
    install, monkeypatch, caplog
):
    def locked(**kwargs: Any) -> None:
        raise OperationalError("database is locked")

    monkeypatch.setattr("extensions_host.runtime.stops.audit_record", locked)
    install(make_ext("alpha", on_timer=raising("boom")))

    with caplog.at_level(logging.ERROR, logger="extensions_host.stops"):
        with pytest.raises(HostError) as raised:
            fire_timer("alpha")

    assert (raised.value.category, raised.value.cause) == ("store", "unavailable")
    assert "alpha" in raised.value.message
    (event,) = [r for r in caplog.records if r.getMessage() == "extension_stopped"]
    assert (event.extension_id, event.durable, event.reason) == (
        "alpha",
        False,
        "on_timer defect: boom",
    )
    assert roster("alpha").status == ExtensionStatus.RUNNING


# --- crash and retry counts --------------------------------------------------------------------


@pytest.fixture
def counts() -> Iterator[None]:
    cache.clear()
    yield
    crashes.clear_deferred()
    cache.clear()


def die(delivery: Any) -> None:
    """A delivery whose process dies: its frame never finishes."""
    delivery.__enter__()


def test_deliveries_of_different_items_are_counted_apart(counts):
    first = {"extension_id": "x", "hook": "on_timer", "item": "a@1"}
    second = {**first, "item": "b@1"}
    dead = [crashes.delivery_counted(**first) for _ in range(3)]
    for delivery in dead:
        die(delivery)

    with crashes.delivery_counted(**second) as exhausted:
        assert not exhausted
    assert crashes.unfinished_deliveries(**first) == 3
    assert crashes.unfinished_deliveries(**second) == 0


def test_deaths_after_a_finished_delivery_on_the_same_thread_still_add_up(counts):
    """A clear already sent is not sent again: it would wipe the deaths counted since."""
    key = {"extension_id": "x", "hook": "on_timer", "item": "k@1"}
    with crashes.delivery_counted(**key) as exhausted:
        assert not exhausted
    dead = [crashes.delivery_counted(**key) for _ in range(3)]
    for delivery in dead:
        die(delivery)

    assert crashes.unfinished_deliveries(**key) == 3
    with crashes.delivery_counted(**key) as exhausted:
        assert exhausted


def test_a_deferred_clear_waits_for_the_next_count_or_the_end_of_the_page(counts):
    key = {"extension_id": "x", "hook": "on_timer", "item": "k@1"}
    other = {**key, "item": "other@1"}
    with crashes.delivery_counted(**key, deferred=True):
        pass
    assert crashes.unfinished_deliveries(**key) == 1  # pending while host code runs

    with crashes.delivery_counted(**other, deferred=True):
        assert crashes.unfinished_deliveries(**key) == 0  # sent with the next count
    crashes.clear_deferred()
    assert crashes.unfinished_deliveries(**other) == 0


def test_retries_asked_counts_retries_in_a_row_and_anything_else_clears_it(counts):
    key = {"extension_id": "x", "hook": "prompt", "item": "c1"}
    assert crashes.retries_asked(**key) == 0

    crashes.retry_noted(**key, retried=True)
    crashes.retry_noted(**key, retried=True)
    assert crashes.retries_asked(**key) == 2
    assert crashes.retries_asked(**{**key, "item": "c2"}) == 0
    assert crashes.unfinished_deliveries(**key) == 0  # a count apart from the crash count

    crashes.retry_noted(**key, retried=False)
    assert crashes.retries_asked(**key) == 0


# --- records ------------------------------------------------------------------------------------


def stored_keys(extension_id: str = "alpha") -> list[str]:
    return sorted(
        ExtensionRecord.objects.filter(extension_id=extension_id).values_list("key", flat=True)
    )


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")
def test_a_model_instance_changed_after_validation_is_an_encode_error(install):
    """What would be stored must decode again: an instance whose field was assigned a value of
    the wrong type is refused on write, not found undecodable on every later read."""
    install(make_ext("alpha"))

    def body(ctx: Any) -> None:
        item = Item(key="k")
        item.n = "many"  # type: ignore[assignment]  # no validation on assignment
        ctx.collection("item").put(item)

    outcome = write(body)

    assert outcome.status == "failed"
    assert outcome.error.kind == "encode"
    assert stored_keys() == []


@pytest.mark.parametrize(
    "body",
    [
        lambda c: c.collection("item").page(limit=True),
        lambda c: c.collection("item").page(after=""),
        lambda c: c.collection("item").page(index=""),
    ],
    ids=["boolean limit", "empty cursor", "empty index"],
)
def test_a_page_with_an_out_of_bounds_argument_is_a_bound_error_not_a_full_page(install, body):
    install(make_ext("alpha"))
    assert write(lambda c: c.collection("item").put(Item(key="k", tag="t"))).ok

    outcome = write(body)

    assert outcome.status == "failed"
    assert outcome.error.kind == "bound"


def test_replacing_a_record_moves_it_to_its_new_index(install):
    install(make_ext("alpha"))
    assert write(lambda c: c.collection("item").put(Item(key="k", tag="old"))).ok
    assert write(lambda c: c.collection("item").put(Item(key="k", n=1, tag="new"))).ok

    def pages(ctx: Any) -> dict[str, list[str]]:
        items = ctx.collection("item")
        return {tag: [i.key for i in items.page(index=tag)] for tag in ("old", "new")}

    assert write(pages).value == {"old": [], "new": ["k"]}
    assert list(ExtensionRecord.objects.values_list("index", flat=True)) == ["new"]


def test_a_page_and_a_get_read_only_their_own_collection(install):
    ext = Extension(
        id="alpha",
        version="1.0.0",
        grants={"state"},
        collections={
            "item": Collection(Item, key=lambda i: i.key, index=lambda i: i.tag),
            "other": Collection(Item, key=lambda i: i.key, index=lambda i: i.tag),
        },
    )
    install(ext)

    def fill(ctx: Any) -> None:
        ctx.collection("item").put(Item(key="a", tag="t"))
        ctx.collection("other").put(Item(key="b", n=2, tag="t"))

    assert write(fill).ok

    def read(ctx: Any) -> Any:
        items = ctx.collection("item")
        return (
            [i.key for i in items.page()],
            [i.key for i in items.page(index="t")],
            items.get("b"),
            ctx.collection("other").get("b").n,
        )

    assert write(read).value == (["a"], ["a"], None, 2)


# --- state migrations ---------------------------------------------------------------------------


class Note(BaseModel):
    id: str
    text: str
    tag: str = ""


def notes(state_version: int, **steps: Any) -> Extension:
    """`notes` at `state_version`, with steps `s<from>=fn`; its notes are indexed by tag."""
    return Extension(
        id="notes",
        version=f"{state_version}.0.0",
        grants={"state"},
        state_version=state_version,
        collections={"note": Collection(Note, key=lambda n: n.id, index=lambda n: n.tag or None)},
        migrations={int(name[1:]): step for name, step in steps.items()},
    )


def seed_notes(install) -> list[tuple[str, str, str | None, str]]:
    install(notes(1))

    def fill(ctx: Any) -> None:
        for key in ("a", "b"):
            ctx.collection("note").put(Note(id=key, text=f"note {key}"))

    assert run_frame(extension_id="notes", hook="test", call=fill).ok
    return stored_notes()


def stored_notes() -> list[tuple[str, str, str | None, str]]:
    return list(
        ExtensionRecord.objects.filter(extension_id="notes")
        .order_by("collection", "key")
        .values_list("collection", "key", "index", "value")
    )


def stopped_with(reason: str) -> None:
    row = roster("notes")
    assert (row.status, row.reason, row.failing_hook, row.state_version) == (
        ExtensionStatus.STOPPED,
        reason,
        "migration",
        1,
    )


def test_a_step_returning_one_row_instead_of_a_list_stops_saying_so(install):
    before = seed_notes(install)

    install(notes(2, s1=lambda row: row))  # the row itself, not [row]

    assert stored_notes() == before
    stopped_with("migration: state migration from version 1 must return a list of rows")


def test_a_migrated_row_with_a_field_beyond_collection_key_and_value_stops_the_migration(
    install,
):
    before = seed_notes(install)

    install(notes(2, s1=lambda row: [row | {"index": "mine"}]))  # the host derives the index

    assert stored_notes() == before
    stopped_with("migration: a migrated row must be {collection, key, value}")


def test_a_migrated_record_over_1_mib_stops_the_migration(install):
    before = seed_notes(install)

    def pad(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [row | {"value": row["value"] | {"text": "x" * MAX_RECORD_BYTES}}]

    install(notes(2, s1=pad))

    assert stored_notes() == before
    stopped_with("migration: a migrated note record exceeds 1 MiB")


def test_a_stored_record_that_is_not_json_stops_the_migration_and_is_kept(install):
    """Skipping it would lose it: the swap replaces every record of the extension."""
    seed_notes(install)
    ExtensionRecord.objects.filter(extension_id="notes", key="a").update(value="{not json")
    before = stored_notes()

    install(notes(2, s1=lambda row: [row]))

    assert stored_notes() == before
    stopped_with("migration: stored note record a is not JSON")


def test_a_migration_that_succeeds_leaves_no_staged_copy_behind(install):
    seed_notes(install)

    def tag(row: dict[str, Any]) -> list[dict[str, Any]]:
        return [row | {"value": row["value"] | {"tag": "v2"}}]

    install(notes(2, s1=tag))

    assert [(key, index) for _, key, index, _ in stored_notes()] == [("a", "v2"), ("b", "v2")]
    assert not MigrationStaging.objects.exists()
    assert roster("notes").state_version == 2


class Strict(BaseModel):
    id: str
    text: str

    @field_validator("text")
    @classmethod
    def short(cls, value: str) -> str:
        if len(value) > 10:
            raise ValueError(f"text is too long: {value}")
        return value


def test_a_long_validation_problem_is_redacted_then_cut_in_the_reason(install):
    from extensions_host.runtime import detached_context

    secret = "correct horse battery staple zebra 42"
    seed_notes(install)
    detached_context(extension_id="notes", hook="test").stores.secrets.set("key", secret)
    ext = Extension(
        id="notes",
        version="2.0.0",
        grants={"state"},
        state_version=2,
        collections={"note": Collection(Strict, key=lambda s: s.id)},
        migrations={1: lambda row: [row | {"value": {"id": row["key"], "text": text}}]},
    )
    # the problem is `text: Value error, text is too long: <text>`; the secret straddles the
    # cut of the problem quoted in the reason
    head = "text: Value error, text is too long: "
    text = "y" * (PROBLEM_IN_REASON_MAX - len(head) - 10) + secret + "z" * 300

    install(ext)

    problem = head + "y" * (PROBLEM_IN_REASON_MAX - len(head) - 10) + REDACTED
    problem = problem[: PROBLEM_IN_REASON_MAX - 1] + "…"
    reason = roster("notes").reason
    assert reason == f"migration: a migrated note record 'a' is invalid: {problem}"
    assert not any(secret[:n] in reason for n in range(6, len(secret)))


def test_a_stop_while_auto_resume_is_off_host_wide_schedules_no_auto_resume(
    install, fake_clock, settings
):
    from extensions_host.services.roster import roster_auto_resume_due

    settings.HOST_AUTO_RESUME = False
    install(make_ext("alpha", on_timer=raising("boom")))
    fire_timer("alpha")

    assert roster("alpha").next_auto_resume_at is None

    settings.HOST_AUTO_RESUME = True
    fake_clock.advance(seconds=3600)
    assert roster_auto_resume_due() == []
    assert roster("alpha").status == ExtensionStatus.STOPPED


def test_an_auto_resume_whose_migration_fails_again_is_not_scheduled_again(install, fake_clock):
    from extensions_host.services.roster import roster_auto_resume_due

    seed_notes(install)

    def broken(row: dict[str, Any]) -> list[dict[str, Any]]:
        raise ValueError("still broken")

    install(notes(2, s1=broken))
    reason = "migration: state migration from version 1 failed: ValueError: still broken"
    stopped_with(reason)
    assert roster("notes").next_auto_resume_at is not None

    fake_clock.advance(seconds=61)
    assert roster_auto_resume_due() == []  # tried: the migration fails again

    row = roster("notes")
    assert (row.status, row.reason, row.next_auto_resume_at) == (
        ExtensionStatus.STOPPED,
        reason,
        None,
    )
    fake_clock.advance(seconds=3600)
    assert roster_auto_resume_due() == []
    assert AuditEntry.objects.filter(action="extension_auto_resumed").count() == 0


def stopped_with_newer_stored_state(install: Any) -> Any:
    """`alpha` stopped, and its stored state written by a newer release meanwhile."""
    install(make_ext("alpha", on_timer=raising("boom")))
    fire_timer("alpha")
    row = roster("alpha")
    row.state_version = row.state_version + 1
    row.save()
    return row


def test_a_resume_refused_by_newer_stored_state_names_the_migration_as_the_failing_hook(
    install,
):
    from extensions_host.services.roster import extension_resume

    row = stopped_with_newer_stored_state(install)

    resumed = extension_resume(extension_id="alpha", actor="staff")

    assert (resumed.status, resumed.failing_hook) == (ExtensionStatus.STOPPED, "migration")
    assert roster("alpha").reason == (
        f"state: stored state version {row.state_version} is newer than declared version "
        f"{row.state_version - 1}"
    )


def test_a_sync_of_a_stopped_extension_whose_state_cannot_open_gives_that_as_the_reason(
    install,
):
    from extensions_host.services.roster import roster_sync

    stopped_with_newer_stored_state(install)

    roster_sync()  # a process restart at the same revision: kept stopped

    row = roster("alpha")
    assert (row.status, row.failing_hook) == (ExtensionStatus.STOPPED, "migration")
    assert row.reason == row.last_error
    assert row.reason.startswith("state: stored state version ")


def test_a_migration_replaces_only_its_own_extensions_records(install):
    install(notes(1), make_ext("beta"))
    assert run_frame(
        extension_id="notes",
        hook="test",
        call=lambda ctx: ctx.collection("note").put(Note(id="a", text="note a")),
    ).ok
    assert write(lambda c: c.collection("item").put(Item(key="x", n=7)), "beta").ok

    install(notes(2, s1=lambda row: [row]), make_ext("beta"))

    assert [key for _, key, _, _ in stored_notes()] == ["a"]
    assert stored_keys("beta") == ["x"]
    assert write(lambda c: c.collection("item").get("x").n, "beta").value == 7
