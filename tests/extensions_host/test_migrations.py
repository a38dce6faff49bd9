"""State migrations in sync_roster (spec 02 §5)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import ProgrammingError, connection
from pydantic import BaseModel

from core.validation import PROBLEM_NOT_UNICODE, PROBLEM_NUL
from extensions_host import registry
from extensions_host.models import ExtensionRecord, ExtensionStatus, RosterEntry
from extensions_host.runtime import run_frame
from extensions_host.runtime.stops import REASON_MAX
from extensions_host.sdk import Collection, Extension
from extensions_host.services import migrations
from extensions_host.services.quotas import usage_totals
from extensions_host.services.roster import roster_sync

from .conftest import roster
from .exts import Item, make_ext


class TodoV1(BaseModel):
    id: str
    text: str  # "first|second": two tasks in one record


class Task(BaseModel):
    id: str
    text: str
    parent: str


def split(row: dict[str, Any]) -> list[dict[str, Any]]:
    """v1 → v2: one todo holding two texts becomes two todos."""
    first, second = row["value"]["text"].split("|")
    return [
        {
            "collection": "todo",
            "key": f"{row['key']}-1",
            "value": {"id": f"{row['key']}-1", "text": first, "parent": row["key"]},
        },
        {
            "collection": "todo",
            "key": f"{row['key']}-2",
            "value": {"id": f"{row['key']}-2", "text": second, "parent": row["key"]},
        },
    ]


def rename(row: dict[str, Any]) -> list[dict[str, Any]]:
    """v2 → v3: the collection `todo` is now called `task`."""
    return [row | {"collection": "task"}]


def v1() -> Extension:
    return Extension(
        id="todos",
        version="1.0.0",
        grants={"state"},
        state_version=1,
        collections={"todo": Collection(TodoV1, key=lambda t: t.id)},
    )


def v3(**migrations: Any) -> Extension:
    steps = {1: split, 2: rename} | {int(k[1:]): v for k, v in migrations.items()}
    return Extension(
        id="todos",
        version="3.0.0",
        grants={"state"},
        state_version=3,
        collections={"task": Collection(Task, key=lambda t: t.id, index=lambda t: t.parent)},
        migrations=steps,
    )


def seed_v1(install) -> list[tuple[str, str, str]]:
    install(v1(), make_ext("beta"))

    def fill(ctx: Any) -> None:
        for key, text in [("a", "buy|cook"), ("b", "read|write")]:
            ctx.collection("todo").put(TodoV1(id=key, text=text))

    assert run_frame(extension_id="todos", hook="test", call=fill).ok
    assert run_frame(
        extension_id="beta", hook="test", call=lambda c: c.collection("item").put(Item(key="x"))
    ).ok
    return snapshot("todos")


def snapshot(extension_id: str) -> list[tuple[str, str, str]]:
    return list(
        ExtensionRecord.objects.filter(extension_id=extension_id)
        .order_by("collection", "key")
        .values_list("collection", "key", "value")
    )


def test_v1_to_v3_splits_records_and_renames_the_collection(install):
    seed_v1(install)

    install(v3(), make_ext("beta"))

    rows = ExtensionRecord.objects.filter(extension_id="todos").order_by("key")
    assert [(r.collection, r.key, r.index) for r in rows] == [
        ("task", "a-1", "a"),
        ("task", "a-2", "a"),
        ("task", "b-1", "b"),
        ("task", "b-2", "b"),
    ]
    assert [json.loads(r.value)["text"] for r in rows] == ["buy", "cook", "read", "write"]
    row = roster("todos")
    assert (row.status, row.state_version, row.ledger_revision) == (
        ExtensionStatus.RUNNING,
        3,
        registry.get("todos").revision,
    )
    assert usage_totals(extension_id="todos") == (4, sum(len(r.value.encode()) for r in rows))


def test_a_failing_step_leaves_every_record_untouched_and_stops_only_that_extension(install):
    before = seed_v1(install)

    def broken(row: dict[str, Any]) -> list[dict[str, Any]]:
        raise ValueError("cannot rename")

    install(v3(s2=broken), make_ext("beta"))

    assert snapshot("todos") == before
    row = roster("todos")
    assert row.status == ExtensionStatus.STOPPED
    assert row.reason == (
        "migration: state migration from version 2 failed: ValueError: cannot rename"
    )
    assert row.failing_hook == "migration"
    assert row.state_version == 1
    assert roster("beta").status == ExtensionStatus.RUNNING


def test_a_result_naming_an_undeclared_collection_or_invalid_value_writes_nothing(install):
    before = seed_v1(install)

    install(v3(s2=lambda row: [row]), make_ext("beta"))  # forgets the rename

    assert snapshot("todos") == before
    assert roster("todos").reason == (
        "migration: a migrated record names an undeclared collection 'todo'"
    )

    install(v3(s2=lambda row: [row | {"collection": "task", "value": {"id": 1}}]), make_ext("beta"))
    assert snapshot("todos") == before
    assert roster("todos").reason == (
        "migration: a migrated task record 'a-1' is invalid: id: Input should be a valid string"
        " (and 2 more)"
    )


def test_a_step_raising_a_key_error_names_the_error_type(install):
    before = seed_v1(install)

    install(v3(s2=lambda row: [{**row, "value": {"body": row["value"]["txt"]}}]))

    assert snapshot("todos") == before
    assert roster("todos").reason == (
        "migration: state migration from version 2 failed: KeyError: 'txt'"
    )


def test_an_invalid_migrated_record_names_its_key_and_first_field(install):
    seed_v1(install)

    def drop_parent(row: dict[str, Any]) -> list[dict[str, Any]]:
        value = {k: v for k, v in row["value"].items() if k != "parent"}
        return [row | {"collection": "task", "value": value}]

    install(v3(s2=drop_parent))

    assert roster("todos").reason == (
        "migration: a migrated task record 'a-1' is invalid: parent: Field required"
    )


def test_a_long_key_in_an_invalid_record_reason_is_cut(install):
    seed_v1(install)
    long_key = "k" * 256

    install(v3(s2=lambda row: [{"collection": "task", "key": long_key, "value": {}}]))

    reason = roster("todos").reason
    quoted = repr(long_key)[: migrations.KEY_IN_REASON_MAX - 1] + "…"
    assert reason == (
        f"migration: a migrated task record {quoted} is invalid: id: Field required (and 2 more)"
    )
    assert len(reason) <= REASON_MAX


def test_a_missing_step_stops_with_a_migration_reason(install):
    before = seed_v1(install)
    ext = v3()
    del ext.migrations[2]

    install(ext, make_ext("beta"))

    assert snapshot("todos") == before
    assert roster("todos").reason == "migration: missing state migration from version 2"


def test_a_newer_stored_state_version_stops_only_that_extension_naming_both(install):
    seed_v1(install)
    install(v3(), make_ext("beta"))
    migrated = snapshot("todos")
    beta_before = snapshot("beta")
    row = roster("todos")
    row.state_version = 4  # written by a newer release
    row.save()

    install(v3(), make_ext("beta"))  # a downgrade must never eat data
    roster_sync()

    row = roster("todos")
    assert row.status == ExtensionStatus.STOPPED
    assert "4" in row.reason and "3" in row.reason
    assert row.reason == "state: stored state version 4 is newer than declared version 3"
    assert row.state_version == 4
    assert snapshot("todos") == migrated
    # the other extension opens normally
    assert roster("beta").status == ExtensionStatus.RUNNING
    assert snapshot("beta") == beta_before
    assert run_frame(
        extension_id="beta", hook="test", call=lambda c: c.collection("item").put(Item(key="y"))
    ).ok


def test_a_duplicate_key_from_a_migration_writes_nothing(install):
    before = seed_v1(install)
    collide = lambda row: [row | {"key": "same", "value": row["value"] | {"id": "same"}}]  # noqa: E731

    install(v3(s2=lambda row: [r | {"collection": "task"} for r in collide(row)]), make_ext("beta"))

    assert snapshot("todos") == before
    assert roster("todos").reason == "migration: migrated records have duplicate keys"


def sync_goes_on_for_the_others() -> None:
    """`todos` failed: the sync still installed `gamma` and left `beta` running."""
    assert RosterEntry.objects.get(pk="gamma").status == ExtensionStatus.RUNNING
    assert roster("beta").status == ExtensionStatus.RUNNING


@pytest.mark.parametrize(
    ("step", "reason"),
    [
        (
            lambda row: [row | {"collection": "task", "key": row["key"] + "\x00"}],
            f"migration: a migrated task record key cannot be stored: {PROBLEM_NUL}",
        ),
        (
            lambda row: [row | {"collection": "task", "key": row["key"] + "\ud800"}],
            f"migration: a migrated task record key cannot be stored: {PROBLEM_NOT_UNICODE}",
        ),
        (
            lambda row: [row | {"collection": "task", "value": row["value"] | {"parent": "\x00"}}],
            f"migration: a migrated task record index cannot be stored: {PROBLEM_NUL}",
        ),
        (
            lambda row: [row | {"collection": "task", "value": row["value"] | {"text": "\ud800"}}],
            "migration: a migrated task record 'a-1' is invalid: Error serializing to JSON: "
            "UnicodeEncodeError: 'utf-8' codec can't encode character '\\ud800' in position 0: "
            "surrogates not allowed",
        ),
    ],
    ids=[
        "key with a NUL",
        "key with a lone surrogate",
        "index with a NUL",
        "value with a lone surrogate",
    ],
)
def test_a_migrated_record_the_database_cannot_store_stops_only_that_extension(
    install, step, reason
):
    before = seed_v1(install)

    install(v3(s2=step), make_ext("beta"), make_ext("gamma"))

    assert snapshot("todos") == before
    row = roster("todos")
    assert (row.status, row.reason, row.state_version) == (ExtensionStatus.STOPPED, reason, 1)
    sync_goes_on_for_the_others()


def test_a_database_error_writing_a_migrations_output_stops_only_that_extension(
    install, monkeypatch
):
    """Whatever the database refuses past the checks fails this migration, not the sync."""
    before = seed_v1(install)
    monkeypatch.setattr(migrations, "check_key", lambda value, what: value)  # no key checks
    refused = "\x00" if connection.vendor == "postgresql" else "\ud800"  # the driver refuses it

    install(
        v3(s2=lambda row: [row | {"collection": "task", "key": row["key"] + refused}]),
        make_ext("beta"),
        make_ext("gamma"),
    )

    assert snapshot("todos") == before
    row = roster("todos")
    assert row.status == ExtensionStatus.STOPPED
    assert row.reason.startswith("migration: the database refused the migrated records: ")
    sync_goes_on_for_the_others()


@pytest.mark.parametrize(
    "bug", [ValueError("host bug"), ProgrammingError("host bug")], ids=["value", "sql"]
)
def test_a_host_bug_during_a_migration_fails_the_sync_and_stops_no_extension(
    install, monkeypatch, bug
):
    """Only what the database refuses of the extension's output stops it: an error of the
    host's own code inside the migration's savepoint is the host's, and fails the sync."""
    before = seed_v1(install)

    def broken(*, extension_id: str) -> None:
        raise bug

    monkeypatch.setattr(migrations, "usage_recount", broken)

    with pytest.raises(type(bug), match="host bug"):
        install(v3(), make_ext("beta"))

    assert snapshot("todos") == before
    row = roster("todos")
    assert (row.status, row.reason, row.state_version) == (ExtensionStatus.RUNNING, "", 1)


def test_a_secret_in_a_key_cut_for_the_reason_is_redacted_before_the_cut(install):
    # the key is cut to 64 characters in the reason: a secret straddling the cut must be
    # recognised (and removed) whole first, or its head would be stored in clear
    from extensions_host.runtime import detached_context

    secret = "correct horse battery staple zebra 42"
    seed_v1(install)
    detached_context(extension_id="todos", hook="test").stores.secrets.set("key", secret)
    key = "k" * 40 + secret

    install(v3(s2=lambda row: [{"collection": "task", "key": key, "value": {}}]))

    reason = roster("todos").reason
    assert reason.startswith("migration: a migrated task record 'kkkk")
    assert "[redacted]" in reason
    assert not any(secret[:n] in reason for n in range(6, len(secret)))
