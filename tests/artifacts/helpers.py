"""Builders for artifact-store tests: worlds, contexts, declarations, row counts."""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Any

import pytest

from artifacts import services
from artifacts.models import Event, Operation, Record, World
from artifacts.types import Declaration, OperationContext, RequestContext
from conversations.models import Conversation, Entry
from core import clock
from core.errors import HostError

HEADS_PER_WORLD = 10


def head(n: int, world_id: str = "world-1") -> str:
    """The id of the world's entry number `n` (0..9), made by `make_world`: a head (spec 06)
    names an entry of the world's conversation. Explicit ids far above any the database
    assigns, derived from the world id alone, so tests may name heads at import time."""
    assert 0 <= n < HEADS_PER_WORLD
    return str(10**12 + zlib.crc32(world_id.encode()) % 10**6 * 100 + n)


def make_world(owner: Any, world_id: str, **extra: Any) -> Conversation:
    """A conversation with entries `head(0, world_id)` … `head(9, world_id)`."""
    world = Conversation.objects.create(
        id=world_id, owner=owner, last_activity_at=clock.now(), **extra
    )
    Entry.objects.bulk_create(
        Entry(id=int(head(n, world_id)), conversation=world, role="user")
        for n in range(HEADS_PER_WORLD)
    )
    return world


def newest_head(world_id: str) -> str:
    """The head of a conversation made elsewhere: its newest entry (one is appended if it has
    none)."""
    newest = Entry.objects.filter(conversation_id=world_id).order_by("-pk").first()
    if newest is None:
        newest = Entry.objects.create(conversation_id=world_id, role="user")
    return str(newest.pk)


def op_context(
    world_id: str = "world-1",
    operation_id: str = "op-1",
    parent_head: str | None = None,
    **extra: Any,
) -> OperationContext:
    values = {
        "world_id": world_id,
        "parent_head": head(0, world_id) if parent_head is None else parent_head,
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


def raises_unchanged(expected_status: int, expected_message: str, call: Any, /, **kwargs: Any):
    """`call(**kwargs)` raises a HostError of this status and message, and writes nothing."""
    before = counts()
    with pytest.raises(HostError) as caught:
        call(**kwargs)
    assert (caught.value.status, caught.value.message) == (expected_status, expected_message)
    assert counts() == before
    return caught.value


def status_of(record_id: str, world_id: str = "world-1") -> str:
    from artifacts.selectors import debug_read

    rows = debug_read(world_id=world_id)["records"]
    return next(row["status"] for row in rows if row["record_id"] == record_id)
