"""Tool calls (spec 04): the runtime asks the host to execute a tool of a captured extension.

The handler runs in a frame; its result is recorded (a `ToolCallResult` row and a `tool_result`
transcript entry) in the same transaction. Idempotent on `tool_call_id` within the run: the
same arguments return the recorded result without running again, different ones are a 409.
A defect stops the extension and records `ok: false` with the bounded reason, so the run goes
on; so does a call of an extension that is no longer available for `run_tools` (stopped, or the
grant withdrawn since the claim: checked in the frame, under its roster row lock), without
running the handler.

Concurrency: the frame inserts the result row *before* the handler runs (`prepare`). A
concurrent call with the same id blocks on that row's unique index until the first commits,
then finds the record instead of running the handler a second time.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from pydantic import BaseModel

from conversations.models import Entry, Role, Run, RunStatus
from conversations.services import conversation_lock
from core.errors import HostError
from core.validation import model_from_json
from extensions_host import registry
from extensions_host.runtime import FrameOutcome, InvalidResult, run_frame
from extensions_host.runtime.hooks import encode_json
from extensions_host.services.errors import retry_error
from extensions_host.services.roster import eligible_ids
from extensions_host.surfaces.models import ToolCallResult
from extensions_host.surfaces.services.common import (
    conversations_touch,
    json_size,
    text_storable,
)
from extensions_host.surfaces.services.participation import run_info

MSG_RUN_NOT_FOUND = "Run not found"
MSG_RUN_NOT_CLAIMED = "Run is not claimed"
MSG_TOOL_UNKNOWN = "Extension tool is unknown"
MSG_EXTENSION_NOT_CAPTURED = "The run captured no tools of this extension."
MSG_TOOL_NOT_IN_MODULE = "The extension's captured tools have no tool of this name."
MSG_ARGUMENTS_INVALID = "Extension tool arguments are invalid"
MSG_TOOL_CALL_REUSED = "Tool call id was already used with different arguments"
MSG_TOOL_CALL_ID_INVALID = "Tool call id must be 1..128 characters"
MSG_RESULT_INVALID = "Extension tool result is not JSON"
MSG_RESULT_TOO_LARGE = "Extension tool result is too large"
MSG_UPDATING = "Extension is updating to a new revision"
RESULT_MAX_BYTES = 512 * 1024
ARGUMENTS_MAX_BYTES = 256 * 1024


class _NotGranted(Exception):
    """The extension's `run_tools` grant was withdrawn since the claim."""


@dataclass(frozen=True)
class ToolCallOutcome:
    record: ToolCallResult
    created: bool  # False: the recorded result of an earlier call with this id


def tool_hook_name(tool: str) -> str:
    return f"tool {tool}"


def tool_call_fingerprint(*, extension_id: str, tool: str, arguments: Any) -> str:
    canonical = json.dumps(
        [extension_id, tool, arguments], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def tool_call_execute(
    *, run_id: int, tool_call_id: str, extension_id: str, tool: str, arguments: Any
) -> ToolCallOutcome:
    """Execute one tool call of a claimed run (see the module docstring)."""
    if (
        not isinstance(tool_call_id, str)
        or not 1 <= len(tool_call_id) <= 128
        or not text_storable(tool_call_id)
    ):
        raise HostError(
            "contract",
            "invalid",
            MSG_TOOL_CALL_ID_INVALID,
            details={"tool_call_id": [MSG_TOOL_CALL_ID_INVALID]},
        )
    size = json_size(arguments)
    if not isinstance(arguments, dict) or size is None or size > ARGUMENTS_MAX_BYTES:
        raise HostError(
            "contract",
            "invalid",
            MSG_ARGUMENTS_INVALID,
            details={"arguments": ["Must be a JSON object of at most 256 KiB."]},
        )
    run = Run.objects.filter(pk=run_id).first()
    if run is None:
        raise HostError("store", "not_found", MSG_RUN_NOT_FOUND)
    fingerprint = tool_call_fingerprint(extension_id=extension_id, tool=tool, arguments=arguments)
    existing = ToolCallResult.objects.filter(run_id=run.pk, tool_call_id=tool_call_id).first()
    if existing is not None:
        return _replay(existing, fingerprint)
    if run.status != RunStatus.CLAIMED:
        raise HostError("contract", "conflict", MSG_RUN_NOT_CLAIMED)
    wrong = _not_offered(run, extension_id, tool)
    if wrong is not None:
        field, problem = wrong
        raise HostError("contract", "invalid", MSG_TOOL_UNKNOWN, details={field: [problem]})
    loaded = registry.get(extension_id)
    spec = loaded.definition.hooks.tools.get(tool) if loaded is not None else None
    if loaded is None or spec is None:
        # captured, but this process no longer has that code: the call cannot run here
        return _record_failure(
            run, tool_call_id, extension_id, tool, arguments, fingerprint,
            reason=_unavailable(extension_id),
        )  # fmt: skip
    data = _arguments(spec.input, arguments)
    info = run_info(run)
    key = {"run_id": run.pk, "tool_call_id": tool_call_id}

    def prepare() -> bool | None:
        if ToolCallResult.objects.filter(**key).exists():
            return False  # recorded meanwhile: answer with that record
        if not Run.objects.filter(pk=run.pk, status=RunStatus.CLAIMED).exists():
            raise HostError("contract", "conflict", MSG_RUN_NOT_CLAIMED)
        # the frame checked running and revision; the grant is the roster's one rule too, read
        # under the frame's lock on the row (a withdrawal waits for it)
        if not eligible_ids("run_tools", ids=[extension_id]):
            raise _NotGranted
        # claim the id before the handler runs (see the module docstring)
        ToolCallResult.objects.create(
            **key,
            extension_id=extension_id,
            tool=tool,
            arguments=arguments,
            fingerprint=fingerprint,
        )
        return None

    def finish(result: Any) -> None:
        entry = _entry(run, tool_call_id, extension_id, tool, ok=True, content=result)
        ToolCallResult.objects.filter(**key).update(ok=True, result=result, entry=entry)

    try:
        outcome = run_frame(
            extension_id=extension_id,
            hook=tool_hook_name(tool),
            call=lambda ctx: spec.handler(ctx, info, data),
            failures="stop",
            boundary="request",
            prepare=prepare,
            validate=_result,
            finish=finish,
            observe=[run.conversation_id],
        )
    except IntegrityError:
        # a concurrent call with the same id committed first
        return _replay(ToolCallResult.objects.get(**key), fingerprint)
    except _NotGranted:
        return _record_failure(
            run, tool_call_id, extension_id, tool, arguments, fingerprint,
            reason=_unavailable(extension_id),
        )  # fmt: skip
    return _after(outcome, run, tool_call_id, extension_id, tool, arguments, fingerprint)


def _after(
    outcome: FrameOutcome,
    run: Run,
    tool_call_id: str,
    extension_id: str,
    tool: str,
    arguments: Any,
    fingerprint: str,
) -> ToolCallOutcome:
    key = {"run_id": run.pk, "tool_call_id": tool_call_id}
    if outcome.ok:
        return ToolCallOutcome(ToolCallResult.objects.get(**key), True)
    if outcome.skip == "prepare":
        return _replay(ToolCallResult.objects.get(**key), fingerprint)
    if outcome.status == "retry":
        raise retry_error(
            extension_id=extension_id, after_seconds=outcome.retry_after, reason=outcome.reason
        )
    if outcome.skip == "revision":
        raise HostError("extensions", "unavailable", MSG_UPDATING, retry_after=1)
    if outcome.status == "stopped":
        reason = outcome.reason
    elif outcome.skip == "stopped":
        reason = f"Extension {extension_id} is stopped: {outcome.reason}"
    else:
        reason = _unavailable(extension_id)
    return _record_failure(run, tool_call_id, extension_id, tool, arguments, fingerprint, reason)


def _unavailable(extension_id: str) -> str:
    return f"Extension {extension_id} is unavailable"


def _not_offered(run: Run, extension_id: str, tool: str) -> tuple[str, str] | None:
    """None when the tool is in the module the claim captured for this extension; else the
    request field that is wrong and why: `extension` (no module of it captured for the run) or
    `tool` (its module has no such tool)."""
    for module in (run.capture or {}).get("tool_modules") or []:
        if module.get("extension") == extension_id:
            if any(t.get("name") == tool for t in module.get("tools") or []):
                return None
            return "tool", MSG_TOOL_NOT_IN_MODULE
    return "extension", MSG_EXTENSION_NOT_CAPTURED


def _arguments(model: type[BaseModel], arguments: dict[str, Any]) -> BaseModel:
    return model_from_json(
        model, arguments, message=MSG_ARGUMENTS_INVALID, field_prefix="arguments.", root="arguments"
    )


def _result(value: Any) -> Any:
    encoded = encode_json(value, MSG_RESULT_INVALID)
    size = json_size(encoded)
    if size is None:
        raise InvalidResult(MSG_RESULT_INVALID)
    if size > RESULT_MAX_BYTES:
        raise InvalidResult(MSG_RESULT_TOO_LARGE)
    return encoded


def _entry(
    run: Run, tool_call_id: str, extension_id: str, tool: str, *, ok: bool, content: Any
) -> Entry:
    """The `tool_result` transcript entry of the run (written in the caller's transaction)."""
    part = {
        "type": "tool_result",
        "tool_call_id": tool_call_id,
        "name": tool,
        "ok": ok,
        "content": content,
        "meta": {"extension": extension_id},
    }
    # the version bump is the caller's: the frame's `observe`, or `conversations_touch`
    return Entry.objects.create(
        conversation_id=run.conversation_id, role=Role.TOOL, content=[part], run_id=run.pk
    )


def _record_failure(
    run: Run,
    tool_call_id: str,
    extension_id: str,
    tool: str,
    arguments: Any,
    fingerprint: str,
    reason: str,
) -> ToolCallOutcome:
    """Record `ok: false` with the reason in its own transaction, so the run can go on."""
    key = {"run_id": run.pk, "tool_call_id": tool_call_id}
    try:
        with transaction.atomic(durable=True):
            conversation_lock(conversation_id=run.conversation_id)
            entry = _entry(run, tool_call_id, extension_id, tool, ok=False, content=reason)
            conversations_touch(conversation_ids=[run.conversation_id])
            record = ToolCallResult.objects.create(
                **key,
                extension_id=extension_id,
                tool=tool,
                arguments=arguments,
                fingerprint=fingerprint,
                ok=False,
                reason=reason[:512],
                entry=entry,
            )
    except IntegrityError:
        return _replay(ToolCallResult.objects.get(**key), fingerprint)
    return ToolCallOutcome(record, True)


def _replay(record: ToolCallResult, fingerprint: str) -> ToolCallOutcome:
    if record.fingerprint != fingerprint:
        raise HostError("contract", "conflict", MSG_TOOL_CALL_REUSED)
    return ToolCallOutcome(record, False)
