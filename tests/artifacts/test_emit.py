"""emit and clear: acceptance, idempotency, every rejection rule, invariant and input errors."""

from __future__ import annotations

import json

import pytest
from django.db import IntegrityError

from artifacts import services
from artifacts.fingerprints import payload_text
from artifacts.models import Event, Operation, Record
from artifacts.services.emit import MAX_PAYLOAD_BYTES
from artifacts.types import MSG_DECLARATION_INVALID, contract_violation
from core.errors import HostError
from tests.artifacts.helpers import (
    counts,
    decl,
    emit,
    head,
    op_context,
    raises_unchanged,
    req_context,
    started,
    visible,
    with_attempt,
)

pytestmark = pytest.mark.django_db

REJECTED = "# Runtime artifact rejected\n\n"

CONTRACT = {
    "type": "object",
    "properties": {"title": {"type": "string"}},
    "required": ["title"],
    "additionalProperties": False,
}


@pytest.fixture
def ctx(world):
    return started(
        op_context(),
        decl("panel", save="operation"),
        decl("card", channel="cards", content_type="application/json", payload_contract=CONTRACT),
        decl("data", channel="data", content_type="application/json", save="operation"),
        decl("once", channel="once", save="operation", max_emits=1),
    )


# --- acceptance and idempotency ----------------------------------------------------------------


def test_an_accepted_emit_names_its_record_and_answers_the_accepted_markdown(ctx):
    result = emit(ctx, "panel", "hello", "call-1")
    assert result.as_dict() == {
        "ok": True,
        "idempotent": False,
        "record_id": result.record_id,
        "markdown": "# Runtime artifact accepted\n\noutput=panel",
    }
    record = Record.objects.get()
    assert result.record_id == record.record_id
    assert record.record_id.startswith(f"artifact:{record.sequence}:")
    assert record.payload == "hello"
    assert record.payload_fingerprint.startswith("sha256:")
    assert record.call_fingerprint.startswith("sha256:")
    assert record.record_fingerprint.startswith("sha256:")


def test_a_json_payload_is_stored_and_projected_as_json(ctx):
    emit(ctx, "data", {"b": [1, 2.5, None], "a": "x"}, "call-1")
    assert visible(channel="data") == [{"a": "x", "b": [1, 2.5, None]}]


def test_a_json_payload_satisfying_its_contract_is_accepted(ctx):
    assert emit(ctx, "card", {"title": "ok"}, "call-1").ok


def test_the_same_call_again_returns_the_same_record_idempotently_and_writes_nothing(ctx):
    first = emit(ctx, "panel", "hello", "call-1")
    before = counts()
    again = emit(ctx, "panel", "hello", "call-1")
    assert again.as_dict() == {
        "ok": True,
        "idempotent": True,
        "record_id": first.record_id,
        "markdown": "# Runtime artifact already exists\n\noutput=panel",
    }
    assert counts() == before


def test_a_repeat_after_the_commit_repairs_nothing_that_is_not_missing(ctx):
    first = emit(ctx, "panel", "hello", "call-1")
    services.operation_mark_core_committed(context=ctx.operation, head=head(1))
    before = counts()
    again = emit(ctx, "panel", "hello", "call-1")
    assert again.record_id == first.record_id
    assert counts() == before


def test_a_repeat_after_the_operation_completed_leaves_its_panel_as_it_was(world):
    """The operation is stale once its follow-up completes; the repeat must not supersede the
    save=commit panel that completion keeps (the seed's repair would)."""
    op = op_context()
    ctx = started(op, decl(save="commit"))
    first = emit(ctx, payload="kept")
    services.operation_mark_core_committed(context=op, head=head(1))
    services.followup_complete(operation_id="op-1", requests=[])
    assert visible() == ["kept"]
    before = counts()

    again = emit(ctx, payload="kept")

    assert (again.ok, again.idempotent, again.record_id) == (True, True, first.record_id)
    assert again.markdown == "# Runtime artifact already exists\n\noutput=panel"
    assert visible() == ["kept"]
    assert counts() == before
    assert not Event.objects.filter(reason="late_superseded_operation_result").exists()


def test_a_repeat_while_the_core_awaits_materialization_keeps_the_record_pending(world):
    op = op_context()
    ctx = started(op, decl(save="commit"))
    first = emit(ctx, payload="later")
    services.operation_mark_core_materialization_pending(context=op, head=head(1), message="m")
    before = counts()

    assert emit(ctx, payload="later").idempotent

    assert counts() == before
    services.operation_mark_core_committed(context=op, head=head(1))
    assert visible() == ["later"]
    assert Record.objects.get(record_id=first.record_id).bound_head == head(1)


def test_a_repeat_of_a_pending_record_whose_operation_was_superseded_repairs_its_supersede(world):
    """The seed's `#repairRecordPublication`: a stale record without its supersede gets it
    (`late_superseded_operation_result`, with its request), once."""
    first = op_context(operation_id="op-1", parent_head=head(0))
    ctx = started(first, decl(save="commit"))
    created = emit(ctx, payload="late")  # pending: no event yet
    services.operation_begin(context=op_context(operation_id="op-2", parent_head=head(1)))
    assert not Event.objects.filter(record_id=created.record_id).exists()

    again = emit(ctx, payload="late")
    emit(ctx, payload="late")  # nothing more to repair

    assert (again.idempotent, again.record_id) == (True, created.record_id)
    events = Event.objects.filter(record_id=created.record_id)
    assert list(events.values_list("kind", "reason", "request_id", "request_attempt")) == [
        ("supersede", "late_superseded_operation_result", "req-1", 1)
    ]
    assert Record.objects.get(record_id=created.record_id).superseded
    assert services.integrity_check() == []
    services.operation_mark_core_committed(context=first, head=head(1))
    assert visible() == []


@pytest.mark.parametrize(
    ("attempts", "projection", "superseded"),
    [
        ({"req-1": 1}, "active", False),
        ({"req-1": 2}, "active", True),
        ({"req-1": 1}, "superseded", True),
        # no caller reaches this (an emit needs its attempt registered), but the two rules
        # must not drift: an attempt the operation does not know is not a newer one
        ({}, "active", False),
    ],
    ids=["current-attempt", "newer-attempt", "projection-superseded", "unknown-attempt"],
)
def test_the_repair_of_a_pending_commit_record_supersedes_it_as_its_status_reads(
    world, attempts, projection, superseded
):
    """`_repair` and the projection's status share one rule (`record_superseded`)."""
    from artifacts.models import Operation
    from artifacts.selectors import SUPERSEDED, WorldView
    from artifacts.services.emit import _repair
    from artifacts.services.world import WorldMutation

    created = emit(started(op_context(), decl(save="commit")), payload="pending")
    record = Record.objects.get(record_id=created.record_id)
    operation = Operation.objects.get(pk="op-1")
    operation.request_attempts, operation.projection_status = attempts, projection
    read_as = WorldView({operation.pk: operation}, [record], []).status(record)

    _repair(WorldMutation.lock("world-1"), record, operation)

    assert (read_as == SUPERSEDED, record.superseded) == (superseded, superseded)


def test_a_repeat_repairs_a_publication_event_that_is_genuinely_missing(ctx):
    """A record whose events were lost (a restore, a hand edit) gets them from the repeat."""
    first = emit(ctx, "panel", "hello", "call-1")
    Event.objects.filter(record_id=first.record_id).delete()
    Record.objects.filter(record_id=first.record_id).update(activated=False)
    assert visible() == []

    assert emit(ctx, "panel", "hello", "call-1").idempotent

    assert visible() == ["hello"]
    assert list(Event.objects.values_list("kind", "record_id")) == [("activate", first.record_id)]


def test_the_same_clear_again_is_confirmed_idempotently_and_writes_nothing(ctx):
    first = services.artifact_clear(context=ctx, output="panel", tool_call_id="clr-1")
    before = counts()
    again = services.artifact_clear(context=ctx, output="panel", tool_call_id="clr-1")
    assert first.as_dict() == {
        "ok": True,
        "idempotent": False,
        "markdown": "# Runtime artifact clear confirmed\n\noutput=panel",
    }
    assert again.as_dict() == {
        "ok": True,
        "idempotent": True,
        "markdown": "# Runtime artifact clear confirmed\n\noutput=panel",
    }
    assert counts() == before


def test_records_and_events_share_one_gap_free_sequence(ctx):
    emit(ctx, "panel", "a", "c1")  # record + activate
    services.artifact_clear(context=ctx, output="panel", tool_call_id="c2")  # clear
    emit(ctx, "data", [1], "c3")  # record + activate
    sequences = sorted(
        [
            *Record.objects.values_list("sequence", flat=True),
            *Event.objects.values_list("sequence", flat=True),
        ]
    )
    assert sequences == [1, 2, 3, 4, 5]


# --- every rejection rule answers the markdown and writes nothing ------------------------------


EMIT_REJECTIONS = [
    ("undeclared", "nope", "x", "c9", "Undeclared artifact output: nope"),
    (
        "text needs a string",
        "panel",
        {"a": 1},
        "c9",
        "panel text/markdown payload must be a string",
    ),
    (
        "not a JSON value",
        "data",
        float("nan"),
        "c9",
        "JSON artifact payload must be a valid JSON value",
    ),
    (
        "contract",
        "card",
        {"title": 5},
        "c9",
        "card payload does not satisfy its payload contract: 5 is not of type 'string' at $.title",
    ),
    ("empty tool call", "panel", "x", "", "Tool-call ID cannot be empty"),
    ("blank tool call", "panel", "x", "   ", "Tool-call ID cannot be empty"),
    # blank as the seed's `trim()` sees it: a byte-order mark is white space there
    ("byte-order mark", "panel", "x", "\ufeff \u3000", "Tool-call ID cannot be empty"),
    (
        "same id, other arguments",
        "panel",
        "changed",
        "call-1",
        "The same artifact tool-call ID is bound to different arguments",
    ),
    (
        "same id as a clear",
        "panel",
        "x",
        "clr-1",
        "The same artifact tool-call ID is bound to a different tool call",
    ),
    ("max emits", "once", "second", "c9", "Artifact once has reached maxEmits"),
    (
        "lone surrogate in text",
        "panel",
        "a\ud800",
        "c9",
        "panel text/markdown payload must be valid Unicode (no lone surrogates)",
    ),
    (
        "lone surrogate in a JSON key",
        "data",
        {"\udfff": [1]},
        "c9",
        "data application/json payload must be valid Unicode (no lone surrogates)",
    ),
]


@pytest.mark.parametrize(
    ("output", "payload", "tool_call_id", "reason"),
    [case[1:] for case in EMIT_REJECTIONS],
    ids=[case[0] for case in EMIT_REJECTIONS],
)
def test_a_rejected_emit_answers_its_reason_and_writes_nothing(
    ctx, output, payload, tool_call_id, reason
):
    emit(ctx, "panel", "hello", "call-1")
    emit(ctx, "once", "first", "call-2")
    services.artifact_clear(context=ctx, output="panel", tool_call_id="clr-1")
    before = counts()

    result = emit(ctx, output, payload, tool_call_id)

    assert result.as_dict() == {"ok": False, "markdown": REJECTED + reason}
    assert counts() == before


def test_an_emit_over_4_mib_is_rejected_and_writes_nothing(ctx):
    before = counts()
    result = emit(ctx, "panel", "x" * (MAX_PAYLOAD_BYTES + 1), "big")
    assert result.as_dict() == {
        "ok": False,
        "markdown": REJECTED + "Artifact exceeds the 4 MiB limit",
    }
    assert counts() == before
    # exactly 4 MiB is allowed
    assert emit(ctx, "panel", "x" * MAX_PAYLOAD_BYTES, "big").ok


def test_the_4_mib_bound_counts_utf8_bytes(ctx):
    payload = "é" * (MAX_PAYLOAD_BYTES // 2 + 1)  # two bytes each
    assert emit(ctx, "panel", payload, "big").markdown.endswith("Artifact exceeds the 4 MiB limit")


def test_an_emit_over_the_attempts_byte_budget_is_rejected_and_writes_nothing(world):
    ctx = started(op_context(), decl(save="operation"), max_artifact_bytes=10)
    assert emit(ctx, payload="12345", tool_call_id="c1").ok
    before = counts()
    result = emit(ctx, payload="123456", tool_call_id="c2")
    assert result.as_dict() == {
        "ok": False,
        "markdown": REJECTED
        + "This request attempt's artifacts would exceed its max_artifact_bytes (10 bytes)",
    }
    assert counts() == before
    assert emit(ctx, payload="12345", tool_call_id="c3").ok  # exactly the budget


def test_the_budget_and_max_emits_are_per_attempt(world):
    ctx = started(op_context(), decl(save="operation", max_emits=1), max_artifact_bytes=5)
    assert emit(ctx, payload="12345", tool_call_id="c1").ok
    ctx2 = with_attempt(ctx, 2)
    services.request_attempt_begin(context=ctx2)
    assert emit(ctx2, payload="12345", tool_call_id="c2").ok


CLEAR_REJECTIONS = [
    ("undeclared", "nope", "c9", "Undeclared artifact output: nope"),
    ("empty tool call", "panel", "", "Tool-call ID cannot be empty"),
    ("byte-order mark", "panel", "\ufeff", "Tool-call ID cannot be empty"),
    (
        "id of an emit",
        "panel",
        "call-1",
        "The same artifact tool-call ID is bound to a different tool call",
    ),
    (
        "same id, other arguments",
        "data",
        "clr-1",
        "The same artifact tool-call ID is bound to different arguments",
    ),
]


@pytest.mark.parametrize(
    ("output", "tool_call_id", "reason"),
    [case[1:] for case in CLEAR_REJECTIONS],
    ids=[case[0] for case in CLEAR_REJECTIONS],
)
def test_a_rejected_clear_answers_its_reason_and_writes_nothing(ctx, output, tool_call_id, reason):
    emit(ctx, "panel", "hello", "call-1")
    services.artifact_clear(context=ctx, output="panel", tool_call_id="clr-1")
    before = counts()

    result = services.artifact_clear(context=ctx, output=output, tool_call_id=tool_call_id)

    assert result.as_dict() == {"ok": False, "markdown": REJECTED + reason}
    assert counts() == before


def test_a_rejection_comes_before_the_operation_is_looked_up(world):
    # the seed checks the call itself first: no operation is needed to reject it
    ctx = req_context(op_context(operation_id="never-begun"), decl())
    assert emit(ctx, "nope").markdown == REJECTED + "Undeclared artifact output: nope"


# --- invariant errors (409) and malformed input (400) ------------------------------------------


def test_emit_and_clear_on_a_missing_operation_are_invariant_errors(world):
    ctx = req_context(op_context(operation_id="never-begun"), decl())
    raises_unchanged(409, "Artifact emit is missing an operation checkpoint", emit, context=ctx)
    raises_unchanged(
        409,
        "Artifact clear is missing an operation checkpoint",
        services.artifact_clear,
        context=ctx,
        output="panel",
        tool_call_id="c1",
    )


def test_emit_and_clear_with_a_different_frozen_context_are_invariant_errors(ctx):
    other = req_context(op_context(parent_head="elsewhere"), decl("panel", save="operation"))
    raises_unchanged(409, "Artifact emit does not match the frozen operation", emit, context=other)
    raises_unchanged(
        409,
        "Artifact clear does not match the frozen operation",
        services.artifact_clear,
        context=other,
        output="panel",
        tool_call_id="c1",
    )


@pytest.mark.parametrize("other_world_has_a_row", [False, True])
def test_a_context_naming_another_worlds_operation_is_a_mismatch_whatever_that_world_holds(
    ctx, owner, other_world_has_a_row
):
    """The seed reads the operation by id, then compares contexts: the answer never depends on
    whether the context's own world ever had artifacts (a `World` row)."""
    from tests.artifacts.helpers import make_world

    make_world(owner, "world-2")
    if other_world_has_a_row:
        services.operation_begin(context=op_context(world_id="world-2", operation_id="op-9"))
    moved = op_context(world_id="world-2")  # op-1 lives in world-1
    other = req_context(moved, decl("panel", save="operation"))
    for message, call, kwargs in [
        ("Artifact request attempt does not match the frozen operation",
         services.request_attempt_begin, {"context": other}),
        ("Artifact emit does not match the frozen operation", emit, {"context": other}),
        ("Artifact clear does not match the frozen operation", services.artifact_clear,
         {"context": other, "output": "panel", "tool_call_id": "c1"}),
        ("Artifact operation is bound to a different frozen payload",
         services.operation_mark_core_committed, {"context": moved, "head": head(1)}),
        ("Artifact operation awaiting materialization does not match the frozen operation",
         services.operation_mark_core_materialization_pending,
         {"context": moved, "head": head(1), "message": "m"}),
        ("Artifact follow-up does not match the frozen operation", services.followup_begin,
         {"context": moved}),
    ]:  # fmt: skip
        raises_unchanged(409, message, call, **kwargs)


def test_emit_and_clear_of_an_unregistered_request_are_invariant_errors(ctx):
    other = req_context(op_context(), decl("panel"), request_id="req-unknown")
    raises_unchanged(409, "Artifact emit request attempt is not registered", emit, context=other)
    raises_unchanged(
        409,
        "Artifact clear request attempt is not registered",
        services.artifact_clear,
        context=other,
        output="panel",
        tool_call_id="c1",
    )


def test_beginning_an_operation_again_with_another_context_is_an_invariant_error(ctx):
    raises_unchanged(
        409,
        "Artifact operation is bound to a different frozen payload",
        services.operation_begin,
        context=op_context(preset_revision="r2"),
    )


def test_beginning_the_same_operation_again_changes_nothing(ctx):
    emit(ctx, "panel", "x", "c1")
    before = counts()
    services.operation_begin(context=op_context())
    assert counts() == before


def test_an_operation_of_another_world_is_an_invariant_error(ctx, owner):
    from tests.artifacts.helpers import make_world

    make_world(owner, "world-2")
    raises_unchanged(
        409,
        "Artifact operation is bound to a different frozen payload",
        services.operation_begin,
        context=op_context(world_id="world-2"),
    )


def test_beginning_an_operation_in_a_missing_world_is_not_found(db):
    raises_unchanged(404, "Conversation not found", services.operation_begin, context=op_context())


@pytest.mark.parametrize(
    ("setup", "other", "message"),
    [
        ("completed", head(2), "Completed artifact operation has a conflicting core head"),
        ("failed", head(1), "An artifact operation whose core failed cannot be committed again"),
        ("committed", head(2), "Committed artifact operation has a conflicting core head"),
        (
            "pending",
            head(2),
            "Artifact operation awaiting materialization has a conflicting core head",
        ),
    ],
)
def test_commit_conflicts_are_invariant_errors(ctx, setup, other, message):
    op = ctx.operation
    if setup == "failed":
        services.operation_mark_core_failed(operation_id=op.operation_id)
    elif setup == "pending":
        services.operation_mark_core_materialization_pending(context=op, head=head(1), message="m")
    else:
        services.operation_mark_core_committed(context=op, head=head(1))
        if setup == "completed":
            services.followup_complete(operation_id=op.operation_id, requests=[])
    raises_unchanged(409, message, services.operation_mark_core_committed, context=op, head=other)


def test_commit_of_a_missing_operation_is_an_invariant_error(world):
    raises_unchanged(
        409,
        "Core commit is missing an artifact-operation checkpoint",
        services.operation_mark_core_committed,
        context=op_context(),
        head=head(1),
    )


def test_followup_calls_before_the_core_commits_are_invariant_errors(ctx):
    raises_unchanged(
        409,
        "Artifact follow-up cannot fail before the core is committed",
        services.followup_fail,
        operation_id="op-1",
        status="failed",
        message="m",
    )
    raises_unchanged(
        409,
        "Artifact follow-up is missing an operation checkpoint",
        services.followup_begin,
        context=op_context(operation_id="missing"),
    )


def test_materialization_pending_of_a_failed_operation_is_an_invariant_error(ctx):
    services.operation_mark_core_failed(operation_id="op-1")
    raises_unchanged(
        409,
        "An artifact operation whose core failed cannot await materialization",
        services.operation_mark_core_materialization_pending,
        context=ctx.operation,
        head=head(1),
        message="m",
    )


BAD_DECLARATIONS = [
    ("renderer without revision", {"renderer": "r"}),
    ("revision without renderer", {"renderer_revision": "1"}),
    ("upsert without key", {"strategy": "upsert"}),
    ("key without upsert", {"key": "k"}),
    ("unknown content type", {"content_type": "image/png"}),
    ("unknown save", {"save": "forever"}),
    ("unknown strategy", {"strategy": "merge"}),
    ("unknown invalidation", {"invalidation": "sometimes"}),
    ("zero max emits", {"max_emits": 0}),
    ("contract on text", {"payload_contract": {"type": "string"}}),
    (
        "invalid schema",
        {"content_type": "application/json", "payload_contract": {"type": "nonsense"}},
    ),
    ("blank channel", {"channel": " "}),
]


@pytest.mark.parametrize(
    "override", [c[1] for c in BAD_DECLARATIONS], ids=[c[0] for c in BAD_DECLARATIONS]
)
def test_an_invalid_declaration_is_a_400_and_writes_nothing(ctx, override):
    bad = req_context(op_context(), decl("panel", **override))
    before = counts()
    with pytest.raises(HostError) as caught:
        emit(bad)
    assert (caught.value.status, caught.value.cause) == (400, "invalid")
    assert counts() == before


LOCAL_REF_CONTRACT = {
    "$defs": {"title": {"type": "string", "minLength": 1}},
    "type": "object",
    "properties": {"title": {"$ref": "#/$defs/title"}},
    "required": ["title"],
}


def test_a_contract_with_local_refs_validates_payloads(world):
    ctx = started(
        op_context(),
        decl("card", content_type="application/json", payload_contract=LOCAL_REF_CONTRACT),
    )
    assert emit(ctx, "card", {"title": "ok"}, "c1").ok
    assert emit(ctx, "card", {"title": ""}, "c2").markdown == (
        REJECTED + "card payload does not satisfy its payload contract: "
        "'' should be non-empty at $.title"
    )


@pytest.fixture
def schema_server():
    """A loopback HTTP server serving a schema, counting the requests it gets."""
    import http.server
    import threading

    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.parametrize(
    "contract",
    [
        {"$ref": "{url}/schema.json"},
        {"type": "object", "properties": {"a": {"$ref": "{url}/schema.json#/x"}}},
        {"anyOf": [{"type": "null"}, {"$dynamicRef": "{url}/schema.json"}]},
        {"$ref": "other.json"},
    ],
)
def test_a_contract_with_a_remote_ref_is_a_400_and_fetches_nothing(world, schema_server, contract):
    url, hits = schema_server
    contract = json.loads(json.dumps(contract).replace("{url}", url))
    op = op_context()
    services.operation_begin(context=op)
    bad = req_context(op, decl("card", content_type="application/json", payload_contract=contract))
    before = counts()
    for call in (services.request_attempt_begin, lambda **kw: emit(**kw, output="card")):
        with pytest.raises(HostError) as caught:
            call(context=bad)
        assert (caught.value.status, caught.value.message) == (400, MSG_DECLARATION_INVALID)
        assert caught.value.details == {
            "declarations[0].payload_contract": [
                "Only local $ref (starting with #) are allowed: "
                "a payload contract never fetches schemas."
            ]
        }
    assert counts() == before
    assert hits == []


def test_a_contract_never_fetches_a_ref_even_if_it_reached_validation(
    schema_server, monkeypatch, request
):
    """The validators' registry refuses retrieval: a remote $ref that got past the declaration
    check (here: the check switched off) cannot be resolved."""
    from artifacts import types

    monkeypatch.setattr(types, "_has_remote_ref", lambda schema: False)
    types._contract_validator.cache_clear()
    request.addfinalizer(types._contract_validator.cache_clear)  # nothing cached while patched
    url, hits = schema_server
    violation = contract_violation({"$ref": f"{url}/schema.json"}, "text")
    assert violation is not None
    assert violation.startswith("the payload contract cannot be applied")
    assert hits == []


def test_a_ref_inside_a_const_is_data_not_a_reference(world):
    contract = {"const": {"$ref": "http://example.invalid/x"}}
    ctx = started(
        op_context(), decl("card", content_type="application/json", payload_contract=contract)
    )
    assert emit(ctx, "card", {"$ref": "http://example.invalid/x"}, "c1").ok
    assert not emit(ctx, "card", {"$ref": "other"}, "c2").ok


def test_duplicate_declaration_names_are_a_400(ctx):
    with pytest.raises(HostError) as caught:
        services.request_attempt_begin(context=req_context(op_context(), decl("a"), decl("a")))
    assert caught.value.status == 400


@pytest.mark.parametrize(
    "override",
    [
        {"world_id": ""},
        {"parent_head": " "},
        {"operation_id": "x" * 256},
        {"preset_scripts_enabled": "yes"},
    ],
)
def test_a_malformed_context_is_a_400(world, override):
    with pytest.raises(HostError) as caught:
        services.operation_begin(context=op_context(**override))
    assert caught.value.status == 400


def _statements(queries) -> list[str]:
    """The captured SQL without the test transaction's savepoints."""
    return [
        q["sql"]
        for q in queries
        if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT"))
    ]


# PostgreSQL: the lock and the decision read in one round trip, then one statement for the
# record, its events and the conversation's version bump. SQLite (in-process, no round trips):
# lock, read, record, events, version bump; a pending save=commit record has no events yet.
STATEMENTS = {
    "postgresql": {"commit": 2, "operation": 2, "none": 2},
    "sqlite": {"commit": 3, "operation": 5, "none": 5},
}


@pytest.mark.parametrize("save", ["commit", "operation", "none"])
def test_an_emit_costs_a_handful_of_statements(world, save):
    """However many records the attempt already has."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    statements = STATEMENTS[connection.vendor][save]
    ctx = started(op_context(), decl(save=save, max_emits=1000))
    for n in range(20):
        emit(ctx, payload=f"p{n}", tool_call_id=f"warm-{n}")
    with CaptureQueriesContext(connection) as captured:
        assert emit(ctx, payload="measured", tool_call_id="measured").ok
    assert len(_statements(captured.captured_queries)) == statements
    with CaptureQueriesContext(connection) as captured:
        assert emit(ctx, payload="measured", tool_call_id="measured").idempotent
    assert len(_statements(captured.captured_queries)) <= statements


@pytest.mark.parametrize(
    "payload",
    [
        'it\'s \\ "quoted" \\n not a newline, but\nthis is one\ttab',
        "ünïcödé → 🍄 𝔥𝔶𝔭𝔥𝔞𝔢 \u2028 \u00a0",
        "%s %(name)s {} $1 ? -- ; DROP TABLE x",
        "",
    ],
)
def test_an_emitted_payload_is_stored_exactly_as_given(ctx, payload):
    result = emit(ctx, "panel", payload, "call-1")
    record = Record.objects.get()
    assert record.payload == payload
    assert record.payload_bytes == len(payload.encode("utf-8"))
    assert record.created_at is not None
    assert visible() == [payload]
    assert emit(ctx, "panel", payload, "call-1").record_id == result.record_id  # idempotent
    assert services.integrity_check() == []


def test_an_emit_tells_the_conversations_watchers_after_its_commit(
    ctx, django_capture_on_commit_callbacks
):
    from conversations.models import Conversation
    from conversations.services.common import change_listeners

    heard: list[tuple[str, str]] = []
    change_listeners.append(
        lambda conversation_id, changed: heard.append((conversation_id, changed))
    )
    try:
        before = Conversation.objects.get(pk="world-1").version
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            assert emit(ctx, "panel", "hello", "call-1").ok
        assert Conversation.objects.get(pk="world-1").version == before + 1
        assert heard == []  # not before the commit
        for callback in callbacks:
            callback()
        assert heard == [("world-1", "artifacts")]
    finally:
        change_listeners.pop()


@pytest.mark.postgres
def test_the_tool_call_probe_is_planned_on_its_unique_index_without_statistics(world):
    """A new database has no statistics until its first ANALYZE: the probe of an emit's
    tool-call id must still be one probe of `artifact_record_tool_call`, never a scan of the
    operation's records with a filter (which grows with every record of the operation)."""
    from django.db import connection

    from artifacts.services.sql import _call_read_sql

    ctx = started(op_context(), decl(save="operation", max_emits=1000))
    for n in range(50):
        assert emit(ctx, "panel", f"p{n}", f"call-{n}").ok
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [Record._meta.db_table]
        )
        assert cursor.fetchone()[0] < 0  # never analyzed: the planner guesses
        cursor.execute(
            "EXPLAIN " + _call_read_sql("postgresql"),
            ["call-7", "call-7", "req-1", 1, "req-1", 1, "panel", "world-1", "world-1", "op-1"],
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "artifact_record_tool_call" in plan
    filters = [line for line in plan.splitlines() if "Filter:" in line]
    assert not [line for line in filters if "tool_call_id" in line], plan


def test_a_json_number_is_one_number_whether_written_1_or_1_0(world):
    """As in the seed (JavaScript has one number type): the same call sent with 1 and with 1.0
    is one call, and its size is that of `{"v":1}` (7 bytes)."""
    context = started(
        op_context(), decl("card", content_type="application/json"), max_artifact_bytes=7
    )
    first = emit(context, output="card", payload={"v": 1.0}, tool_call_id="n1")
    again = emit(context, output="card", payload={"v": 1}, tool_call_id="n1")

    assert first.ok, first.markdown
    assert (again.ok, again.idempotent, again.record_id) == (True, True, first.record_id)
    record = Record.objects.get()
    assert (record.payload, record.payload_bytes) == ('{"v":1}', 7)


def test_only_whole_numbers_within_the_safe_integers_are_written_as_integers():
    payload = {"whole": 2.0, "fraction": 1.5, "nested": [3.0, {"x": -0.0}], "big": 2.0**60}
    assert payload_text(payload, "application/json") == (
        '{"big":1.152921504606847e+18,"fraction":1.5,"nested":[3,{"x":0}],"whole":2}'
    )


def test_a_process_keeps_a_bounded_number_of_event_statements_whatever_counts_it_meets():
    """A flush writes as many event rows as it supersedes (1 to a page of 1,000): the statement
    texts a process keeps stay bounded, the most recent counts cached."""
    from artifacts.services.sql import _write_sql

    for events in range(1, 1001):
        _write_sql(True, events, True, False)

    assert _write_sql.cache_info().currsize <= 64
    assert _write_sql(True, 1000, True, False).count("(%s") >= 1000  # still the right text


def test_a_context_differing_only_in_the_scripts_flag_is_another_frozen_payload(ctx):
    flipped = op_context(preset_scripts_enabled=True)
    raises_unchanged(
        409,
        "Artifact operation is bound to a different frozen payload",
        services.operation_begin,
        context=flipped,
    )
    raises_unchanged(
        409,
        "Artifact request attempt does not match the frozen operation",
        services.request_attempt_begin,
        context=req_context(flipped, decl(), attempt=2),
    )


def test_awaiting_materialization_again_at_another_head_is_an_invariant_error(ctx):
    op = ctx.operation
    services.operation_mark_core_materialization_pending(context=op, head=head(1), message="m")
    raises_unchanged(
        409,
        "Artifact operation awaiting materialization has a conflicting core head",
        services.operation_mark_core_materialization_pending,
        context=op,
        head=head(2),
        message="m2",
    )
    assert Operation.objects.values_list("head", "message").get(pk="op-1") == (head(1), "m")


def test_committing_again_does_not_rebind_a_record_bound_to_another_head(ctx):
    record = emit(ctx, "panel", "hello", "call-1")
    services.operation_mark_core_committed(context=ctx.operation, head=head(1))
    Record.objects.filter(record_id=record.record_id).update(bound_head=head(2))  # tampered
    raises_unchanged(
        409,
        "Artifact record is bound to a different core head",
        services.operation_mark_core_committed,
        context=ctx.operation,
        head=head(1),
    )
    assert Record.objects.get(record_id=record.record_id).bound_head == head(2)


def test_an_insert_colliding_with_the_same_context_is_not_answered_as_a_mismatch(
    world, monkeypatch
):
    """The world lock serialises begins of one context, so only two worlds' begins can race to
    insert one id. A collision with a row of the same context is not that race: it is raised
    as it is, never disguised as the mismatch. (The lock makes the collision impossible for
    real callers, so the row is written between the existence check and the insert.)"""
    from artifacts.services import operations

    op = op_context()
    real_head_check = operations.head_check

    def head_check_then_collide(*args, **kwargs):
        real_head_check(*args, **kwargs)
        Operation.objects.create(id="op-1", world_id="world-1", parent_head=head(0),
                                 preset_id="preset", preset_revision="r1",
                                 preset_scripts_enabled=False)  # fmt: skip

    monkeypatch.setattr(operations, "head_check", head_check_then_collide)
    with pytest.raises(IntegrityError):
        services.operation_begin(context=op)


def test_a_followup_fail_status_outside_the_runtimes_vocabulary_is_refused(ctx):
    services.operation_mark_core_committed(context=ctx.operation, head=head(1))
    for status in ("running", "completed", "superseded"):
        raises_unchanged(
            400,
            "Artifact call arguments are invalid",
            services.followup_fail,
            operation_id="op-1",
            status=status,
            message="m",
        )
    assert Operation.objects.get(pk="op-1").followup_status == "not_started"
