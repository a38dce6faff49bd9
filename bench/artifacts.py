"""B-artifact-emit set-up: one world (a conversation), one running operation and one request
attempt whose declaration allows as many emits as a run can make."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

MAX_EMITS = 100_000


def emit_world_prepare(*, world_id: str) -> dict[str, Any]:
    """Create the world and begin its operation and attempt; the request context as JSON data
    (the drivers rebuild it with `request_context_from`)."""
    from artifacts.services import operation_begin, request_attempt_begin
    from artifacts.types import Declaration, OperationContext, RequestContext
    from bench.volume import conversations_insert
    from conversations.models import Entry

    conversations_insert(prefix=world_id, count=1)
    # a head names an entry of the world's conversation (spec 06); the same one on a re-run
    first = Entry.objects.filter(conversation_id=f"{world_id}0").order_by("pk").first()
    head = first or Entry.objects.create(conversation_id=f"{world_id}0", role="user")
    operation = OperationContext(
        world_id=f"{world_id}0",
        parent_head=str(head.pk),
        operation_id=f"{world_id}-op",
        preset_id="bench",
        preset_revision="r1",
        preset_scripts_enabled=False,
    )
    context = RequestContext(
        operation=operation,
        request_id="bench-req",
        request_attempt=1,
        max_artifact_bytes=2**40,
        declarations=(
            Declaration(
                name="panel",
                channel="main",
                content_type="text/markdown",
                save="operation",
                strategy="append",
                invalidation="never",
                max_emits=MAX_EMITS,
            ),
        ),
    )
    operation_begin(context=operation)
    request_attempt_begin(context=context)
    return asdict(context)


def request_context_from(data: dict[str, Any]) -> Any:
    from artifacts.types import Declaration, OperationContext, RequestContext

    return RequestContext(
        operation=OperationContext(**data["operation"]),
        request_id=data["request_id"],
        request_attempt=data["request_attempt"],
        max_artifact_bytes=data["max_artifact_bytes"],
        declarations=tuple(Declaration(**d) for d in data["declarations"]),
    )


# An emit's own statements with no Python, run by pgbench beside the emits (context).
EMIT_STATEMENTS_SCRIPT = "emit_statements.sql"


def emit_statements_variables(data: dict[str, Any]) -> dict[str, str]:
    """The bench world's ids as `emit_statements.sql` takes them (`pgbench -D`)."""
    return {
        "world": data["operation"]["world_id"],
        "operation": data["operation"]["operation_id"],
        "request": data["request_id"],
    }
