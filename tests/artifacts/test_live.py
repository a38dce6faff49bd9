"""Live views see every projection change (spec 01 live updates, 02: each committed change bumps
the version of the conversation it touched), including those made by operation state alone,
with no event: the conversation's version (the event stream), its artifacts digest (what the
stream names as changed) and `artifacts_version` (the inspector's poll) all move."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from artifacts import services
from artifacts.models import Event
from artifacts.selectors import artifacts_version
from conversations.models import Conversation
from extensions_host.surfaces.live import conversation_digests
from tests.artifacts.helpers import decl, emit, head, op_context, started, visible

pytestmark = pytest.mark.django_db


def _marks() -> tuple[int, str, int]:
    return (
        Conversation.objects.get(pk="world-1").version,
        conversation_digests(conversation_id="world-1")["artifacts"],
        artifacts_version(world_id="world-1"),
    )


def _moved(before: tuple[int, str, int], after: tuple[int, str, int]) -> list[bool]:
    return [a != b for a, b in zip(before, after, strict=True)]


def _open_followup_with_a_commit_panel() -> Callable[[], object]:
    op = op_context()
    emit(started(op, decl(save="commit")), payload="answer")
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_begin(context=op)
    return lambda: services.head_reconcile(world_id="world-1", head=head(2))


def _running_operation_panel_then_reconcile() -> Callable[[], object]:
    emit(started(op_context(), decl(save="operation")), payload="draft")
    return lambda: services.head_reconcile(world_id="world-1", head=head(9))


def _running_operation_panel_then_a_new_operation() -> Callable[[], object]:
    emit(started(op_context(parent_head=head(0)), decl(save="operation")), payload="old")
    return lambda: services.operation_begin(
        context=op_context(operation_id="op-2", parent_head=head(1))
    )


def _committed_operation_panel_then_complete() -> Callable[[], object]:
    op = op_context()
    emit(started(op, decl(save="operation")), payload="draft")
    services.operation_mark_core_committed(context=op, head=head(1))
    return lambda: services.followup_complete(operation_id="op-1", requests=["r"])


def _transient_panel_then_followup_begin() -> Callable[[], object]:
    op = op_context()
    emit(started(op, decl(save="operation", strategy="transient")), payload="working")
    services.operation_mark_core_committed(context=op, head=head(1))
    return lambda: services.followup_begin(context=op)


def _transient_panel_then_followup_resume() -> Callable[[], object]:
    op = op_context()
    emit(started(op, decl(save="operation", strategy="transient")), payload="working")
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_begin(context=op)
    return lambda: services.followup_resume(operation_id="op-1")


def _transient_panel_then_materialization_pending() -> Callable[[], object]:
    op = op_context()
    emit(started(op, decl(save="operation", strategy="transient")), payload="working")
    return lambda: services.operation_mark_core_materialization_pending(
        context=op, head=head(1), message="awaiting"
    )


@pytest.mark.parametrize(
    "scenario",
    [
        _open_followup_with_a_commit_panel,
        _running_operation_panel_then_reconcile,
        _running_operation_panel_then_a_new_operation,
        _committed_operation_panel_then_complete,
        _transient_panel_then_followup_begin,
        _transient_panel_then_followup_resume,
        _transient_panel_then_materialization_pending,
    ],
    ids=lambda scenario: scenario.__name__.strip("_"),
)
def test_a_projection_change_without_an_event_moves_every_live_mark(world, scenario):
    call = scenario()
    shown, before, events = visible(), _marks(), Event.objects.count()

    call()

    assert Event.objects.count() == events  # no event written,
    assert visible() != shown  # but the projection changed ...
    assert _moved(before, _marks()) == [True, True, True]  # ... and every live view can tell


def test_a_call_without_an_event_tells_the_watchers_after_its_commit(
    world, django_capture_on_commit_callbacks
):
    from conversations.services.common import change_listeners

    call = _transient_panel_then_followup_begin()
    heard: list[tuple[str, str]] = []
    change_listeners.append(
        lambda conversation_id, changed: heard.append((conversation_id, changed))
    )
    try:
        with django_capture_on_commit_callbacks(execute=True):
            call()
    finally:
        change_listeners.pop()
    assert heard == [("world-1", "artifacts")]


def test_a_retry_that_changes_nothing_moves_nothing(world):
    op = op_context()
    started(op, decl())
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_begin(context=op)
    before = _marks()

    services.followup_begin(context=op)  # already running
    services.operation_begin(context=op)  # the same context again
    services.followup_resume(operation_id="missing")

    assert _marks() == before


def test_the_state_version_moves_in_the_statement_that_writes_the_rows(world):
    """A call that writes an operation costs no statement of its own for the world's
    `state_version`: on PostgreSQL it is one more part of `rows_write`'s statement, with the
    conversation's version bump (SQLite runs those parts one by one)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from artifacts.models import World

    call = _transient_panel_then_followup_begin()
    before = World.objects.get(pk="world-1").state_version

    with CaptureQueriesContext(connection) as captured:
        call()

    bumps = [q["sql"] for q in captured.captured_queries if "state_version" in q["sql"]]
    assert len(bumps) == 1
    if connection.vendor == "postgresql":
        assert Conversation._meta.db_table in bumps[0]
    assert World.objects.get(pk="world-1").state_version == before + 1


def test_the_artifacts_digest_is_one_query(world, django_assert_num_queries):
    from extensions_host.surfaces.live import _artifacts_sequence

    _transient_panel_then_followup_begin()()
    with django_assert_num_queries(1):
        moved = _artifacts_sequence("world-1")
    services.followup_resume(operation_id="op-1")
    with django_assert_num_queries(1):
        assert _artifacts_sequence("world-1") != moved
    with django_assert_num_queries(1):
        assert _artifacts_sequence("no-such-world") is None
