"""Data steps of the host's own schema migrations, run from the state before them."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

CORE = ("core", "0002_idempotency_created_on_host_clock")
BEFORE = [("extensions_host", "0003_record_extension_index_dropped"), CORE]
AFTER = [("extensions_host", "0004_roster_declared_auto_resume"), CORE]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture(autouse=True)
def _latest_schema_after():
    """Going back unapplies what depends on the migrated app too: every app ends at its
    latest migration again, for the tests after this one."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_auto_resume_off_by_declaration_moves_to_the_declared_switch_and_staff_off_stays():
    old = _migrate(BEFORE)
    Roster = old.get_model("extensions_host", "RosterEntry")
    Audit = old.get_model("core", "AuditEntry")
    for ext_id, auto_resume in (("declared", False), ("staff", False), ("on", True)):
        Roster.objects.create(id=ext_id, version="1", revision="r1", auto_resume=auto_resume)
    # staff turned "staff" off, on, and off again: their last change decides
    for after in (False, True, False):
        Audit.objects.create(
            actor="admin",
            action="extension_limits_changed",
            target="staff",
            detail={"auto_resume": {"before": not after, "after": after}},
        )
    # a change of another field does not count as staff's auto-resume choice
    Audit.objects.create(
        actor="admin",
        action="extension_limits_changed",
        target="declared",
        detail={"deadline_seconds": {"before": None, "after": 60.0}},
    )

    new = _migrate(AFTER)

    rows = new.get_model("extensions_host", "RosterEntry").objects
    switches = {
        row.id: (row.auto_resume, row.declared_auto_resume)
        for row in rows.filter(id__in=["declared", "staff", "on"])
    }
    assert switches == {
        "declared": (True, False),  # off by declaration: staff's switch is on
        "staff": (False, True),  # off by staff: kept (sync rewrites the declaration)
        "on": (True, True),
    }


def test_idle_marks_keep_their_activity_and_those_of_deleted_conversations_go():
    conversations = ("conversations", "0003_conversation_id_validator")
    old = _migrate([("ext_background", "0006_job_columns_db_default"), conversations])
    Conversation = old.get_model("conversations", "Conversation")
    owner = old.get_model("auth", "User").objects.create(username="owner")
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    Conversation.objects.create(id="live", owner_id=owner.pk, last_activity_at=at)
    IdleMark = old.get_model("ext_background", "IdleMark")
    for cid in ("live", "gone"):  # "gone": its conversation was deleted, the old mark stayed
        IdleMark.objects.create(conversation_id=cid, activity_at=at)

    new = _migrate([("ext_background", "0007_idle_mark_deleted_with_its_conversation")])

    marks = new.get_model("ext_background", "IdleMark").objects
    assert list(marks.values_list("conversation_id", "activity_at")) == [("live", at)]
    new.get_model("conversations", "Conversation").objects.filter(pk="live").delete()
    assert not marks.exists()
