"""verify_artifacts: each kind of tampering, made by editing rows directly, is reported with
its world and sequence, and the command exits non-zero."""

from __future__ import annotations

import contextlib

import pytest
from django.core.management import call_command
from django.db import connection

from artifacts import services
from artifacts.ephemeral import ephemeral_cache
from artifacts.fingerprints import record_fingerprint
from artifacts.models import Event, Operation, Record
from tests.artifacts.helpers import decl, emit, head, op_context, started, with_attempt

pytestmark = pytest.mark.django_db


@pytest.fixture
def filled(world):
    """A world with records of every save mode, a clear and a committed operation."""
    op = op_context()
    ctx = started(
        op,
        decl("panel", save="commit"),
        decl("draft", channel="d", save="operation"),
        decl("live", channel="l", save="none"),
    )
    records = {
        "panel": emit(ctx, "panel", "final text", "c1").record_id,
        "draft": emit(ctx, "draft", "draft text", "c2").record_id,
        "live": emit(ctx, "live", "live text", "c3").record_id,
    }
    services.artifact_clear(context=ctx, output="draft", tool_call_id="c4")
    services.operation_mark_core_committed(context=op, head=head(1))
    return records


def _verify() -> tuple[int, str, str]:
    """Run the command: (exit code, stdout, stderr)."""
    from io import StringIO

    out, err = StringIO(), StringIO()
    code = 0
    try:
        call_command("verify_artifacts", stdout=out, stderr=err)
    except SystemExit as exit_:
        code = int(exit_.code)
    return code, out.getvalue(), err.getvalue()


def _problems() -> list[str]:
    return [str(p) for p in services.integrity_check()]


@contextlib.contextmanager
def _check_constraints_off():
    """Let a test write a row the database's check constraints would refuse: the corruption
    that a restore or a hand edit on a database without them could leave behind."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA ignore_check_constraints = ON")
        else:  # inside the test's transaction: rolled back with it
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no pending FK checks before DDL
            cursor.execute(
                "ALTER TABLE artifacts_operation DROP CONSTRAINT artifact_operation_state"
            )
    try:
        yield
    finally:
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA ignore_check_constraints = OFF")


def test_an_intact_store_verifies_clean_and_exits_zero(filled):
    assert _problems() == []
    code, out, err = _verify()
    assert (code, err) == (0, "")
    assert "OK: 1 world(s) checked" in out


def test_a_changed_payload_is_reported_with_its_world_and_sequence(filled):
    record = Record.objects.get(record_id=filled["panel"])
    Record.objects.filter(pk=record.pk).update(payload="tampered text")

    code, _, err = _verify()

    assert code == 1
    assert (
        f"CORRUPT world=world-1 sequence={record.sequence}: "
        "the payload does not match its fingerprint"
    ) in err


def test_a_changed_ephemeral_payload_in_the_cache_is_reported(filled):
    record = Record.objects.get(record_id=filled["live"])
    ephemeral_cache().set(f"hyphae:artifacts:payload:{record.pk}", "tampered")
    assert (
        f"world=world-1 sequence={record.sequence}: the payload does not match its fingerprint"
        in _problems()
    )


def test_a_changed_record_field_breaks_the_record_fingerprint(filled):
    record = Record.objects.get(record_id=filled["panel"])
    Record.objects.filter(pk=record.pk).update(channel="elsewhere")
    assert (
        f"world=world-1 sequence={record.sequence}: "
        "the record does not match its record fingerprint"
    ) in _problems()


FORGED = "sha256:" + "0" * 64


def test_a_forged_record_call_fingerprint_is_reported_even_with_a_matching_record_fingerprint(
    filled,
):
    record = Record.objects.get(record_id=filled["draft"])
    record.call_fingerprint = FORGED
    record.record_fingerprint = record_fingerprint(record.fingerprint_fields)
    Record.objects.filter(pk=record.pk).update(
        call_fingerprint=record.call_fingerprint, record_fingerprint=record.record_fingerprint
    )

    code, _, err = _verify()

    assert code == 1
    assert err.splitlines()[:-1] == [
        f"CORRUPT world=world-1 sequence={record.sequence}: "
        "the record does not match its call fingerprint"
    ]


def test_a_forged_clear_call_fingerprint_is_reported(filled):
    event = Event.objects.get(kind="clear")
    Event.objects.filter(pk=event.pk).update(call_fingerprint=FORGED)

    code, _, err = _verify()

    assert code == 1
    assert err.splitlines()[:-1] == [
        f"CORRUPT world=world-1 sequence={event.sequence}: "
        "the clear event does not match its call fingerprint"
    ]


def test_an_ignored_call_fingerprint_is_recomputed_too(world):
    ctx = started(op_context(), decl(save="operation"))
    services.request_attempt_begin(context=with_attempt(ctx, 2))
    assert (
        "ignored"
        in services.artifact_clear(context=ctx, output="panel", tool_call_id="c1").markdown
    )
    assert _problems() == []
    event = Event.objects.get(kind="ignored_call")
    Event.objects.filter(pk=event.pk).update(request_attempt=2)  # claims the current attempt
    assert _problems() == [
        f"world=world-1 sequence={event.sequence}: "
        "the ignored_call event does not match its call fingerprint"
    ]


def test_a_duplicated_sequence_is_reported(filled):
    record = Record.objects.get(record_id=filled["panel"])
    event = Event.objects.filter(kind="clear").get()
    Event.objects.filter(pk=event.pk).update(sequence=record.sequence)

    code, _, err = _verify()

    assert code == 1
    assert f"world=world-1 sequence={record.sequence}: sequence is used 2 times" in err
    assert f"world=world-1 sequence={event.sequence}: sequence is missing" in err


def test_an_event_naming_a_missing_record_is_reported(filled):
    event = Event.objects.filter(kind="activate").order_by("sequence").first()
    Event.objects.filter(pk=event.pk).update(record_id="artifact:999:0123456789abcdef")

    code, _, err = _verify()

    assert code == 1
    assert (
        f"world=world-1 sequence={event.sequence}: the activate event names a missing record "
        "'artifact:999:0123456789abcdef'"
    ) in err


def test_an_operation_in_an_invalid_state_is_reported(filled):
    with _check_constraints_off():
        Operation.objects.filter(pk="op-1").update(status="running")  # a running op with a head

    code, _, err = _verify()

    assert code == 1
    assert "world=world-1 sequence=-: operation op-1 is in an invalid state" in err


def test_a_blank_message_the_database_accepts_is_still_an_invalid_state(world):
    op = op_context()
    started(op, decl())
    services.operation_mark_core_materialization_pending(context=op, head=head(1), message="m")
    Operation.objects.filter(pk="op-1").update(message="   ")
    assert any("operation op-1 is in an invalid state" in p for p in _problems())


def test_a_projection_column_edited_without_its_event_is_reported(filled):
    record = Record.objects.get(record_id=filled["panel"])
    Record.objects.filter(pk=record.pk).update(superseded=True)
    assert (
        f"world=world-1 sequence={record.sequence}: "
        "record projection state does not match its events"
    ) in _problems()


def test_a_bind_head_event_for_another_head_is_reported(filled):
    event = Event.objects.filter(kind="bind_head").first()
    Event.objects.filter(pk=event.pk).update(head="h-other")
    assert any(
        f"sequence={event.sequence}: the bind_head event does not match" in p for p in _problems()
    )


def test_a_record_whose_identity_no_longer_matches_its_operation_is_reported(filled):
    record = Record.objects.get(record_id=filled["draft"])
    Operation.objects.filter(pk="op-1").update(preset_revision="r-edited")
    assert (
        f"world=world-1 sequence={record.sequence}: the record does not match its operation's "
        "identity"
    ) in _problems()


def test_the_check_can_be_limited_to_one_world(filled, owner):
    from tests.artifacts.helpers import make_world

    make_world(owner, "world-2")
    Record.objects.filter(record_id=filled["panel"]).update(payload="tampered")
    assert services.integrity_check(world_ids=["world-2"]) == []
    assert services.integrity_check(world_ids=["world-1"]) != []


@pytest.mark.parametrize(
    ("kind", "edit", "problem"),
    [
        ("supersede", {"reason": ""}, "the supersede event lacks reason"),
        ("supersede", {"reason": "  "}, "the supersede event lacks reason"),
        ("supersede", {"head": head(1)}, "the supersede event must not carry head"),
        ("supersede", {"request_id": "req-1"}, "the supersede event carries a partial request"),
        ("activate", {"head": "h-bogus"}, "the activate event must not carry head"),
        ("activate", {"reason": "bogus"}, "the activate event must not carry reason"),
        ("activate", {"output": "panel"}, "the activate event must not carry output"),
        ("activate", {"record_id": ""}, "the activate event lacks record_id"),
        ("bind_head", {"reason": "bogus"}, "the bind_head event must not carry reason"),
        (
            "bind_head",
            {"request_id": "req-1", "request_attempt": 1},
            "the bind_head event must not carry request_id/request_attempt",
        ),
        ("clear", {"reason": ""}, "the clear event lacks reason"),
        ("clear", {"channel": ""}, "the clear event lacks channel"),
        ("clear", {"head": head(1)}, "the clear event must not carry head"),
        ("clear", {"record_id": "artifact:1:x"}, "the clear event must not carry record_id"),
        ("clear", {"request_attempt": 0}, "the clear event carries a partial request attempt"),
    ],
)
def test_an_event_missing_a_field_its_kind_requires_or_carrying_one_it_forbids_is_reported(
    filled, kind, edit, problem
):
    """The seed's `assertEvent`: each kind has its exact fields."""
    services.followup_complete(operation_id="op-1", requests=[])  # supersedes the save=none one
    assert _problems() == []
    event = Event.objects.filter(kind=kind).order_by("sequence").first()
    Event.objects.filter(pk=event.pk).update(**edit)

    assert any(
        p.startswith(f"world=world-1 sequence={event.sequence}: {problem}") for p in _problems()
    ), _problems()


def test_a_duplicated_record_id_is_reported(filled):
    first = Record.objects.get(record_id=filled["panel"])
    second = Record.objects.get(record_id=filled["draft"])
    Record.objects.filter(pk=second.pk).update(record_id=first.record_id)
    assert (
        f"world=world-1 sequence={second.sequence}: record id {first.record_id} is duplicated"
    ) in _problems()


def test_a_bound_head_column_edited_without_its_event_is_reported(filled):
    record = Record.objects.get(record_id=filled["panel"])
    assert record.bound_head == head(1)
    Record.objects.filter(pk=record.pk).update(bound_head=head(2))
    assert _problems() == [
        f"world=world-1 sequence={record.sequence}: "
        "record projection state does not match its events"
    ]


def test_an_ephemeral_payload_stored_in_the_database_is_reported(filled):
    record = Record.objects.get(record_id=filled["live"])
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA ignore_check_constraints = ON")
        else:  # inside the test's transaction: rolled back with it
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # no pending FK checks before DDL
            cursor.execute(
                "ALTER TABLE artifacts_record "
                "DROP CONSTRAINT artifact_record_ephemeral_payload_not_stored"
            )
    try:
        Record.objects.filter(pk=record.pk).update(payload="live text")  # its own text
    finally:
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA ignore_check_constraints = OFF")
    assert (
        f"world=world-1 sequence={record.sequence}: "
        "an ephemeral (save=none) payload is stored in the database"
    ) in _problems()


def test_an_event_naming_another_worlds_operation_is_reported(filled, owner):
    from tests.artifacts.helpers import make_world

    make_world(owner, "world-2")
    services.operation_begin(context=op_context(world_id="world-2", operation_id="op-2"))
    event = Event.objects.filter(world_id="world-1", kind="clear").get()
    Event.objects.filter(pk=event.pk).update(operation_id="op-2")
    assert (
        f"world=world-1 sequence={event.sequence}: event names operation op-2 of another world"
    ) in _problems()
