"""Run participation at claim (spec 01 "What a claim captures", spec 04 "Run participation").

`participation_capture(run)` runs after the claim committed, outside any write transaction; every
hook runs read-only through the runtime (`run_frame(mode="read")`). For the captured
extensions only (running, loaded at the roster's revision, with any of the grants `run_tools
files prompt compaction_handoff` or contributing skills), in roster order, it computes:

- prompt sections (`prompt`): the bounds of spec 04; a violation raises `CaptureRejected` whose
  release transaction also stops the extension (stop, release and re-queue in one transaction);
- tool modules (`run_tools`): declared tools with JSON schemas; a failure drops the module;
- files (`files`): the first captured extension; a failure rejects the claim;
- compaction handoff: the first captured extension with the grant (a missing hook stops it);
- skills: the skill directories contributed by the captured extensions.

A `Retry` from any of these hooks fails the claim with 503 and `Retry-After` (the run released,
its inputs re-queued). Retries are counted per (extension, hook, conversation) in the cache
(`runtime.crashes`) and bounded like every `Retry` (`HOST_RETRY_LIMIT`): past the bound the
hook's frame counts it as a defect and stops the extension.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import BaseModel, ValidationError

from conversations.capture import CaptureRejected
from conversations.models import Run
from conversations.selectors import entry_text, run_has_pending_steer, run_inputs
from core.errors import HostError
from core.validation import input_json_schema, json_problem
from extensions_host import registry
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.registry import LoadedExtension
from extensions_host.runtime import (
    FrameOutcome,
    InvalidResult,
    extension_stop,
    missing_handler_reason,
    run_frame,
)
from extensions_host.runtime.crashes import retries_asked, retry_noted
from extensions_host.runtime.hooks import encode_json
from extensions_host.services.errors import retry_error
from extensions_host.surfaces.models import ToolCallResult
from extensions_host.surfaces.types import FileRef, RunInfo, ToolModule

RUN_GRANTS = frozenset({"run_tools", "files", "prompt", "compaction_handoff"})

SECTION_NAME = re.compile(r"\A[a-z][A-Za-z0-9_-]{0,63}\Z")
SECTION_NAME_MAX = 64  # characters: what the pattern admits
SECTION_TEXT_MAX_BYTES = 8192
SECTIONS_PER_EXTENSION = 16
SECTIONS_TOTAL_BYTES = 65536
FILES_MAX = 256

MSG_PROMPT_INVALID = "Extension prompt is invalid"
MSG_PROMPT_FAILED = "Extension prompt failed"
MSG_PROMPT_UNAVAILABLE = "Extension prompt is unavailable"
MSG_FILES_FAILED = "Extension Files capture failed"
MSG_MODULE_INVALID = "Extension tool module is invalid"
MSG_HANDOFF_INVALID = "Extension compaction handoff is not JSON"
REASON_PROMPT_INVALID = "prompt: section is invalid or exceeds its bound"


@dataclass(frozen=True)
class Participant:
    row: RosterEntry
    loaded: LoadedExtension

    @property
    def id(self) -> str:
        return self.row.id

    @property
    def grants(self) -> frozenset[str]:
        return frozenset(self.row.admitted_grants or [])


def run_info(run: Run) -> RunInfo:
    """What hooks receive as `run`: its id, conversation and inputs (texts position-paired)."""
    inputs = run_inputs(run_id=run.pk)
    texts = [
        entry_text(s.entry.content) if getattr(s, "entry", None) and not s.entry.withdrawn else ""
        for s in inputs
    ]
    return RunInfo(
        id=run.pk,
        conversation_id=run.conversation_id,
        inputs=tuple(s.pk for s in inputs),
        input_texts=tuple(texts),
    )


def run_participants() -> list[Participant]:
    """Running extensions with a run grant or contributed skills, loaded here at the roster's
    revision, in roster order."""
    result = []
    rows = RosterEntry.objects.filter(status=ExtensionStatus.RUNNING).order_by("id")
    for row in rows:
        loaded = registry.get(row.id)
        if loaded is None or loaded.revision != row.revision:
            continue  # not runnable by this process (rolling deploy): not captured
        if takes_part_in_runs(row, loaded):
            result.append(Participant(row=row, loaded=loaded))
    return result


def takes_part_in_runs(row: RosterEntry, loaded: LoadedExtension | None) -> bool:
    """An extension takes part in runs with an admitted run grant or contributed skills."""
    if RUN_GRANTS & set(row.admitted_grants or []):
        return True
    return loaded is not None and bool(loaded.definition.contributions.skills)


def participation_capture(run: Run) -> dict[str, Any]:
    """Everything the claim captures for the run (see the module docstring)."""
    captured = run_participants()
    info = run_info(run)
    sections = _prompt_sections(captured, info)
    files = _files(captured, info)
    modules = _tool_modules(captured, info)
    handoff = _compaction_handoff(captured, info)
    return {
        "participants": [
            {"id": p.id, "fingerprint": p.loaded.fingerprint, "revision": p.loaded.revision}
            for p in captured
        ],
        "prompt_sections": sections,
        "tool_modules": modules,
        "skills": _skills(captured),
        "files": files,
        "compaction_handoff": handoff,
    }


def _skills(captured: list[Participant]) -> list[dict[str, Any]]:
    from extensions_host.contributions.services.skills import skills_for_claim

    ids = {p.id for p in captured}
    return [skill for skill in skills_for_claim() if skill["extension_id"] in ids]


def _read_hook(
    participant: Participant,
    hook: str,
    fn: Callable[..., Any],
    info: RunInfo,
    validate: Callable[[Any], Any] | None = None,
) -> FrameOutcome:
    """Run a claim-time hook read-only; a `Retry` fails the claim with 503 (see the module
    docstring)."""
    counted = {"extension_id": participant.id, "hook": hook, "item": info.conversation_id}
    attempt = retries_asked(**counted)
    outcome = run_frame(
        extension_id=participant.id,
        hook=hook,
        call=lambda ctx: fn(ctx, info),
        mode="read",
        failures="stop",
        boundary="request",
        validate=validate,
        retry_attempt=attempt,
    )
    retried = outcome.status == "retry"
    if retried or attempt:
        retry_noted(**counted, retried=retried)
    if retried:
        raise CaptureRejected(
            retry_error(
                extension_id=participant.id,
                after_seconds=outcome.retry_after,
                reason=outcome.reason,
            )
        )
    return outcome


def _stop_later(participant: Participant, hook: str, reason: str) -> Callable[[], None]:
    """A stop written into the claim's release transaction (stop + release + re-queue commit
    together)."""

    def stop() -> None:
        extension_stop(
            extension_id=participant.id,
            hook=hook,
            reason=reason,
            revision=participant.loaded.revision,
            enclosing=True,
        )

    return stop


# --- prompt sections --------------------------------------------------------------------------


def _prompt_sections(captured: list[Participant], info: RunInfo) -> list[dict[str, str]]:
    sections: list[dict[str, str]] = []
    total = 0
    for participant in captured:
        if "prompt" not in participant.grants:
            continue
        fn = participant.loaded.definition.hooks.single.get("prompt")
        if fn is None:
            raise CaptureRejected(
                HostError("extensions", "rejected", MSG_PROMPT_UNAVAILABLE),
                in_release_transaction=_stop_later(
                    participant, "prompt", missing_handler_reason("prompt")
                ),
            )
        outcome = _read_hook(participant, "prompt", fn, info)
        if outcome.status == "stopped":
            raise CaptureRejected(HostError("extensions", "rejected", MSG_PROMPT_FAILED))
        if not outcome.ok:
            continue  # stopped or updated meanwhile: it no longer takes part
        values, problem = prompt_sections_check(outcome.value)
        if problem is None:
            total += sum(len(v["text"].encode("utf-8")) for v in values)
            if total > SECTIONS_TOTAL_BYTES:
                problem = f"all sections together exceed {SECTIONS_TOTAL_BYTES} bytes"
        if problem is not None:
            raise CaptureRejected(
                HostError("extensions", "rejected", MSG_PROMPT_INVALID),
                in_release_transaction=_stop_later(
                    participant, "prompt", f"{REASON_PROMPT_INVALID}: {problem}"
                ),
            )
        sections.extend(
            {"name": f"{participant.id}.{v['name']}", "text": v["text"]}
            for v in sorted(values, key=lambda v: v["name"])
        )
    return sections


def prompt_sections_check(value: Any) -> tuple[list[dict[str, str]], str | None]:
    """The sections one extension returned, or the first rule they break (spec 04): a list of
    `{name, text}` (other keys ignored); name `^[a-z][A-Za-z0-9_-]{0,63}$`; text non-empty and
    at most 8,192 UTF-8 bytes; at most 16 sections; names unique."""
    if not isinstance(value, list | tuple):
        return [], "the result is not a list of sections"
    if len(value) > SECTIONS_PER_EXTENSION:
        return [], f"more than {SECTIONS_PER_EXTENSION} sections"
    result: list[dict[str, str]] = []
    for item in value:
        data = item.model_dump() if isinstance(item, BaseModel) else item
        # other keys are ignored, as the seed's decoder does (only attention items and command
        # input refuse extra properties)
        if not isinstance(data, dict) or not {"name", "text"} <= data.keys():
            return [], "a section has no {name, text}"
        name, text = data["name"], data["text"]
        if not isinstance(name, str) or SECTION_NAME.match(name) is None:
            return [], _name_problem(name)
        if not isinstance(text, str) or not text:
            return [], f"section {name} has no text"
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            size = -1
        if size < 0 or "\x00" in text:
            return [], f"section {name} is not valid text"
        if size > SECTION_TEXT_MAX_BYTES:
            return [], f"section {name} exceeds {SECTION_TEXT_MAX_BYTES} bytes"
        result.append({"name": name, "text": text})
    names = [section["name"] for section in result]
    if len(set(names)) != len(names):
        return [], "section names are not unique"
    return result, None


def _name_problem(name: Any) -> str:
    """Why `name` is no section name. A name is quoted only whole (never cut): the stop reason
    is redacted of the extension's secrets after, and a cut could leave a secret's head."""
    if isinstance(name, str) and len(name) <= SECTION_NAME_MAX:
        return f"section name {name!r} does not match {SECTION_NAME.pattern}"
    if isinstance(name, str):
        return f"a section name is longer than {SECTION_NAME_MAX} characters"
    return f"a section name is not a string but {type(name).__name__}"


# --- tool modules -----------------------------------------------------------------------------


def _tool_modules(captured: list[Participant], info: RunInfo) -> list[dict[str, Any]]:
    modules = []
    for participant in captured:
        if "run_tools" not in participant.grants:
            continue
        definition = participant.loaded.definition
        declared = definition.hooks.tools
        fn = definition.hooks.single.get("module_for_run")
        if fn is None:
            # no hook: the run gets every declared tool (none declared: no module)
            module: dict[str, Any] | None = (
                _module(participant, sorted(declared), "") if declared else None
            )
        else:
            outcome = _read_hook(
                participant,
                "module_for_run",
                fn,
                info,
                validate=partial(_module_of, participant),
            )
            module = outcome.value if outcome.ok else None  # a failure stopped it: no module
        if module is not None:
            modules.append(module)
    return modules


def _module_of(participant: Participant, value: Any) -> dict[str, Any] | None:
    """Validate what `module_for_run` returned: None, a `ToolModule`, a dict of one, or a list
    of declared tool names. Anything else (or an undeclared tool) is an invalid result."""
    if value is None:
        return None
    declared = participant.loaded.definition.hooks.tools
    try:
        if isinstance(value, list | tuple):
            spec = ToolModule(tools=list(value))
        elif isinstance(value, ToolModule):
            spec = value
        else:
            spec = ToolModule.model_validate(value)
    except (ValidationError, TypeError) as exc:
        raise InvalidResult(MSG_MODULE_INVALID) from exc
    names = sorted(declared) if spec.tools is None else list(dict.fromkeys(spec.tools))
    if any(name not in declared for name in names):
        raise InvalidResult(MSG_MODULE_INVALID)
    if not names:
        return None
    return _storable(_module(participant, names, spec.instructions), MSG_MODULE_INVALID)


def _module(participant: Participant, names: list[str], instructions: str) -> dict[str, Any]:
    declared = participant.loaded.definition.hooks.tools
    return {
        "extension": participant.id,
        "instructions": instructions,
        "tools": [
            {
                "name": name,
                "description": declared[name].description,
                "parameters": input_json_schema(declared[name].input),
            }
            for name in names
        ],
    }


# --- files and compaction handoff ------------------------------------------------------------


def _files(captured: list[Participant], info: RunInfo) -> list[dict[str, Any]]:
    participant = next((p for p in captured if "files" in p.grants), None)
    if participant is None:
        return []
    fn = participant.loaded.definition.hooks.single.get("files_for_run")
    if fn is None:
        raise CaptureRejected(
            # a granted capability without its hook is a failed capture (spec 04, Files)
            HostError("extensions", "rejected", MSG_FILES_FAILED),
            in_release_transaction=_stop_later(
                participant, "files_for_run", missing_handler_reason("files")
            ),
        )
    outcome = _read_hook(participant, "files_for_run", fn, info, validate=_files_of)
    if outcome.status == "stopped":
        raise CaptureRejected(HostError("extensions", "rejected", MSG_FILES_FAILED))
    return outcome.value if outcome.ok else []


def _files_of(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list | tuple) or len(value) > FILES_MAX:
        raise InvalidResult(MSG_FILES_FAILED)
    try:
        files = [v if isinstance(v, FileRef) else FileRef.model_validate(v) for v in value]
    except (ValidationError, TypeError) as exc:
        raise InvalidResult(MSG_FILES_FAILED) from exc
    return _storable(
        [f.model_dump(mode="json", exclude_none=True) for f in files], MSG_FILES_FAILED
    )


def _storable(value: Any, message: str) -> Any:
    """What a hook gave for the run's capture, which the claim stores: text the database cannot
    hold (a NUL, a lone surrogate) is an invalid result, alike on SQLite and PostgreSQL (as for
    prompt sections), never a failed claim."""
    if json_problem(value, max_depth=None) is not None:
        raise InvalidResult(message)
    return value


def _compaction_handoff(captured: list[Participant], info: RunInfo) -> dict[str, Any] | None:
    participant = next((p for p in captured if "compaction_handoff" in p.grants), None)
    if participant is None:
        return None
    fn = participant.loaded.definition.hooks.single.get("compaction_handoff")
    if fn is None:
        # granted without a handler: stopped the first time it is needed (spec 02); the run
        # goes on without a handoff
        extension_stop(
            extension_id=participant.id,
            hook="compaction_handoff",
            reason=missing_handler_reason("compaction_handoff"),
            revision=participant.loaded.revision,
        )
        return None
    outcome = _read_hook(
        participant,
        "compaction_handoff",
        fn,
        info,
        validate=lambda value: _storable(
            encode_json(value, MSG_HANDOFF_INVALID), MSG_HANDOFF_INVALID
        ),
    )
    if not outcome.ok or outcome.value is None:
        return None  # a failure stopped it; the run goes on without a handoff
    return {"extension": participant.id, "value": outcome.value}


# --- read helpers for run_tools extensions ---------------------------------------------------


def run_of(run: Any) -> Run | None:
    """`run` as hooks hold it (a RunInfo, a Run, or an id) → the Run row."""
    run_id = run.id if isinstance(run, RunInfo) else run.pk if isinstance(run, Run) else run
    if isinstance(run_id, bool) or not isinstance(run_id, int):
        return None
    return Run.objects.defer("capture").filter(pk=run_id).first()


def pending_steer(*, run: Any) -> bool:
    row = run_of(run)
    return row is not None and run_has_pending_steer(run=row)


def successful_tool_result(*, run: Any, tool_call_id: Any) -> bool:
    row = run_of(run)
    if row is None or not isinstance(tool_call_id, str):
        return False
    return ToolCallResult.objects.filter(run_id=row.pk, tool_call_id=tool_call_id, ok=True).exists()


def incompatible_migrations() -> list[dict[str, str]]:
    """Extensions that take part in runs but whose state migration failed (spec 04): for
    `GET /v1/meta`. They are stopped, so no run captures them until staff act."""
    rows = RosterEntry.objects.filter(
        status=ExtensionStatus.STOPPED, failing_hook="migration"
    ).order_by("id")
    return [
        {"id": row.id, "reason": row.reason}
        for row in rows
        if takes_part_in_runs(row, registry.get(row.id))
    ]
