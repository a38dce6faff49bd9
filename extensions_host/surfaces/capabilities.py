"""The context handles of the conversation capabilities, attached to every hook context through
the runtime's `register_capability`:

- `ctx.send(conversation_id, prompt=Prompt(...), when=, when_busy=, correlation=,
  require_existing_conversation=)` → `Accepted | NotReady` (grant `send`, inside the frame);
- `ctx.attention.set(conversation_id, item)` / `.clear(conversation_id, item_id)` (grant
  `attention`, inside the frame);
- `ctx.seed_interaction / answer_interaction / settle_interaction / snapshot_interaction` and
  `ctx.set_ambient / clear_ambient` (grant `attention`; also as `ctx.interactions.*` and
  `ctx.ambient.*`);
- `ctx.has_pending_steer(run)`, `ctx.has_successful_tool_result(run, tool_call_id)` (grant
  `run_tools`, any hook).

Guards come from the runtime (`require_write`, `require_read`, `require_grant`, `store_call`):
a write outside the extension's own frame is a defect that stops it. Code outside frames
(routes, workers, jobs) writes interactions and ambient surfaces through the host API
(`ctx.host.interactions`, `ctx.host.ambient`), which opens a frame per call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conversations.services.common import change_listeners
from extensions_host.runtime import (
    observation_listeners,
    register_capability,
    require_grant,
    require_read,
    require_write,
    stop_listeners,
)
from extensions_host.runtime.context import store_call
from extensions_host.services.roster import grant_listeners, resume_listeners
from extensions_host.surfaces.services import ambient, attention, interactions, participation
from extensions_host.surfaces.services.send import send_admit
from extensions_host.surfaces.types import Accepted, NotReady

if TYPE_CHECKING:
    from extensions_host.runtime.context import HookContext


class SendHandle:
    """`ctx.send(...)`: admit a prompt submission inside the frame (spec 04, Send)."""

    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx

    def __call__(
        self,
        conversation_id: str,
        *,
        prompt: Any,
        when: int | None = None,
        when_busy: str = "queue",
        correlation: str | None = None,
        require_existing_conversation: bool = False,
    ) -> Accepted | NotReady:
        frame = require_write(self._ctx, capability="send")
        with store_call(frame):
            return send_admit(
                extension_id=self._ctx.extension_id,
                grants=frame.grants,
                conversation_id=conversation_id,
                prompt=prompt,
                when=when,
                when_busy=when_busy,
                correlation=correlation,
                require_existing_conversation=require_existing_conversation,
            )


class AttentionHandle:
    """`ctx.attention`: set and clear the extension's attention items (inside the frame)."""

    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx

    def set(self, conversation_id: str, item: Any) -> None:
        frame = require_write(self._ctx, capability="attention")
        require_grant(self._ctx, "attention", frame)
        with store_call(frame):
            attention.attention_set(frame=frame, conversation_id=conversation_id, item=item)

    def clear(self, conversation_id: str, item_id: str) -> bool:
        frame = require_write(self._ctx, capability="attention")
        require_grant(self._ctx, "attention", frame)
        with store_call(frame):
            return attention.attention_clear(
                frame=frame, conversation_id=conversation_id, item_id=item_id
            )


class InteractionsHandle:
    """`ctx.interactions`: seed, answer, settle (inside the frame) and snapshot (anywhere)."""

    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx

    def seed(self, conversation_id: str, record: Any) -> bool:
        frame = require_write(self._ctx, capability="attention")
        require_grant(self._ctx, "attention", frame)
        with store_call(frame):
            return interactions.interaction_seed(
                frame=frame,
                kinds=self._ctx._loaded.definition.interaction_kinds,
                conversation_id=conversation_id,
                record=record,
            )

    def answer(self, conversation_id: str, call_id: str, answer: Any) -> bool:
        frame = require_write(self._ctx, capability="attention")
        require_grant(self._ctx, "attention", frame)
        with store_call(frame):
            return interactions.interaction_answer(
                frame=frame, conversation_id=conversation_id, call_id=call_id, answer=answer
            )

    def settle(self, conversation_id: str, call_id: str, status: str) -> bool:
        frame = require_write(self._ctx, capability="attention")
        require_grant(self._ctx, "attention", frame)
        with store_call(frame):
            return interactions.interaction_settle(
                frame=frame, conversation_id=conversation_id, call_id=call_id, status=status
            )

    def snapshot(self, conversation_id: str, call_id: str) -> dict[str, Any] | None:
        frame = require_read(self._ctx)
        require_grant(self._ctx, "attention", frame)
        with store_call(frame):
            return interactions.interaction_snapshot(
                extension_id=self._ctx.extension_id,
                conversation_id=conversation_id,
                call_id=call_id,
            )


class AmbientHandle:
    """`ctx.ambient`: replace or clear a declared ambient surface (inside the frame)."""

    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx

    def set(self, conversation_id: str, record: Any) -> None:
        frame = require_write(self._ctx, capability="attention")
        require_grant(self._ctx, "attention", frame)
        with store_call(frame):
            ambient.ambient_set(
                frame=frame,
                keys=self._ctx._loaded.definition.ambient_kinds,
                conversation_id=conversation_id,
                record=record,
            )

    def clear(self, conversation_id: str, key: str) -> None:
        frame = require_write(self._ctx, capability="attention")
        require_grant(self._ctx, "attention", frame)
        with store_call(frame):
            ambient.ambient_clear(
                frame=frame,
                keys=self._ctx._loaded.definition.ambient_kinds,
                conversation_id=conversation_id,
                key=key,
            )


class RunReads:
    """Read helpers for `run_tools` extensions."""

    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx

    def has_pending_steer(self, run: Any) -> bool:
        frame = require_read(self._ctx)
        require_grant(self._ctx, "run_tools", frame)
        with store_call(frame):
            return participation.pending_steer(run=run)

    def has_successful_tool_result(self, run: Any, tool_call_id: str) -> bool:
        frame = require_read(self._ctx)
        require_grant(self._ctx, "run_tools", frame)
        with store_call(frame):
            return participation.successful_tool_result(run=run, tool_call_id=tool_call_id)


def _attention_refresh(extension_id: str) -> None:
    attention.attention_owner_refresh(extension_id=extension_id)


def _roster_changed(extension_id: str) -> None:
    from extensions_host.surfaces.live import roster_changes_publish

    roster_changes_publish(extension_id)


def _changes_publish(conversation_ids: frozenset[str]) -> None:
    from extensions_host.surfaces.live import changes_publish

    changes_publish(sorted(conversation_ids))


def _conversation_changed(conversation_id: str, changed: str) -> None:
    from extensions_host.surfaces.live import changes_publish

    changes_publish([conversation_id])


def _add(listeners: list[Any], listener: Any) -> None:
    if listener not in listeners:
        listeners.append(listener)


def register() -> None:
    """Attach the handles to every hook context and subscribe to stops, resumes and frame
    commits (idempotent)."""
    register_capability("send", SendHandle)
    register_capability("attention", AttentionHandle)
    register_capability("interactions", InteractionsHandle)
    register_capability("ambient", AmbientHandle)
    register_capability("seed_interaction", lambda ctx: InteractionsHandle(ctx).seed)
    register_capability("answer_interaction", lambda ctx: InteractionsHandle(ctx).answer)
    register_capability("settle_interaction", lambda ctx: InteractionsHandle(ctx).settle)
    register_capability("snapshot_interaction", lambda ctx: InteractionsHandle(ctx).snapshot)
    register_capability("set_ambient", lambda ctx: AmbientHandle(ctx).set)
    register_capability("clear_ambient", lambda ctx: AmbientHandle(ctx).clear)
    register_capability("has_pending_steer", lambda ctx: RunReads(ctx).has_pending_steer)
    register_capability(
        "has_successful_tool_result", lambda ctx: RunReads(ctx).has_successful_tool_result
    )
    # a stop, a resume or a grant change changes which items are visible: bump the versions
    # for watchers
    _add(stop_listeners, _attention_refresh)
    _add(resume_listeners, _attention_refresh)
    _add(grant_listeners, _attention_refresh)
    # … and every conversation's projection slot shows it: wake every live stream (each sees
    # the roster's stamp move, `live.conversation_version`)
    _add(stop_listeners, _roster_changed)
    _add(resume_listeners, _roster_changed)
    _add(grant_listeners, _roster_changed)
    # every committed change wakes the live streams of its conversation: frames (observed
    # conversations) and the conversation services (admission, claims, appends, settles, …)
    _add(observation_listeners, _changes_publish)
    _add(change_listeners, _conversation_changed)
