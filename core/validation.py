"""Checks every app shares on values it takes in or is about to store.

- Can this JSON be stored? One walk decides it for conversation content, extension surfaces,
  extension settings and artifact payloads; each caller turns the problem into its own error (a
  400 with details, a `StateError`, a rejection) and picks the bounds where it differs (depth,
  size).
- Does this JSON input match the schema a pydantic model publishes (`model_from_json`: extension
  command input, tool-call arguments)? And what schema is that (`input_json_schema`: the command
  catalog, the tool parameters handed to the runtime)?
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from core.errors import HostError, bound_text

M = TypeVar("M", bound=BaseModel)

JSON_MAX_DEPTH = 32

PROBLEM_NOT_JSON = "Must be plain JSON (objects with string keys, arrays, strings, finite numbers)."
PROBLEM_NOT_FINITE = "Numbers must be finite."
PROBLEM_NUL = "Null characters are not allowed."
PROBLEM_NOT_UNICODE = "Text must be valid Unicode."


def decimal_number(raw: str, *, maximum: int) -> int | None:
    """A non-negative whole number written in ASCII digits (a header, a query parameter, slash
    command arguments), at most `maximum`; None for anything else. `str.isdigit` alone also
    takes digits `int` refuses ("²") and any other script's digits."""
    if not (raw.isascii() and raw.isdigit()) or len(raw) > len(str(maximum)):
        return None
    value = int(raw)
    return value if value <= maximum else None


def problem_too_deep(max_depth: int) -> str:
    return f"Nested deeper than {max_depth} levels."


def problem_too_large(max_bytes: int) -> str:
    return f"At most {max_bytes} bytes."


def text_problem(value: str) -> str | None:
    """Why the database cannot store this text, or None: PostgreSQL refuses NUL characters
    (text and jsonb alike), and a lone surrogate ("\\ud800") has no UTF-8 encoding."""
    if "\x00" in value:
        return PROBLEM_NUL
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return PROBLEM_NOT_UNICODE
    return None


# what no text column can hold: a NUL (PostgreSQL), a lone surrogate (no UTF-8 encoding; a
# Python string holds a valid pair as one code point, so any surrogate in it is alone)
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(value: str) -> str:
    """`value` with what the database cannot store (`text_problem`) replaced by U+FFFD: for text
    the host writes down rather than refuses, such as a stop reason quoting a failure."""
    return _UNSTORABLE.sub("\ufffd", value)


def json_problem(
    value: Any,
    *,
    max_depth: int | None = JSON_MAX_DEPTH,
    max_bytes: int | None = None,
    check_text: bool = True,
) -> str | None:
    """Why `value` cannot be stored as JSON, or None.

    Always: JSON's value space (None, bool, int, finite float, str, list/tuple, dict with
    string keys). `check_text`: every string and key also passes `text_problem` (a jsonb
    column); a caller storing the JSON *text*, where a NUL is escaped, may pass False.
    `max_depth`: no value nested deeper (the top level is depth 0); None only for values parsed
    from JSON text, which cannot be cyclic. `max_bytes`: the compact UTF-8 encoding
    (`json_size`) is at most this large.

    Each would otherwise surface as a database error (a 500) at insert time. The walk is
    iterative: no nesting, however deep, can exhaust the interpreter's stack.
    """
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if max_depth is not None and depth > max_depth:
            return problem_too_deep(max_depth)
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    return PROBLEM_NOT_JSON
                if check_text and (problem := text_problem(key)) is not None:
                    return problem
                pending.append((child, depth + 1))
        elif isinstance(item, list | tuple):
            pending.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            if check_text and (problem := text_problem(item)) is not None:
                return problem
        elif isinstance(item, float):
            if not math.isfinite(item):
                return PROBLEM_NOT_FINITE
        elif not (item is None or isinstance(item, bool | int)):
            return PROBLEM_NOT_JSON
    if max_bytes is not None and json_size(value) > max_bytes:
        return problem_too_large(max_bytes)
    return None


def json_size(value: Any) -> int:
    """The UTF-8 size of the compact JSON encoding of a value `json_problem` accepts (how
    every bound on stored JSON is measured)."""
    encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # surrogatepass: only a caller that skipped `check_text` can get here with one, and a
    # size is still an answer for it
    return len(encoded.encode("utf-8", "surrogatepass"))


class _ClosedObjectsJsonSchema(GenerateJsonSchema):
    """Pydantic's JSON schema with `additionalProperties: false` on every object that
    `model_from_json` closes: models, dataclasses and typed dicts, at the top level and in
    `$defs`, whatever the model's own `extra` config says (validation forbids extras anyway).
    A mapping (`dict[str, int]`) and a root model keep their schema: their keys are data."""

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        json_schema = super().model_schema(schema)
        if schema.get("root_model"):
            return json_schema
        return _closed(json_schema)

    def dataclass_schema(self, schema: core_schema.DataclassSchema) -> JsonSchemaValue:
        return _closed(super().dataclass_schema(schema))

    def typed_dict_schema(self, schema: core_schema.TypedDictSchema) -> JsonSchemaValue:
        return _closed(super().typed_dict_schema(schema))


def _closed(json_schema: JsonSchemaValue) -> JsonSchemaValue:
    if json_schema.get("type") == "object":
        json_schema["additionalProperties"] = False
    return json_schema


def input_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of what `model_from_json` accepts for `model`, as published to callers
    (the command catalog's `input_schema`, a tool's `parameters`): every object closed
    (`additionalProperties: false`), nested ones too, since extra fields are errors."""
    return model.model_json_schema(schema_generator=_ClosedObjectsJsonSchema)


def first_validation_problem(exc: ValidationError, *, max_chars: int = 200) -> str:
    """`<dotted field path>: <message>` of a validation error's first problem (just the message
    for the value as a whole), bounded: for a reason or log line that says what is wrong. Never
    the offending input itself (it may be a secret)."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    if not errors:
        return bound_text(str(exc.title), max_chars)
    problems = []
    for error in errors:
        path = ".".join(str(part) for part in error["loc"])
        problems.append(f"{path}: {error['msg']}" if path else error["msg"])
    return first_problem(problems, max_chars=max_chars)


def first_problem(problems: list[str], *, max_chars: int = 200) -> str:
    """The first of `problems`, with how many others there are (`… (and 2 more)`), bounded."""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return bound_text(f"{problems[0]}{more}", max_chars)


def model_from_json(
    model: type[M],
    data: Any,
    *,
    message: str,
    field_prefix: str = "",
    root: str = "non_field_errors",
) -> M:
    """`data` (parsed JSON) as an instance of `model`, checked as the JSON schema the model
    publishes says: a mismatch is `contract/invalid` (400) with `message`, and the problems by
    field in `details` (`field_prefix` + the dotted path; `root` for the value as a whole).

    Pydantic's strict JSON mode: no coercion a JSON schema does not allow ("10" for an integer,
    1 for a boolean), while what JSON can only carry as a string still comes from one (ISO
    datetimes, UUIDs, decimals, enum values). Extra fields are errors, nested ones too."""
    try:
        text = json.dumps(data, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        # a lone surrogate ("\ud800") has no UTF-8 encoding; anything else is not JSON at all
        problem = PROBLEM_NOT_UNICODE if isinstance(exc, UnicodeEncodeError) else PROBLEM_NOT_JSON
        raise HostError("contract", "invalid", message, details={root: [problem]}) from exc
    try:
        return model.model_validate_json(text, strict=True, extra="forbid")
    except ValidationError as exc:
        details: dict[str, list[str]] = {}
        for error in exc.errors(include_url=False):
            path = ".".join(str(part) for part in error["loc"])
            details.setdefault(f"{field_prefix}{path}" if path else root, []).append(error["msg"])
        raise HostError("contract", "invalid", message, details=details) from exc
