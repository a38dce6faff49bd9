"""Artifact rules a mutation sweep found unprotected: the state check's vocabularies and
completed-request lists, message and id bounds, head reconciliation (pending records, repeated
reconciles, the excepted id), what a begin, a late attempt and a late core result leave alone,
the commit's own reconcile, a non-ASCII head and the shared sequence, `save=none` payloads in
the cache (TTL, outages, forget on commit), clears undone or keyless, debug and projection
fields and bounds, and the follow-up's settled states and inputs."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest

from artifacts import ephemeral, services
from artifacts.models import ID_MAX, Event, Operation, Record
from artifacts.selectors import (
    UNDECODABLE_TEXT_MAX,
    artifacts_version,
    debug_read,
    followup_operations,
    followup_read,
    operation_states,
    projection_read,
)
from artifacts.state import operation_state_problem
from conversations.models import Conversation
from core.auth import service_principal
from tests.artifacts.helpers import (
    counts,
    decl,
    emit,
    head,
    make_world,
    op_context,
    raises_unchanged,
    started,
    status_of,
    visible,
    with_attempt,
)

COMMITTED = {
    "status": "core_committed",
    "followup_status": "not_started",
    "projection_status": "active",
    "head": "1",
    "message": "",
    "completed_requests": [],
}


def _marks(world_id: str = "world-1") -> tuple[int, int]:
    """What live views watch: the conversation's version and the artifacts version."""
    return (
        Conversation.objects.get(pk=world_id).version,
        artifacts_version(world_id=world_id),
    )


# --- the state check ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("status", "paused", "unknown status 'paused'"),
        ("followup_status", "paused", "unknown follow-up status 'paused'"),
        ("projection_status", "hidden", "unknown projection status 'hidden'"),
    ],
)
def test_a_status_outside_its_vocabulary_is_named_as_the_problem(field, value, problem):
    """A value outside each status's vocabulary is refused by name, not read as a near state
    (an unknown status would otherwise be checked as a committed one)."""
    assert operation_state_problem(**COMMITTED) is None
    assert operation_state_problem(**{**COMMITTED, field: value}) == problem


@pytest.mark.parametrize("requests", [[""], ["  "], ["r", 1], "r1", {"r": 1}, None])
def test_completed_requests_must_be_a_list_of_non_blank_strings(requests):
    """Completed requests are a list (or tuple) of non-blank strings: a blank id, a non-string,
    or a string or mapping in place of the list is a problem."""
    state = {**COMMITTED, "followup_status": "failed", "message": "why"}
    assert operation_state_problem(**{**state, "completed_requests": ("r1",)}) is None
    assert (
        operation_state_problem(**{**state, "completed_requests": requests})
        == "completed requests must be non-empty strings"
    )


# --- messages ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_core_message_may_be_exactly_2000_characters_and_no_longer(world):
    """`MESSAGE_MAX` is inclusive: a message of 2000 characters is stored whole, one more is
    refused (400) before anything is written."""
    op = op_context()
    started(op, decl())
    raises_unchanged(
        400,
        "Artifact call arguments are invalid",
        services.operation_mark_core_materialization_pending,
        context=op,
        head=head(1),
        message="m" * 2001,
    )

    summary = services.operation_mark_core_materialization_pending(
        context=op, head=head(1), message="m" * 2000
    )

    assert summary.message == "m" * 2000


# --- head reconciliation -----------------------------------------------------------------------


@pytest.mark.django_db
def test_reconciling_leaves_a_pending_record_for_its_operations_commit(world):
    """Reconciliation supersedes active `head_change` records only: a pending one (its
    operation awaits materialization at the new head) stays, and shows once the commit
    arrives."""
    op = op_context()
    ctx = started(op, decl(invalidation="head_change"))
    record = emit(ctx, payload="late")
    services.operation_mark_core_materialization_pending(context=op, head=head(1), message="m")

    result = services.head_reconcile(world_id="world-1", head=head(1))

    assert (result.superseded_records, result.superseded_operations) == ([], [])
    assert status_of(record.record_id) == "pending"
    services.operation_mark_core_committed(context=op, head=head(1))
    assert visible() == ["late"]


@pytest.mark.django_db
def test_reconciling_again_to_another_head_reports_no_operation_it_did_not_change(world):
    """An operation already superseded is not reported (nor written) again by a later
    reconcile: `superseded_operations` lists only the operations this call changed."""
    started(op_context(), decl())
    first = services.head_reconcile(world_id="world-1", head=head(1))
    assert first.superseded_operations == ["op-1"]
    marks = _marks()

    again = services.head_reconcile(world_id="world-1", head=head(2))

    assert again.superseded_operations == []
    assert _marks() == marks


@pytest.mark.django_db
def test_a_world_id_of_64_characters_can_be_reconciled(owner):
    """The reconcile's world id bound is 64 characters inclusive, the conversation id's."""
    world_id = "w" * 64
    make_world(owner, world_id)
    started(op_context(world_id=world_id), decl())

    result = services.head_reconcile(world_id=world_id, head=head(1, world_id))

    assert result.superseded_operations == ["op-1"]
    raises_unchanged(
        400,
        "Artifact call arguments are invalid",
        services.head_reconcile,
        world_id="w" * 65,
        head=head(1, world_id),
    )


@pytest.mark.django_db
@pytest.mark.parametrize("excepted", ["", "   ", "op\x00"])
def test_a_blank_or_nul_excepted_operation_is_refused(world, excepted):
    """`except_operation_id`, when given, is an id like any other: blank or NUL → 400, and
    the world is left as it was."""
    started(op_context(), decl())
    raises_unchanged(
        400,
        "Artifact call arguments are invalid",
        services.head_reconcile,
        world_id="world-1",
        head=head(1),
        except_operation_id=excepted,
    )
    assert Operation.objects.get(pk="op-1").projection_status == "active"


# --- begin and request attempts ----------------------------------------------------------------


@pytest.mark.django_db
def test_a_new_operation_leaves_a_running_operations_pending_record_to_its_commit(world):
    """Beginning an operation supersedes the earlier operations' *active* `new_operation`
    records: a pending one (its operation is still running, on the same parent head) is left,
    and shows when that operation commits."""
    first = op_context(operation_id="op-1")
    ctx = started(first, decl(invalidation="new_operation"))
    record = emit(ctx, payload="first")
    assert status_of(record.record_id) == "pending"

    services.operation_begin(context=op_context(operation_id="op-2"))

    assert status_of(record.record_id) == "pending"
    assert not Event.objects.filter(kind="supersede").exists()
    services.operation_mark_core_committed(context=first, head=head(1))
    assert visible() == ["first"]


@pytest.mark.django_db
def test_an_attempt_on_a_completed_operation_is_not_recorded(world):
    """A completed operation ignores a newer request attempt: nothing is registered, its
    records stay as they are, and nothing is written."""
    op = op_context()
    ctx = started(op, decl(save="commit"))
    emit(ctx, payload="done")
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_complete(operation_id="op-1", requests=[])
    marks, before = _marks(), counts()

    result = services.request_attempt_begin(context=with_attempt(ctx, 2))

    assert (result.recorded, result.current_attempt) == (False, 1)
    assert Operation.objects.get(pk="op-1").request_attempts == {"req-1": 1}
    assert (_marks(), counts()) == (marks, before)
    assert visible() == ["done"]


@pytest.mark.django_db
def test_registering_the_current_attempt_again_writes_nothing(world):
    """A retried begin of the current attempt changes no state, so live views are not told
    of a change (neither the conversation's version nor the artifacts version moves)."""
    ctx = started(op_context(), decl())
    marks = _marks()

    services.request_attempt_begin(context=ctx)

    assert _marks() == marks


# --- the core result ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_committing_neither_binds_nor_activates_a_record_its_operation_cleared(world):
    """The commit binds and activates the operation's effective records only: one its own
    clear hid stays unbound and unactivated (no event names it)."""
    op = op_context()
    ctx = started(op, decl())
    gone = emit(ctx, payload="gone", tool_call_id="c1")
    services.artifact_clear(context=ctx, output="panel", tool_call_id="c2")
    kept = emit(ctx, payload="kept", tool_call_id="c3")

    services.operation_mark_core_committed(context=op, head=head(1))

    assert visible() == ["kept"]
    assert status_of(gone.record_id) == "cleared"
    assert not Event.objects.filter(record_id=gone.record_id).exists()
    record = Record.objects.get(record_id=gone.record_id)
    assert (record.bound_head, record.activated) == ("", False)
    assert Record.objects.get(record_id=kept.record_id).bound_head == head(1)


@pytest.mark.django_db
def test_a_commit_reconciles_the_world_to_its_head(world):
    """Committing at a head reconciles the world to it: an earlier operation's `head_change`
    panel bound to another head is superseded by the commit itself, with no separate
    reconcile call."""
    first = op_context(operation_id="op-1")
    old = emit(started(first, decl(invalidation="head_change")), payload="old")
    services.operation_mark_core_committed(context=first, head=head(1))
    services.followup_complete(operation_id="op-1", requests=[])
    second = op_context(operation_id="op-2", parent_head=head(1))
    started(second, decl("other", channel="side"))
    assert visible() == ["old"]

    services.operation_mark_core_committed(context=second, head=head(2))

    assert status_of(old.record_id) == "superseded"
    assert visible() == []


@pytest.mark.django_db
def test_awaiting_materialization_after_the_operation_completed_changes_nothing(world):
    """A late `mark_core_materialization_pending` for a completed operation answers its
    summary and leaves it completed (with its panel shown)."""
    op = op_context()
    emit(started(op, decl()), payload="done")
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_complete(operation_id="op-1", requests=["r"])
    before = counts()

    summary = services.operation_mark_core_materialization_pending(
        context=op, head=head(1), message="late"
    )

    assert (summary.status, summary.message, summary.completed_requests) == (
        "completed",
        None,
        ["r"],
    )
    operation = Operation.objects.get(pk="op-1")
    assert (operation.status, operation.followup_status) == ("completed", "completed")
    assert counts() == before
    assert visible() == ["done"]


@pytest.mark.django_db
def test_awaiting_materialization_after_the_commit_keeps_the_operation_committed(world):
    """`mark_core_materialization_pending` arriving after `mark_core_committed` (a late retry)
    does not take the committed operation back to awaiting materialization."""
    op = op_context()
    emit(started(op, decl()), payload="answer")
    services.operation_mark_core_committed(context=op, head=head(1))

    summary = services.operation_mark_core_materialization_pending(
        context=op, head=head(1), message="late"
    )

    assert (summary.status, summary.message) == ("not_started", None)
    operation = Operation.objects.get(pk="op-1")
    assert (operation.status, operation.followup_status) == ("core_committed", "not_started")
    assert visible() == ["answer"]


@pytest.mark.django_db
def test_a_core_failure_reported_while_awaiting_materialization_changes_nothing(world):
    """Only a running operation can fail: one whose core already committed (awaiting
    materialization) answers its summary unchanged, its pending record kept for the commit."""
    op = op_context()
    record = emit(started(op, decl()), payload="kept")
    services.operation_mark_core_materialization_pending(context=op, head=head(1), message="m")
    before = counts()

    summary = services.operation_mark_core_failed(operation_id="op-1", message="late")

    assert (summary.status, summary.message, summary.core_committed) == (
        "recovery_required",
        "m",
        True,
    )
    assert counts() == before
    assert status_of(record.record_id) == "pending"


@pytest.mark.django_db
def test_a_core_failure_message_over_2000_characters_is_refused(world):
    """The core failure's message has the same bound as every operation message: over 2000
    characters → 400, and the operation keeps running."""
    started(op_context(), decl())
    raises_unchanged(
        400,
        "Artifact call arguments are invalid",
        services.operation_mark_core_failed,
        operation_id="op-1",
        message="m" * 2001,
    )
    assert Operation.objects.get(pk="op-1").status == "running"


# --- heads and sequences -----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_head_spelled_with_a_digit_int_cannot_read_is_refused_not_crashed(world):
    """A head is the entry's id in ASCII decimal: a string of other Unicode digits (which
    `isdigit` accepts but `int` cannot read, like "²") names no entry → 400, not a crash."""
    started(op_context(), decl())
    raises_unchanged(
        400,
        "Artifact head is not an entry of the conversation",
        services.head_reconcile,
        world_id="world-1",
        head=head(1) + "²",
    )


@pytest.mark.django_db
def test_an_event_after_a_record_is_numbered_after_it(world):
    """A world's rows share one sequence: an event appended after the newest record (with no
    event yet: a pending record writes none) takes the next number, not one a record has."""
    record = emit(started(op_context(), decl(save="commit")), payload="draft")
    assert not Event.objects.exists()

    services.operation_mark_core_failed(operation_id="op-1", message="failed")

    sequence = Record.objects.get(record_id=record.record_id).sequence
    assert list(Event.objects.values_list("kind", "sequence")) == [("supersede", sequence + 1)]


# --- save=none payloads ------------------------------------------------------------------------


class _Cache:
    """The real ephemeral cache, with some calls failing or recorded."""

    def __init__(self, real: Any, failing: tuple[str, ...] = ()) -> None:
        self.real, self.failing, self.timeouts = real, failing, []

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name in self.failing:
            raise ConnectionError("cache down")
        return getattr(self.real, name)(*args, **kwargs)

    def set(self, key: str, value: Any, timeout: Any = None) -> None:
        self.timeouts.append(timeout)
        self._call("set", key, value, timeout=timeout)

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        return self._call("get_many", keys)

    def delete_many(self, keys: list[str]) -> None:
        self._call("delete_many", keys)


def _cache(monkeypatch, *failing: str) -> _Cache:
    stub = _Cache(ephemeral.ephemeral_cache(), failing)
    monkeypatch.setattr(ephemeral, "ephemeral_cache", lambda: stub)
    return stub


@pytest.mark.django_db
def test_a_save_none_payload_is_cached_for_the_configured_ttl(world, settings, monkeypatch):
    """A `save=none` payload is written with `ARTIFACTS_EPHEMERAL_TTL_SECONDS` as its
    timeout (never "forever": an unreachable payload must expire)."""
    settings.ARTIFACTS_EPHEMERAL_TTL_SECONDS = 90
    stub = _cache(monkeypatch)
    emit(started(op_context(), decl("live", save="none")), "live", "now", "c1")
    assert stub.timeouts == [90]


@pytest.mark.django_db
def test_a_cache_outage_at_emit_is_unavailable_and_publishes_nothing(world, monkeypatch):
    """A `save=none` emit whose payload cannot be cached fails (503) and rolls back: no
    record without its payload."""
    ctx = started(op_context(), decl("live", save="none"))
    _cache(monkeypatch, "set")
    raises_unchanged(503, "Artifact cache is unavailable", emit, context=ctx, output="live")


@pytest.mark.django_db
def test_a_cache_outage_at_read_shows_save_none_panels_as_evicted(world, monkeypatch, caplog):
    """A projection read during a cache outage leaves the `save=none` panels out (as if
    evicted) and still shows the durable ones, logging the failure; it does not fail."""
    ctx = started(op_context(), decl("live", save="none"), decl("kept", save="operation"))
    emit(ctx, "live", "ephemeral", "c1")
    emit(ctx, "kept", "durable", "c2")
    _cache(monkeypatch, "get_many")
    with caplog.at_level(logging.WARNING, logger="artifacts.ephemeral"):
        assert visible() == ["durable"]
    assert "artifact cache read failed: ConnectionError" in caplog.text


@pytest.mark.django_db
def test_an_empty_save_none_payload_is_shown_as_empty_not_as_evicted(world):
    """A cached empty payload is a payload: the projection shows it, the debug view calls it
    available."""
    emit(started(op_context(), decl("live", save="none")), "live", "", "c1")
    assert visible() == [""]
    assert debug_read(world_id="world-1")["records"][0]["payload_available"] is True


@pytest.mark.django_db
def test_a_cache_outage_when_dropping_superseded_payloads_is_only_logged(
    world, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    """Dropping superseded payloads after the commit may fail (they expire anyway): the call
    that superseded them still succeeds."""
    op = op_context()
    emit(started(op, decl("live", save="none")), "live", "gone", "c1")
    services.operation_mark_core_committed(context=op, head=head(1))
    _cache(monkeypatch, "delete_many")

    with (
        caplog.at_level(logging.WARNING, logger="artifacts.ephemeral"),
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        summary = services.followup_complete(operation_id="op-1", requests=[])

    assert summary.status == "completed"
    assert callbacks
    assert "artifact cache delete failed: ConnectionError" in caplog.text


@pytest.mark.django_db
def test_a_superseded_payload_is_dropped_only_once_the_supersede_commits(
    world, django_capture_on_commit_callbacks
):
    """Supersede is final only once committed: the payload stays in the cache until the
    transaction commits (were it to roll back, the panel would still be there)."""
    op = op_context()
    result = emit(started(op, decl("live", save="none")), "live", "gone", "c1")
    key = f"hyphae:artifacts:payload:{Record.objects.get(record_id=result.record_id).pk}"

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        services.operation_mark_core_failed(operation_id="op-1", message="failed")

    assert ephemeral.ephemeral_cache().get(key) == "gone"
    for callback in callbacks:
        callback()
    assert ephemeral.ephemeral_cache().get(key) is None


# --- effective status and reads ----------------------------------------------------------------


@pytest.mark.django_db
def test_a_clear_by_an_operation_later_superseded_is_undone(world):
    """A clear hides earlier panels only while the operation that issued it is not superseded:
    once a head change supersedes that operation, the panel it cleared shows again."""
    first = op_context(operation_id="op-1")
    emit(started(first, decl()), payload="earlier")
    services.operation_mark_core_committed(context=first, head=head(1))
    services.followup_complete(operation_id="op-1", requests=[])
    ctx = started(op_context(operation_id="op-2", parent_head=head(1)), decl())
    services.artifact_clear(context=ctx, output="panel", tool_call_id="c2")
    assert visible() == []

    services.head_reconcile(world_id="world-1", head=head(2))

    assert visible() == ["earlier"]


@pytest.mark.django_db
def test_a_clear_without_a_key_hides_the_outputs_keyed_panels_too(world):
    """A clear of an output declared without a key hides every earlier panel of that output
    and channel, whatever key an earlier declaration gave them."""
    first = op_context(operation_id="op-1")
    emit(started(first, decl(strategy="upsert", key="k1")), payload="keyed")
    services.operation_mark_core_committed(context=first, head=head(1))
    services.followup_complete(operation_id="op-1", requests=[])
    assert visible() == ["keyed"]
    ctx = started(op_context(operation_id="op-2", parent_head=head(1)), decl(save="operation"))

    services.artifact_clear(context=ctx, output="panel", tool_call_id="c2")

    assert visible() == []


@pytest.mark.django_db
def test_the_debug_view_names_no_head_for_an_unbound_record(world):
    """A record not yet bound to a head shows `new_head: None` in the debug view (not an
    empty string), and the head once bound."""
    op = op_context()
    emit(started(op, decl()), payload="pending")
    assert debug_read(world_id="world-1")["records"][0]["new_head"] is None
    services.operation_mark_core_committed(context=op, head=head(1))
    assert debug_read(world_id="world-1")["records"][0]["new_head"] == head(1)


@pytest.mark.django_db
def test_a_projected_panel_not_yet_bound_names_its_parent_head(world):
    """A projection item's head is the record's bound head, or its parent head until it has
    one (a `save=operation` panel of a running operation)."""
    emit(started(op_context(), decl(save="operation")), payload="draft")
    items = projection_read(world_id="world-1")
    assert [(item["payload"], item["head"]) for item in items] == [("draft", head(0))]


def _corrupt_json_row(text: str) -> dict[str, Any]:
    ctx = started(op_context(), decl(content_type="application/json", save="operation"))
    record = emit(ctx, payload={"ok": True})
    Record.objects.filter(record_id=record.record_id).update(payload=text)
    return debug_read(world_id="world-1")["records"][0]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("length", "shown"),
    [(UNDECODABLE_TEXT_MAX, UNDECODABLE_TEXT_MAX), (UNDECODABLE_TEXT_MAX + 1, None)],
    ids=["at-the-bound", "one-over"],
)
def test_an_undecodable_payloads_raw_text_is_cut_only_past_2000_characters(world, length, shown):
    """The debug row carries an undecodable payload's raw text whole up to 2000 characters,
    cut with "…" past that; the payload counts as available (it is there, only corrupt)."""
    text = "{" + "x" * (length - 1)
    row = _corrupt_json_row(text)
    expected = text if shown else text[:UNDECODABLE_TEXT_MAX] + "…"
    assert (row["payload"], row["payload_undecodable"], row["payload_raw"]) == (
        None,
        True,
        expected,
    )
    assert row["payload_available"] is True


@pytest.mark.django_db
def test_operation_states_list_the_operations_in_the_order_they_began(world):
    """`operation_states` lists a world's operations oldest first, whatever their ids."""
    for operation_id in ("op-b", "op-a"):
        services.operation_begin(context=op_context(operation_id=operation_id))
    began = Operation.objects.get(pk="op-b").created_at
    Operation.objects.filter(pk="op-a").update(created_at=began + timedelta(seconds=1))

    states = operation_states(world_id="world-1")

    assert [state["operation_id"] for state in states] == ["op-b", "op-a"]


@pytest.mark.django_db
def test_the_debug_view_is_truncated_only_when_more_than_its_limits_exist(world):
    """`truncated` and `operations_truncated` say more exist than the page shows: a world
    holding exactly `limit` records and `operations_limit` operations is not truncated."""
    for n in (1, 2):
        op = op_context(operation_id=f"op-{n}")
        emit(started(op, decl(save="operation")), payload=f"p{n}")

    exact = debug_read(world_id="world-1", limit=2, operations_limit=2)
    short = debug_read(world_id="world-1", limit=1, operations_limit=1)

    assert (exact["truncated"], exact["operations_truncated"]) == (False, False)
    assert (len(exact["records"]), len(exact["operations"])) == (2, 2)
    assert (short["truncated"], short["operations_truncated"]) == (True, True)
    assert (len(short["records"]), len(short["operations"])) == (1, 1)


@pytest.mark.django_db
def test_the_debug_view_of_one_operation_lists_that_operation_alone(world):
    """`debug_read(operation_id=…)` narrows both lists to that operation: its records and its
    own state (with no head, `None`, while it runs)."""
    for n in (1, 2):
        emit(started(op_context(operation_id=f"op-{n}"), decl(save="operation")), payload=f"p{n}")

    read = debug_read(world_id="world-1", operation_id="op-1")

    assert [row["payload"] for row in read["records"]] == ["p1"]
    assert [(op["operation_id"], op["head"], op["message"]) for op in read["operations"]] == [
        ("op-1", None, None)
    ]


@pytest.mark.django_db
def test_an_operation_id_of_255_characters_is_read(world):
    """`followup_read` finds an operation whose id is at the 255-character bound (only
    longer ids are known not to exist)."""
    operation_id = "o" * ID_MAX
    services.operation_begin(context=op_context(operation_id=operation_id))
    summary = followup_read(principal=service_principal(), operation_id=operation_id)
    assert (summary.operation_id, summary.status) == (operation_id, "not_started")


@pytest.mark.django_db
def test_followup_summaries_keep_a_completed_operation_with_requests_to_show(world):
    """Only an operation completed with nothing to show is left out of the follow-up
    summaries: one whose follow-up completed requests stays listed."""
    for operation_id, requests in (("op-a", ["r1"]), ("op-b", [])):
        op = op_context(operation_id=operation_id)
        services.operation_begin(context=op)
        services.operation_mark_core_committed(context=op, head=head(1))
        services.followup_complete(operation_id=operation_id, requests=requests)

    assert [op.pk for op in followup_operations(world_id="world-1")] == ["op-a"]


@pytest.mark.django_db
def test_a_clear_alone_moves_the_artifacts_version(world):
    """A clear appends an event and nothing else (no record, no operation write): the
    artifacts version counts events' sequences too, so it still moves."""
    ctx = started(op_context(), decl(save="operation"))
    emit(ctx, payload="shown")
    before = artifacts_version(world_id="world-1")

    services.artifact_clear(context=ctx, output="panel", tool_call_id="c2")

    assert artifacts_version(world_id="world-1") > before
    assert visible() == []


# --- the follow-up phase -----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_followup_completes_with_up_to_1000_requests(world):
    """A follow-up may report at most 1000 completed requests, 1000 included; 1001 → 400."""
    op = op_context()
    started(op, decl())
    services.operation_mark_core_committed(context=op, head=head(1))
    requests = [f"r{n}" for n in range(1000)]
    raises_unchanged(
        400,
        "Artifact call arguments are invalid",
        services.followup_complete,
        operation_id="op-1",
        requests=[*requests, "one-more"],
    )

    summary = services.followup_complete(operation_id="op-1", requests=requests)

    assert (summary.status, summary.completed_requests) == ("completed", requests)


@pytest.mark.django_db
def test_a_string_is_not_a_list_of_completed_requests(world):
    """`requests` given as one string is refused (400), not read as its characters."""
    op = op_context()
    started(op, decl())
    services.operation_mark_core_committed(context=op, head=head(1))
    for call, extra in (
        (services.followup_complete, {}),
        (services.followup_fail, {"status": "failed", "message": "m"}),
    ):
        raises_unchanged(
            400,
            "Artifact call arguments are invalid",
            call,
            operation_id="op-1",
            requests="abc",
            **extra,
        )
    assert Operation.objects.get(pk="op-1").followup_status == "not_started"


@pytest.mark.django_db
def test_completing_the_followup_of_a_running_operation_changes_nothing(world):
    """A follow-up completion reported while the core still runs answers the running
    operation's summary (no error) and changes nothing."""
    emit(started(op_context(), decl(save="operation")), payload="draft")
    before = counts()

    summary = services.followup_complete(operation_id="op-1", requests=["r"])

    assert (summary.status, summary.completed_requests, summary.core_committed) == (
        "not_started",
        [],
        False,
    )
    assert counts() == before
    assert Operation.objects.get(pk="op-1").status == "running"
    assert visible() == ["draft"]


@pytest.mark.django_db
def test_a_failed_followup_keeps_the_requests_it_completed(world):
    """A follow-up that fails part-way records the requests it did complete, with its
    status and message."""
    op = op_context()
    started(op, decl())
    services.operation_mark_core_committed(context=op, head=head(1))

    summary = services.followup_fail(
        operation_id="op-1", status="budget_exceeded", message="over", requests=["r1", "r2"]
    )

    assert (summary.status, summary.message, summary.completed_requests) == (
        "budget_exceeded",
        "over",
        ["r1", "r2"],
    )
    assert Operation.objects.get(pk="op-1").completed_requests == ["r1", "r2"]


@pytest.mark.django_db
def test_a_followup_failure_of_a_missing_operation_echoes_its_message_and_requests(world):
    """A follow-up failure for an operation the store does not know answers
    `recovery_required` with the runtime's own message and requests, and writes nothing."""
    before = counts()
    failed = services.followup_fail(
        operation_id="nope", status="cancelled", message="user stopped", requests=["r1"]
    )
    assert (failed.status, failed.message, failed.completed_requests) == (
        "recovery_required",
        "user stopped",
        ["r1"],
    )
    assert counts() == before


@pytest.mark.django_db
def test_a_followup_requiring_recovery_is_settled(world):
    """A follow-up that requires recovery is settled: a later completion or failure report
    changes neither its status nor its message."""
    op = op_context()
    emit(started(op, decl(save="operation")), payload="draft")
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_fail(operation_id="op-1", status="recovery_required", message="lost")
    before = counts()

    completed = services.followup_complete(operation_id="op-1", requests=["r"])
    failed = services.followup_fail(operation_id="op-1", status="failed", message="late")

    for summary in (completed, failed):
        assert (summary.status, summary.message) == ("recovery_required", "lost")
    operation = Operation.objects.get(pk="op-1")
    assert (operation.status, operation.followup_status) == ("core_committed", "recovery_required")
    assert counts() == before
