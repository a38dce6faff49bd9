"""The seed's behaviour, walked scenario by scenario (spec 06, issue 6 "Must show")."""

from __future__ import annotations

import pytest

from artifacts import services
from artifacts.models import Event, Operation, Record
from core.errors import HostError
from tests.artifacts.helpers import (
    decl,
    emit,
    head,
    op_context,
    req_context,
    started,
    status_of,
    visible,
    with_attempt,
)

pytestmark = pytest.mark.django_db


def test_an_emit_before_commit_stays_pending_and_appears_after_core_commit(world):
    op = op_context()
    ctx = started(op, decl(save="commit"))
    result = emit(ctx, payload="the answer")
    assert result.ok and result.markdown == "# Runtime artifact accepted\n\noutput=panel"
    assert status_of(result.record_id) == "pending"
    assert visible() == []

    services.operation_mark_core_committed(context=op, head=head(1))

    assert status_of(result.record_id) == "active"
    assert visible() == ["the answer"]
    record = Record.objects.get(record_id=result.record_id)
    assert record.bound_head == head(1)
    kinds = list(Event.objects.order_by("sequence").values_list("kind", flat=True))
    assert kinds == ["bind_head", "activate"]


def test_an_emit_after_commit_is_bound_to_the_head_and_active_at_once(world):
    op = op_context()
    ctx = started(op, decl(save="commit"))
    services.operation_mark_core_committed(context=op, head=head(1))
    result = emit(ctx)
    assert status_of(result.record_id) == "active"
    assert Record.objects.get(record_id=result.record_id).bound_head == head(1)


def test_committing_again_with_the_same_head_only_repairs(world):
    op = op_context()
    ctx = started(op, decl())
    emit(ctx)
    services.operation_mark_core_committed(context=op, head=head(1))
    events = Event.objects.count()
    services.operation_mark_core_committed(context=op, head=head(1))
    assert Event.objects.count() == events
    assert visible() == ["hello"]


def test_a_save_operation_record_is_active_before_the_commit(world):
    ctx = started(op_context(), decl(save="operation"))
    emit(ctx, payload="draft")
    assert visible() == ["draft"]


def test_a_second_operation_supersedes_new_operation_records_and_open_followups(world):
    first = op_context(operation_id="op-1")
    ctx1 = started(
        first,
        decl("volatile", invalidation="new_operation"),
        decl("durable", channel="side", invalidation="never"),
    )
    volatile = emit(ctx1, "volatile", "v1", "c1")
    durable = emit(ctx1, "durable", "d1", "c2")
    services.operation_mark_core_committed(context=first, head=head(1))
    services.followup_complete(operation_id="op-1", requests=[])
    assert visible() == ["v1", "d1"]

    services.operation_begin(context=op_context(operation_id="op-2", parent_head=head(1)))

    assert status_of(volatile.record_id) == "superseded"
    assert status_of(durable.record_id) == "active"
    assert visible() == ["d1"]

    # op-2 commits and leaves its follow-up open; op-3 supersedes all of op-2's records
    second = op_context(operation_id="op-2", parent_head=head(1))
    ctx2 = req_context(second, decl("durable", channel="side"))
    services.request_attempt_begin(context=ctx2)
    kept = emit(ctx2, "durable", "d2", "c3")
    services.operation_mark_core_committed(context=second, head=head(2))
    services.followup_begin(context=second)
    assert visible() == ["d1", "d2"]

    services.operation_begin(context=op_context(operation_id="op-3", parent_head=head(2)))

    op2 = Operation.objects.get(pk="op-2")
    assert (op2.followup_status, op2.projection_status) == ("superseded", "superseded")
    assert op2.message == "This follow-up was superseded by a newer operation"
    assert status_of(kept.record_id) == "superseded"
    assert status_of(durable.record_id) == "active"  # op-1's follow-up was complete
    assert visible() == ["d1"]


def test_a_new_operation_superseding_many_records_writes_every_event_in_order(world, monkeypatch):
    """One call appending more events than one INSERT takes: SQLite pages them under its
    bound-parameter limit (66 rows), PostgreSQL (page shrunk here) after the first page."""
    from artifacts.services import sql

    monkeypatch.setattr(sql, "_PAGE_POSTGRESQL", 40)
    ctx = started(op_context(), decl(invalidation="new_operation", save="operation", max_emits=500))
    emitted = [emit(ctx, payload=f"p{n}", tool_call_id=f"c{n}").record_id for n in range(150)]
    last = max(Event.objects.values_list("sequence", flat=True))

    services.operation_begin(context=op_context(operation_id="op-2"))

    supersedes = list(Event.objects.filter(kind="supersede").order_by("sequence"))
    assert [e.record_id for e in supersedes] == emitted
    assert [e.sequence for e in supersedes] == list(range(last + 1, last + 151))
    assert not Record.objects.filter(superseded=False).exists()
    assert visible() == []
    assert services.integrity_check() == []


def test_a_new_operation_writes_supersede_events_for_an_open_followups_records(world):
    first = op_context(operation_id="op-1")
    ctx = started(first, decl("kept"), decl("draft", channel="d", save="operation"))
    kept = emit(ctx, "kept", "k1", "c1")
    draft = emit(ctx, "draft", "d1", "c2")
    services.operation_mark_core_committed(context=first, head=head(1))
    services.followup_begin(context=first)
    assert visible() == ["k1", "d1"]
    assert not Event.objects.filter(kind="supersede").exists()

    services.operation_begin(context=op_context(operation_id="op-2", parent_head=head(1)))

    # the events themselves, not only the status the superseded projection implies
    supersedes = Event.objects.filter(kind="supersede").order_by("sequence")
    assert [(e.operation_id, e.record_id, e.reason) for e in supersedes] == [
        ("op-1", kept.record_id, "new_operation"),
        ("op-1", draft.record_id, "new_operation"),
    ]
    assert set(Record.objects.values_list("record_id", "superseded")) == {
        (kept.record_id, True),
        (draft.record_id, True),
    }
    assert visible() == []


def test_an_open_followup_without_records_is_superseded_by_a_new_operation(world):
    first = op_context(operation_id="op-1")
    services.operation_begin(context=first)
    services.operation_mark_core_committed(context=first, head=head(1))
    services.operation_begin(context=op_context(operation_id="op-2", parent_head=head(1)))
    op1 = Operation.objects.get(pk="op-1")
    assert op1.followup_status == "superseded"


def test_a_head_change_supersedes_head_change_records(world):
    op = op_context()
    ctx = started(
        op,
        decl("bound", invalidation="head_change"),
        decl("lasting", channel="side", invalidation="never"),
    )
    bound = emit(ctx, "bound", "b", "c1")
    lasting = emit(ctx, "lasting", "l", "c2")
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_complete(operation_id="op-1", requests=[])
    assert visible() == ["b", "l"]

    result = services.head_reconcile(world_id="world-1", head=head(1))
    assert result.superseded_records == []  # same head: nothing changes

    result = services.head_reconcile(world_id="world-1", head=head(2))

    assert result.superseded_records == [bound.record_id]
    assert status_of(bound.record_id) == "superseded"
    assert status_of(lasting.record_id) == "active"
    assert visible() == ["l"]


def test_a_new_operation_on_another_parent_head_supersedes_an_open_running_operation(world):
    running = op_context(operation_id="op-1", parent_head=head(0))
    ctx = started(running, decl(save="operation"))
    emit(ctx, payload="in flight")
    services.operation_begin(context=op_context(operation_id="op-2", parent_head=head(5)))
    op1 = Operation.objects.get(pk="op-1")
    assert (op1.status, op1.projection_status) == ("running", "superseded")
    assert visible() == []
    # its late results are recorded but superseded at once
    late = emit(ctx, payload="late", tool_call_id="call-2")
    assert late.ok
    assert status_of(late.record_id) == "superseded"
    assert Event.objects.filter(reason="late_superseded_operation_result").count() == 1


def test_a_newer_request_attempt_supersedes_the_older_attempts_records(world):
    op = op_context()
    ctx1 = started(op, decl(save="operation"))
    old = emit(ctx1, payload="attempt 1", tool_call_id="c1")
    assert visible() == ["attempt 1"]

    ctx2 = with_attempt(ctx1, 2)
    result = services.request_attempt_begin(context=ctx2)

    assert result.recorded and result.superseded_records == 1
    assert Operation.objects.get(pk="op-1").request_attempts == {"req-1": 2}
    event = Event.objects.get(kind="supersede")
    assert (event.reason, event.request_id, event.request_attempt) == (
        "request_attempt_superseded",
        "req-1",
        1,
    )
    assert status_of(old.record_id) == "superseded"
    new = emit(ctx2, payload="attempt 2", tool_call_id="c2")
    assert visible() == ["attempt 2"]

    # a late emit of the old attempt is recorded, and superseded at once
    late = emit(ctx1, payload="attempt 1 late", tool_call_id="c3")
    assert late.ok and late.markdown == "# Runtime artifact accepted\n\noutput=panel"
    assert status_of(late.record_id) == "superseded"
    assert Event.objects.filter(
        reason="late_superseded_operation_result", record_id=late.record_id
    ).exists()
    assert status_of(new.record_id) == "active"
    assert visible() == ["attempt 2"]


def test_an_older_attempt_registered_late_is_ignored(world):
    op = op_context()
    ctx = started(op, decl(), attempt=3)
    result = services.request_attempt_begin(context=with_attempt(ctx, 2))
    assert not result.recorded and result.current_attempt == 3
    assert Operation.objects.get(pk="op-1").request_attempts == {"req-1": 3}


def test_attempts_of_finished_operations_are_ignored(world):
    op = op_context()
    ctx = started(op, decl())
    services.operation_mark_core_failed(operation_id="op-1", message="boom")
    result = services.request_attempt_begin(context=with_attempt(ctx, 2))
    assert not result.recorded
    assert Operation.objects.get(pk="op-1").request_attempts == {"req-1": 1}


def test_clear_hides_earlier_records_of_the_same_output_and_channel(world):
    op = op_context()
    ctx = started(
        op,
        decl("log", save="operation"),
        decl("other", save="operation"),
        decl("log-side", channel="side", save="operation"),
    )
    emit(ctx, "log", "one", "c1")
    emit(ctx, "other", "keep", "c2")
    emit(ctx, "log-side", "side", "c3")

    cleared = services.artifact_clear(context=ctx, output="log", tool_call_id="c4")

    assert cleared.ok and cleared.markdown == "# Runtime artifact clear confirmed\n\noutput=log"
    assert visible() == ["keep", "side"]
    emit(ctx, "log", "two", "c5")  # later records are not hidden
    assert visible() == ["keep", "side", "two"]
    assert Event.objects.get(kind="clear").reason == "explicit_clear"


def test_clear_of_an_upsert_output_hides_only_its_key(world):
    ctx = started(
        op_context(),
        decl("a", save="operation", strategy="upsert", key="k1"),
        decl("b", save="operation", strategy="upsert", key="k2"),
    )
    emit(ctx, "a", "A", "c1")
    emit(ctx, "b", "B", "c2")
    services.artifact_clear(context=ctx, output="a", tool_call_id="c3")
    assert visible() == ["B"]


def test_a_stale_clear_is_recorded_as_an_ignored_call(world):
    op = op_context()
    ctx1 = started(op, decl(save="operation"))
    ctx2 = with_attempt(ctx1, 2)
    services.request_attempt_begin(context=ctx2)
    emit(ctx2, payload="current", tool_call_id="c1")

    result = services.artifact_clear(context=ctx1, output="panel", tool_call_id="c2")

    assert result.ok and result.markdown == "# Runtime artifact clear ignored\n\noutput=panel"
    event = Event.objects.get(tool_call_id="c2")
    assert (event.kind, event.reason) == ("ignored_call", "stale_clear_ignored")
    assert visible() == ["current"]


def test_a_clear_by_an_attempt_that_is_later_superseded_is_undone(world):
    first = op_context(operation_id="op-1")
    ctx1 = started(first, decl(save="commit"))
    emit(ctx1, payload="kept")
    services.operation_mark_core_committed(context=first, head=head(1))
    services.followup_complete(operation_id="op-1", requests=[])

    second = op_context(operation_id="op-2", parent_head=head(1))
    ctx2 = started(second, decl(save="commit"))
    services.artifact_clear(context=ctx2, output="panel", tool_call_id="c9")
    assert visible() == []

    services.request_attempt_begin(context=with_attempt(ctx2, 2))
    assert visible() == ["kept"]


def test_replace_keeps_the_latest_per_channel(world):
    ctx = started(
        op_context(),
        decl("status", save="operation", strategy="replace"),
        decl("status-b", channel="b", save="operation", strategy="replace"),
    )
    emit(ctx, "status", "s1", "c1")
    emit(ctx, "status-b", "b1", "c2")
    emit(ctx, "status", "s2", "c3")
    assert visible() == ["b1", "s2"]
    assert visible(channel="main") == ["s2"]


def test_upsert_keeps_the_latest_per_channel_and_key(world):
    ctx = started(
        op_context(),
        decl("k1", save="operation", strategy="upsert", key="one"),
        decl("k2", save="operation", strategy="upsert", key="two"),
        decl("k1-again", save="operation", strategy="upsert", key="one"),
    )
    emit(ctx, "k1", "one-a", "c1")
    emit(ctx, "k2", "two-a", "c2")
    emit(ctx, "k1-again", "one-b", "c3")
    assert visible() == ["two-a", "one-b"]


def test_append_keeps_every_record_and_hidden_shows_none(world):
    ctx = started(
        op_context(),
        decl("log", save="operation", strategy="append"),
        decl("secret", save="operation", strategy="hidden"),
    )
    emit(ctx, "log", "a", "c1")
    emit(ctx, "secret", "s", "c2")
    emit(ctx, "log", "b", "c3")
    assert visible() == ["a", "b"]


def test_save_operation_records_disappear_when_the_operation_completes(world):
    op = op_context()
    ctx = started(op, decl("draft", save="operation"), decl("final", channel="f", save="commit"))
    emit(ctx, "draft", "draft", "c1")
    emit(ctx, "final", "final", "c2")
    services.operation_mark_core_committed(context=op, head=head(1))
    assert visible() == ["draft", "final"]
    services.followup_complete(operation_id="op-1", requests=["r"])
    assert visible() == ["final"]


def test_transient_records_show_only_while_the_operation_is_live(world):
    op = op_context()
    ctx = started(op, decl("spinner", save="operation", strategy="transient"))
    emit(ctx, "spinner", "working", "c1")
    assert visible() == ["working"]  # running
    services.operation_mark_core_committed(context=op, head=head(1))
    assert visible() == []  # committed, follow-up not started
    services.followup_begin(context=op)
    assert visible() == ["working"]  # follow-up running
    services.followup_complete(operation_id="op-1", requests=[])
    assert visible() == []


def test_complete_followup_supersedes_save_none_and_operation_end_records(world):
    op = op_context()
    ctx = started(
        op,
        decl("live", save="none"),
        decl("ending", channel="e", save="commit", invalidation="operation_end"),
        decl("lasting", channel="l", save="commit"),
    )
    live = emit(ctx, "live", "ephemeral", "c1")
    ending = emit(ctx, "ending", "ends", "c2")
    lasting = emit(ctx, "lasting", "lasts", "c3")
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_begin(context=op)
    assert visible() == ["ephemeral", "ends", "lasts"]

    summary = services.followup_complete(operation_id="op-1", requests=["f1"])

    assert (summary.status, summary.completed_requests, summary.core_committed) == (
        "completed",
        ["f1"],
        True,
    )
    assert status_of(live.record_id) == "superseded"
    assert status_of(ending.record_id) == "superseded"
    assert status_of(lasting.record_id) == "active"
    assert set(
        Event.objects.filter(reason="operation_end").values_list("record_id", flat=True)
    ) == {
        live.record_id,
        ending.record_id,
    }
    assert visible() == ["lasts"]


def test_fail_followup_supersedes_save_none_and_operation_end_records(world):
    op = op_context()
    ctx = started(op, decl("live", save="none"), decl("kept", channel="k"))
    emit(ctx, "live", "ephemeral", "c1")
    emit(ctx, "kept", "kept", "c2")
    services.operation_mark_core_committed(context=op, head=head(1))
    summary = services.followup_fail(
        operation_id="op-1", status="budget_exceeded", message="out of budget", requests=[]
    )
    assert (summary.status, summary.message) == ("budget_exceeded", "out of budget")
    assert visible() == ["kept"]
    assert Event.objects.filter(reason="followup_failed").count() == 1


@pytest.mark.parametrize(
    "end",
    [
        lambda: services.followup_complete(operation_id="op-1", requests=["f1"]),
        lambda: services.followup_fail(
            operation_id="op-1", status="failed", message="gave up", requests=[]
        ),
    ],
    ids=["completed", "failed"],
)
def test_a_late_emit_after_the_follow_up_ended_is_superseded_at_once(world, end):
    op = op_context()
    ctx = started(op, decl(save="commit"))
    kept = emit(ctx, payload="kept", tool_call_id="c1")
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_begin(context=op)
    end()
    assert visible() == ["kept"]

    late = emit(ctx, payload="late", tool_call_id="c2")

    assert late.ok and late.markdown == "# Runtime artifact accepted\n\noutput=panel"
    assert status_of(late.record_id) == "superseded"
    assert visible() == ["kept"]
    event = Event.objects.get(record_id=late.record_id)
    assert (event.kind, event.reason, event.request_id, event.request_attempt) == (
        "supersede",
        "late_superseded_operation_result",
        "req-1",
        1,
    )
    assert status_of(kept.record_id) == "active"


def test_resume_of_an_open_followup_requires_recovery(world):
    op = op_context()
    started(op, decl())
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_begin(context=op)

    summary = services.followup_resume(operation_id="op-1")

    assert summary.status == "recovery_required"
    assert summary.message.startswith("Follow-up dispatch state cannot be replayed safely")
    assert Operation.objects.get(pk="op-1").followup_status == "recovery_required"
    # a settled follow-up is reported as it is
    assert services.followup_resume(operation_id="op-1").status == "recovery_required"


def test_resume_of_a_running_or_completed_operation_changes_nothing(world):
    op = op_context()
    started(op, decl())
    assert services.followup_resume(operation_id="op-1").status == "not_started"
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_complete(operation_id="op-1", requests=[])
    assert services.followup_resume(operation_id="op-1").status == "completed"


def test_resume_complete_and_fail_of_a_missing_operation_report_recovery_required(world):
    resumed = services.followup_resume(operation_id="nope")
    assert (resumed.status, resumed.message) == (
        "recovery_required",
        "No recoverable follow-up checkpoint was found",
    )
    assert services.followup_complete(operation_id="nope", requests=[]).core_committed is False
    failed = services.followup_fail(operation_id="nope", status="failed", message="m")
    assert failed.status == "recovery_required"


def test_core_failure_supersedes_every_record_of_the_operation(world):
    op = op_context()
    ctx = started(op, decl(save="operation"))
    record = emit(ctx)
    summary = services.operation_mark_core_failed(operation_id="op-1", message="model error")
    assert (summary.status, summary.message, summary.core_committed) == (
        "failed",
        "model error",
        False,
    )
    assert status_of(record.record_id) == "superseded"
    assert Event.objects.get(kind="supersede").reason == "core_failed"
    assert visible() == []
    with pytest.raises(HostError) as missing:
        services.operation_mark_core_failed(operation_id="missing")
    assert (missing.value.status, missing.value.message) == (
        409,
        "Core failure is missing an artifact-operation checkpoint",
    )


def test_materialization_pending_then_commit_recovers_the_followup(world):
    op = op_context()
    ctx = started(op, decl())
    emit(ctx)
    pending = services.operation_mark_core_materialization_pending(
        context=op, head=head(1), message="waiting for the transcript"
    )
    assert (pending.status, pending.core_committed, pending.head) == (
        "recovery_required",
        True,
        head(1),
    )
    assert visible() == []

    operation = services.operation_mark_core_committed(context=op, head=head(1))

    assert (operation.status, operation.followup_status, operation.message) == (
        "core_committed",
        "not_started",
        "",
    )
    assert visible() == ["hello"]


def test_followup_summaries_leave_out_failed_and_quietly_completed_operations(world):
    for op_id in ("op-a", "op-b", "op-c"):
        services.operation_begin(context=op_context(operation_id=op_id, parent_head=head(0)))
    services.operation_mark_core_failed(operation_id="op-a")
    op_b = op_context(operation_id="op-b", parent_head=head(0))
    services.operation_mark_core_committed(context=op_b, head=head(0))
    services.followup_complete(operation_id="op-b", requests=[])
    from artifacts.selectors import followup_operations

    assert [op.pk for op in followup_operations(world_id="world-1")] == ["op-c"]


def test_the_artifacts_version_grows_with_every_change(world):
    from artifacts.selectors import artifacts_version

    versions = [artifacts_version(world_id="world-1")]
    op = op_context()
    services.operation_begin(context=op)  # an operation written
    versions.append(artifacts_version(world_id="world-1"))
    ctx = req_context(op, decl(save="commit"))
    services.request_attempt_begin(context=ctx)
    versions.append(artifacts_version(world_id="world-1"))
    emit(ctx)  # record only: pending
    versions.append(artifacts_version(world_id="world-1"))
    services.operation_mark_core_committed(context=op, head=head(1))  # bind_head + activate
    versions.append(artifacts_version(world_id="world-1"))
    assert versions[0] == 0
    assert versions == sorted(set(versions)), versions  # each change moved it


def test_an_artifact_change_bumps_the_conversation_version_for_live_views(world):
    from conversations.models import Conversation

    def version() -> int:
        return Conversation.objects.get(pk="world-1").version

    op = op_context()
    ctx = started(op, decl(save="commit"))
    emit(ctx, payload="first")
    before = version()
    services.operation_mark_core_committed(context=op, head=head(1))
    assert version() > before  # bind + activate reach the event stream
    before = version()
    emit(ctx, payload="second", tool_call_id="call-2")
    assert version() > before


def test_reconciling_to_another_head_supersedes_an_open_followup(world):
    op = op_context()
    ctx = started(op, decl(save="commit"))
    emit(ctx, payload="answer")
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_begin(context=op)
    assert visible() == ["answer"]

    result = services.head_reconcile(world_id="world-1", head=head(2))

    assert result.superseded_operations == ["op-1"]
    op1 = Operation.objects.get(pk="op-1")
    assert (op1.status, op1.followup_status, op1.projection_status) == (
        "core_committed",
        "superseded",
        "superseded",
    )
    assert op1.message == "This follow-up was superseded by a newer head"
    assert visible() == []
    # the same head again finds nothing left to do
    again = services.head_reconcile(world_id="world-1", head=head(2))
    assert (again.superseded_records, again.superseded_operations) == ([], [])


def test_reconciling_with_an_excepted_operation_leaves_that_operation_alone(world):
    first = op_context(operation_id="op-1")
    ctx1 = started(first, decl("bound", invalidation="head_change", save="operation"))
    old = emit(ctx1, "bound", "one", "c1")
    second = op_context(operation_id="op-2")
    ctx2 = started(second, decl("bound", invalidation="head_change", save="operation"))
    kept = emit(ctx2, "bound", "two", "c2")
    assert visible() == ["one", "two"]

    result = services.head_reconcile(world_id="world-1", head=head(9), except_operation_id="op-2")

    assert result.superseded_records == [old.record_id]
    assert result.superseded_operations == ["op-1"]
    assert status_of(kept.record_id) == "active"
    op2 = Operation.objects.get(pk="op-2")
    assert (op2.status, op2.projection_status) == ("running", "active")
    assert visible() == ["two"]


def test_beginning_an_older_operation_again_leaves_newer_operations_panels(world):
    first = op_context(operation_id="op-1")
    services.operation_begin(context=first)
    second = op_context(operation_id="op-2")
    ctx2 = started(second, decl(invalidation="new_operation", save="operation"))
    panel = emit(ctx2, payload="newer")
    before = Event.objects.count()

    assert services.operation_begin(context=first).pk == "op-1"

    assert status_of(panel.record_id) == "active"
    assert visible() == ["newer"]
    assert Event.objects.count() == before


def test_beginning_an_older_operation_again_leaves_a_newer_open_followup(world):
    first = op_context(operation_id="op-1")
    services.operation_begin(context=first)
    second = op_context(operation_id="op-2")
    ctx2 = started(second, decl(save="commit"))
    emit(ctx2, payload="newer")
    services.operation_mark_core_committed(context=second, head=head(1))
    services.followup_begin(context=second)
    assert visible() == ["newer"]

    services.operation_begin(context=first)

    op2 = Operation.objects.get(pk="op-2")
    assert (op2.status, op2.followup_status, op2.projection_status) == (
        "core_committed",
        "running",
        "active",
    )
    assert visible() == ["newer"]


def test_registering_the_current_request_attempt_again_keeps_its_records(world):
    op = op_context()
    ctx = started(op, decl(save="operation"))
    record = emit(ctx, payload="attempt 1", tool_call_id="c1")

    again = services.request_attempt_begin(context=ctx)  # a retried call

    assert again.recorded and again.current_attempt == 1
    assert again.superseded_records == 0
    assert status_of(record.record_id) == "active"
    assert not Event.objects.filter(kind="supersede").exists()
    assert visible() == ["attempt 1"]


def test_a_core_failure_reported_after_the_commit_changes_nothing(world):
    op = op_context()
    ctx = started(op, decl(save="operation"))
    record = emit(ctx, payload="kept", tool_call_id="c1")
    services.operation_mark_core_committed(context=op, head=head(1))

    summary = services.operation_mark_core_failed(operation_id="op-1", message="late failure")

    assert summary.core_committed
    operation = Operation.objects.get(pk="op-1")
    assert (operation.status, operation.message) == ("core_committed", "")
    assert status_of(record.record_id) == "active"
    assert not Event.objects.filter(kind="supersede").exists()


def test_an_attempt_on_a_superseded_operation_is_not_recorded(world):
    ctx = started(op_context(), decl(save="operation"))
    emit(ctx)
    services.head_reconcile(world_id="world-1", head=head(1))  # supersedes the running op-1
    events = Event.objects.count()

    result = services.request_attempt_begin(context=with_attempt(ctx, 2))

    assert (result.recorded, result.current_attempt) == (False, 1)
    assert Operation.objects.get(pk="op-1").request_attempts == {"req-1": 1}
    assert Event.objects.count() == events


def test_a_superseded_operation_does_not_begin_its_followup(world):
    op = op_context()
    started(op, decl())
    services.head_reconcile(world_id="world-1", head=head(1))  # supersedes the running op-1
    services.operation_mark_core_committed(context=op, head=head(1))

    summary = services.followup_begin(context=op)

    assert summary.status == "not_started"
    assert Operation.objects.get(pk="op-1").followup_status == "not_started"


def test_resume_keeps_the_message_of_a_followup_already_requiring_recovery(world):
    op = op_context()
    started(op, decl())
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_fail(operation_id="op-1", status="recovery_required", message="disk lost")

    summary = services.followup_resume(operation_id="op-1")

    assert (summary.status, summary.message) == ("recovery_required", "disk lost")
    assert Operation.objects.get(pk="op-1").message == "disk lost"


def test_an_unknown_followup_counts_as_settled(world):
    op = op_context()
    started(op, decl())
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_fail(operation_id="op-1", status="unknown", message="runtime vanished")

    completed = services.followup_complete(operation_id="op-1", requests=["r"])
    failed = services.followup_fail(operation_id="op-1", status="failed", message="late")

    assert (completed.status, failed.status, failed.message) == (
        "unknown",
        "unknown",
        "runtime vanished",
    )
    operation = Operation.objects.get(pk="op-1")
    assert (operation.status, operation.followup_status) == ("core_committed", "unknown")
