"""Typed host methods, one per hook kind: each builds the call and its result check, and runs
it through `run_frame` (later capabilities add theirs here: timers, settled, lifecycle, tools).
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from core.validation import first_validation_problem, json_problem
from extensions_host.registry import LoadedExtension
from extensions_host.runtime.context import HookContext
from extensions_host.runtime.current import InvalidResult
from extensions_host.runtime.frames import run_frame
from extensions_host.runtime.outcomes import FrameOutcome
from extensions_host.runtime.pages import FramePage
from extensions_host.sdk import Caller, CatalogEntry, Command

MSG_OUTPUT_INVALID = "Extension command output is invalid"
MSG_RESULT_NOT_JSON = "Extension command result is not JSON"
MSG_RESULT_NOT_KEPT = (
    "Extension command result cannot be kept for its Idempotency-Key (a NUL or a lone surrogate)"
)
MSG_PROJECTION_INVALID = "Extension projection is invalid"
MSG_CATALOG_INVALID = "Extension catalog is invalid"

_ENCODE_ERRORS = (ValidationError, PydanticSerializationError, ValueError, TypeError)


def command_hook_name(name: str) -> str:
    return f"command {name}"


def encode_model(model: type[BaseModel], value: Any, message: str) -> Any:
    """`value` (an instance or plain data) validated by `model`, as JSON data. Invalid: the
    `message`, and for a validation error its first field and problem (the stop reason says
    what is wrong; never the value itself)."""
    try:
        instance = value if isinstance(value, model) else model.model_validate(value)
        data = instance.model_dump(mode="json")
        model.model_validate(data)
    except ValidationError as exc:
        raise InvalidResult(f"{message}: {first_validation_problem(exc)}") from exc
    except _ENCODE_ERRORS as exc:
        raise InvalidResult(message) from exc
    return data


def encode_json(value: Any, message: str) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidResult(message) from exc


def hook_command(
    *,
    loaded: LoadedExtension,
    name: str,
    spec: Command,
    handler: Callable[..., Any],
    conversation_id: str | None,
    data: BaseModel,
    caller: Caller | None,
    prepare: Callable[[], bool | None] | None = None,
    finish: Callable[[Any], None] | None = None,
) -> FrameOutcome:
    """Run a command handler in a request frame; the result is validated against the declared
    output model (or must be JSON) — an invalid result is a defect. `prepare` and `finish` are
    the frame's host bookkeeping before and after the handler (`run_frame`)."""

    def call(ctx: HookContext) -> Any:
        if spec.scope == "conversation":
            return handler(ctx, conversation_id, data)
        return handler(ctx, data)

    def validate(result: Any) -> Any:
        if spec.output is not None:
            value = encode_model(spec.output, result, MSG_OUTPUT_INVALID)
        else:
            value = encode_json(result, MSG_RESULT_NOT_JSON)
        if finish is not None and json_problem(value, max_depth=None) is not None:
            # kept for the key's replay (`finish`), so it must be storable, as a tool result
            raise InvalidResult(MSG_RESULT_NOT_KEPT)
        return value

    return run_frame(
        extension_id=loaded.id,
        hook=command_hook_name(name),
        call=call,
        failures="return",
        boundary="request",
        validate=validate,
        observe=[conversation_id] if conversation_id else [],
        caller=caller,
        prepare=prepare,
        finish=finish,
    )


def hook_project(
    *,
    loaded: LoadedExtension,
    conversation_id: str,
    project: bool,
    catalog: list[CatalogEntry] | None,
    page: FramePage | None = None,
) -> FrameOutcome:
    """The read-only projection of one extension: `(value, catalog)` — the `project` hook's
    value encoded with the projection schema (None → null), and the command catalog adapted by
    `project_catalog(value, catalog)` or `project_catalog(value)` when defined. Any failure
    stops the extension."""
    definition = loaded.definition
    hooks = definition.hooks.single

    def call(ctx: HookContext) -> Any:
        value: Any = None
        projected: Any = None
        if project:
            projected = hooks["project"](ctx, conversation_id)
            if inspect.isawaitable(projected):
                return projected  # the frame stops it as an async crossing
            if projected is not None:
                # `project` without `projection_schema` is a DefinitionError at declaration
                assert definition.projection_schema is not None
                value = encode_model(
                    definition.projection_schema, projected, MSG_PROJECTION_INVALID
                )
        entries = catalog
        adapt = hooks.get("project_catalog")
        if catalog is not None and adapt is not None and projected is not None:
            assert ctx._frame is not None
            ctx._frame.hook = "project_catalog"  # failures from here on name this hook
            if catalog_takes_catalog(adapt):
                adapted = adapt(projected, list(catalog))
            else:
                adapted = adapt(projected)
            if inspect.isawaitable(adapted):
                return adapted
            if not isinstance(adapted, list | tuple):
                raise InvalidResult(MSG_CATALOG_INVALID)
            entries = [
                item if isinstance(item, CatalogEntry) else _catalog_entry(item) for item in adapted
            ]
        return value, (
            None if entries is None else [entry.model_dump(mode="json") for entry in entries]
        )

    return run_frame(
        extension_id=loaded.id,
        hook="project",
        call=call,
        mode="read",
        failures="stop",
        boundary="request",
        page=page,
    )


@functools.cache
def catalog_takes_catalog(adapt: Callable[..., Any]) -> bool:
    """Whether a `project_catalog` function takes `(value, catalog)` (the SDK's form) or just
    `(value)` (spec 02 §1's table): read from its signature once, at its first call, so a
    TypeError raised inside it is never mistaken for the other form."""
    try:
        signature = inspect.signature(adapt)
    except (TypeError, ValueError):
        return True  # no readable signature (a builtin): the two-argument form
    for arguments in ((None, None), (None,)):
        try:
            signature.bind(*arguments)
        except TypeError:
            continue
        return len(arguments) == 2
    return True  # takes neither: the two-argument call fails as the defect it is


def _catalog_entry(item: Any) -> CatalogEntry:
    try:
        return CatalogEntry.model_validate(item)
    except ValidationError as exc:
        raise InvalidResult(MSG_CATALOG_INVALID) from exc
