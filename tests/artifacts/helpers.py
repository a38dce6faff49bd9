"""Builders for artifact-store tests: worlds, contexts, declarations, row counts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from artifacts import services
from artifacts.models import Event, Operation, Record, World
from artifacts.types import Declaration, OperationContext, RequestContext
from conversations.models import Conversation
from core import clock


def make_world(owner: Any, world_id: str, **extra: Any) -> Conversation:
    return Conversation.objects.create(
        id=world_id, owner=owner, last_activity_at=clock.now(), **extra
    )


def op_context(
    world_id: str = "world-1", operation_id: str = "op-1", parent_head: str = "h0", **extra: Any
) -> OperationContext:
    values = {
        "world_id": world_id,
        "parent_head": parent_head,
        "operation_id": operation_id,
        "preset_id": "preset",
        "preset_revision": "r1",
        "preset_scripts_enabled": False,
    }
    values.update(extra)
    return OperationContext(**values)


def decl(name: str = "panel", **extra: Any) -> Declaration:
    values: dict[str, Any] = {
        "name": name,
        "channel": "main",
        "content_type": "text/markdown",
        "save": "commit",
        "strategy": "append",
        "invalidation": "never",
        "max_emits": 10,
    }
    values.update(extra)
    return Declaration(**values)


def req_context(
    operation: OperationContext,
    *declarations: Declaration,
    request_id: str = "req-1",
    attempt: int = 1,
    max_artifact_bytes: int = 10 * 1024 * 1024,
) -> RequestContext:
    return RequestContext(
        operation=operation,
        request_id=request_id,
        request_attempt=attempt,
        max_artifact_bytes=max_artifact_bytes,
        declarations=declarations or (decl(),),
    )


def with_attempt(context: RequestContext, attempt: int) -> RequestContext:
    return replace(context, request_attempt=attempt)


def started(
    operation: OperationContext, *declarations: Declaration, **extra: Any
) -> RequestContext:
    """Begin the operation and its first request attempt."""
    services.operation_begin(context=operation)
    context = req_context(operation, *declarations, **extra)
    services.request_attempt_begin(context=context)
    return context


def emit(
    context: RequestContext,
    output: str = "panel",
    payload: Any = "hello",
    tool_call_id: str = "call-1",
) -> services.EmitResult:
    return services.artifact_emit(
        context=context, output=output, payload=payload, tool_call_id=tool_call_id
    )


def visible(world_id: str = "world-1", channel: str | None = None) -> list[Any]:
    """The payloads of the active projection, in order."""
    from artifacts.selectors import projection_read

    return [item["payload"] for item in projection_read(world_id=world_id, channel=channel)]


def counts() -> tuple[int, int, int, int]:
    """(worlds, operations, records, events): to show a call wrote nothing."""
    return (
        World.objects.count(),
        Operation.objects.count(),
        Record.objects.count(),
        Event.objects.count(),
    )


def status_of(record_id: str, world_id: str = "world-1") -> str:
    from artifacts.selectors import debug_read

    rows = debug_read(world_id=world_id)["records"]
    return next(row["status"] for row in rows if row["record_id"] == record_id)
