"""Typed inputs and results of the artifact store, and the validation of their shape.

A malformed input is the runtime's bug, not the model's: it is a `contract/invalid` 400 and
nothing is written. What the *model* got wrong (an undeclared output, a bad payload, a bound
reached) is a rejection with markdown instead (`services/emit.py`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import exceptions as jsonschema_exceptions
from jsonschema import validators as jsonschema_validators
from referencing import Registry
from referencing.exceptions import NoSuchResource

from artifacts.fingerprints import blank
from artifacts.models import (
    CONTEXT_FIELDS,
    ID_MAX,
    NAME_MAX,
    ContentType,
    Invalidation,
    Save,
    Strategy,
)
from core.errors import HostError
from core.validation import json_problem

MSG_CONTEXT_INVALID = "Artifact operation context is invalid"
MSG_REQUEST_CONTEXT_INVALID = "Artifact request context is invalid"
MSG_DECLARATION_INVALID = "Artifact declaration is invalid"
MSG_ARGUMENT_INVALID = "Artifact call arguments are invalid"

MAX_DECLARATIONS = 256
MAX_EMITS_LIMIT = 100_000
MAX_ARTIFACT_BYTES_LIMIT = 2**53 - 1  # the seed's safe-integer bound


def invalid(message: str, field_name: str, problem: str) -> HostError:
    return HostError("contract", "invalid", message, details={field_name: [problem]})


def check_id(value: Any, field_name: str, message: str, *, limit: int = ID_MAX) -> str:
    """A non-blank string of at most `limit` characters (kept exactly: identities are
    compared byte for byte, so nothing is trimmed)."""
    if not isinstance(value, str) or blank(value):
        raise invalid(message, field_name, "Must be a non-empty string.")
    if "\x00" in value:  # PostgreSQL text cannot hold NUL
        raise invalid(message, field_name, "Must not contain NUL characters.")
    if len(value) > limit:
        raise invalid(message, field_name, f"Must be at most {limit} characters.")
    return value


def check_int(value: Any, field_name: str, message: str, *, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(message, field_name, "Must be an integer.")
    if not minimum <= value <= maximum:
        raise invalid(message, field_name, f"Must be between {minimum} and {maximum}.")
    return value


@dataclass(frozen=True)
class OperationContext:
    """The frozen identity of an operation."""

    world_id: str
    parent_head: str
    operation_id: str
    preset_id: str
    preset_revision: str
    preset_scripts_enabled: bool

    def check(self) -> OperationContext:
        check_id(self.world_id, "world_id", MSG_CONTEXT_INVALID, limit=64)
        for name in ("parent_head", "operation_id", "preset_id", "preset_revision"):
            check_id(getattr(self, name), name, MSG_CONTEXT_INVALID)
        if not isinstance(self.preset_scripts_enabled, bool):
            raise invalid(MSG_CONTEXT_INVALID, "preset_scripts_enabled", "Must be a boolean.")
        return self

    def identity(self) -> tuple[str, str, str, str, str, bool]:
        return (
            self.world_id,
            self.parent_head,
            self.operation_id,
            self.preset_id,
            self.preset_revision,
            self.preset_scripts_enabled,
        )

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in CONTEXT_FIELDS}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> OperationContext:
        return cls(
            world_id=data["world_id"],
            parent_head=data["parent_head"],
            operation_id=data["operation_id"],
            preset_id=data["preset_id"],
            preset_revision=data["preset_revision"],
            preset_scripts_enabled=data["preset_scripts_enabled"],
        )


# Read once: a TextChoices' `.values` builds its list on every access (and every emit checks
# its declarations).
_DECLARATION_CHOICES = tuple(
    (name, choices.values)
    for name, choices in (
        ("content_type", ContentType),
        ("save", Save),
        ("strategy", Strategy),
        ("invalidation", Invalidation),
    )
)


@dataclass(frozen=True)
class Declaration:
    """An output a request may emit."""

    name: str
    channel: str
    content_type: str
    save: str
    strategy: str
    invalidation: str
    max_emits: int
    key: str = ""
    renderer: str = ""
    renderer_revision: str = ""
    payload_contract: Mapping[str, Any] | None = None

    def check(self, index: int) -> Declaration:
        where = f"declarations[{index}]"
        for name in ("name", "channel"):
            check_id(
                getattr(self, name), f"{where}.{name}", MSG_DECLARATION_INVALID, limit=NAME_MAX
            )
        for name, choices in _DECLARATION_CHOICES:
            if getattr(self, name) not in choices:
                raise invalid(
                    MSG_DECLARATION_INVALID, f"{where}.{name}", f"Must be one of {choices}."
                )
        check_int(
            self.max_emits,
            f"{where}.max_emits",
            MSG_DECLARATION_INVALID,
            minimum=1,
            maximum=MAX_EMITS_LIMIT,
        )
        # The seed's records carry a key exactly when they upsert.
        if self.strategy == Strategy.UPSERT:
            check_id(self.key, f"{where}.key", MSG_DECLARATION_INVALID, limit=NAME_MAX)
        elif self.key != "":
            raise invalid(MSG_DECLARATION_INVALID, f"{where}.key", "Only upsert takes a key.")
        if (self.renderer == "") != (self.renderer_revision == ""):
            raise invalid(
                MSG_DECLARATION_INVALID,
                f"{where}.renderer",
                "renderer and renderer_revision come together.",
            )
        if self.renderer:
            check_id(self.renderer, f"{where}.renderer", MSG_DECLARATION_INVALID, limit=NAME_MAX)
            check_id(
                self.renderer_revision,
                f"{where}.renderer_revision",
                MSG_DECLARATION_INVALID,
                limit=NAME_MAX,
            )
        if self.payload_contract is not None:
            if self.content_type != ContentType.APPLICATION_JSON:
                raise invalid(
                    MSG_DECLARATION_INVALID,
                    f"{where}.payload_contract",
                    "Only application/json outputs take a payload contract.",
                )
            problem = contract_problem(self.payload_contract)
            if problem is not None:
                raise invalid(MSG_DECLARATION_INVALID, f"{where}.payload_contract", problem)
        return self

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Declaration:
        return cls(
            name=data["name"],
            channel=data["channel"],
            content_type=data["content_type"],
            save=data["save"],
            strategy=data["strategy"],
            invalidation=data["invalidation"],
            max_emits=data["max_emits"],
            key=data.get("key") or "",
            renderer=data.get("renderer") or "",
            renderer_revision=data.get("renderer_revision") or "",
            payload_contract=data.get("payload_contract"),
        )


@dataclass(frozen=True)
class RequestContext:
    """One model request attempt within an operation, with what it may emit."""

    operation: OperationContext
    request_id: str
    request_attempt: int
    max_artifact_bytes: int
    declarations: tuple[Declaration, ...] = field(default=())

    def check(self) -> RequestContext:
        self.operation.check()
        check_id(self.request_id, "request_id", MSG_REQUEST_CONTEXT_INVALID)
        check_int(
            self.request_attempt,
            "request_attempt",
            MSG_REQUEST_CONTEXT_INVALID,
            minimum=1,
            maximum=2**31 - 1,
        )
        check_int(
            self.max_artifact_bytes,
            "max_artifact_bytes",
            MSG_REQUEST_CONTEXT_INVALID,
            minimum=0,
            maximum=MAX_ARTIFACT_BYTES_LIMIT,
        )
        if len(self.declarations) > MAX_DECLARATIONS:
            raise invalid(
                MSG_REQUEST_CONTEXT_INVALID,
                "declarations",
                f"At most {MAX_DECLARATIONS} declarations.",
            )
        names: set[str] = set()
        for index, declaration in enumerate(self.declarations):
            declaration.check(index)
            if declaration.name in names:
                raise invalid(
                    MSG_DECLARATION_INVALID, f"declarations[{index}].name", "Names are unique."
                )
            names.add(declaration.name)
        return self

    def declaration(self, output: str) -> Declaration | None:
        for declaration in self.declarations:
            if declaration.name == output:
                return declaration
        return None

    @property
    def world_id(self) -> str:
        return self.operation.world_id

    @property
    def operation_id(self) -> str:
        return self.operation.operation_id

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> RequestContext:
        return cls(
            operation=OperationContext.from_data(data),
            request_id=data["request_id"],
            request_attempt=data["request_attempt"],
            max_artifact_bytes=data["max_artifact_bytes"],
            declarations=tuple(Declaration.from_data(d) for d in data.get("declarations", [])),
        )


MSG_CONTRACT_REMOTE_REF = (
    "Only local $ref (starting with #) are allowed: a payload contract never fetches schemas."
)
MSG_CONTRACT_TOO_DEEP = "Not a valid JSON Schema: nested too deeply."
_REF_KEYWORDS = ("$ref", "$dynamicRef")
# Keywords whose values are data, not subschemas: a "$ref" inside them is not a reference.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


def _refuse_retrieval(uri: str) -> Any:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs' __init__, unseen by mypy


# jsonschema's default registry retrieves any `$ref` URL over HTTP, without a timeout, while
# the emit holds its world's lock: a contract could make the server fetch what it names. This
# one resolves only within the contract (and the draft meta-schemas jsonschema adds).
_LOCAL_ONLY: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def _has_remote_ref(schema: Any) -> bool:
    """Whether a schema refers to anything but itself (a `$ref` not starting with "#").
    Walked with a stack, not recursion: any nesting the JSON parser took is fine here."""
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
        elif isinstance(node, Mapping):
            for key, value in node.items():
                if key in _REF_KEYWORDS and isinstance(value, str) and not value.startswith("#"):
                    return True
                if key not in _DATA_KEYWORDS:
                    pending.append(value)
    return False


class _RemoteRefError(ValueError):
    pass


@functools.lru_cache(maxsize=256)
def _contract_validator(contract_json: str) -> Any:
    """A validator for a contract, checked once (cached: every call re-declares its contracts)."""
    schema = json.loads(contract_json)
    if _has_remote_ref(schema):
        raise _RemoteRefError(MSG_CONTRACT_REMOTE_REF)
    cls = jsonschema_validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, registry=_LOCAL_ONLY)


def _contract_key(contract: Mapping[str, Any]) -> str:
    return json.dumps(contract, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def contract_problem(contract: Any) -> str | None:
    """Why `contract` is not a usable JSON Schema, or None."""
    if not isinstance(contract, Mapping):
        return "Must be a JSON Schema object."
    try:
        _contract_validator(_contract_key(contract))
    except _RemoteRefError:
        return MSG_CONTRACT_REMOTE_REF
    except jsonschema_exceptions.SchemaError as exc:
        return f"Not a valid JSON Schema: {exc.message}"[:500]
    except (TypeError, ValueError) as exc:
        return f"Not a valid JSON Schema: {exc}"[:500]
    except RecursionError:  # the meta-schema check recurses per level of the contract
        return MSG_CONTRACT_TOO_DEEP
    return None


def contract_violation(contract: Mapping[str, Any], payload: Any) -> str | None:
    """The first way `payload` fails `contract` (a checked schema), or None."""
    validator = _contract_validator(_contract_key(contract))
    try:
        error = jsonschema_exceptions.best_match(validator.iter_errors(payload))
    except Exception as exc:  # an unresolvable $ref, a broken pattern: the payload can't pass
        return f"the payload contract cannot be applied ({type(exc).__name__})"
    if error is None:
        return None
    where = error.json_path
    return f"{error.message} at {where}"


def is_json_value(value: Any) -> bool:
    """JSON's value space: no NaN/Infinity, string keys only.

    A payload is stored as its JSON *text* (a NUL is escaped there), parsed from the request
    (no depth bound beyond the parser's); a lone surrogate is the emit's own rejection, found
    where it encodes the payload anyway."""
    return json_problem(value, max_depth=None, check_text=False) is None


@dataclass(frozen=True)
class EmitResult:
    ok: bool
    markdown: str
    record_id: str | None = None
    idempotent: bool = False

    def as_dict(self) -> dict[str, Any]:
        if not self.ok:
            return {"ok": False, "markdown": self.markdown}
        return {
            "ok": True,
            "idempotent": self.idempotent,
            "record_id": self.record_id,
            "markdown": self.markdown,
        }


@dataclass(frozen=True)
class ClearResult:
    ok: bool
    markdown: str
    idempotent: bool = False

    def as_dict(self) -> dict[str, Any]:
        if not self.ok:
            return {"ok": False, "markdown": self.markdown}
        return {"ok": True, "idempotent": self.idempotent, "markdown": self.markdown}


@dataclass(frozen=True)
class FollowupSummary:
    """What the runtime needs to know about an operation's follow-up."""

    operation_id: str
    status: str
    completed_requests: list[str]
    core_committed: bool
    message: str | None = None
    head: str | None = None


@dataclass(frozen=True)
class AttemptResult:
    operation_id: str
    request_id: str
    request_attempt: int
    current_attempt: int | None
    recorded: bool
    superseded_records: int = 0


@dataclass(frozen=True)
class ReconcileResult:
    world_id: str
    head: str
    superseded_records: list[str]
    superseded_operations: list[str]
