"""Extension commands over the API (spec 04): the check order, input/output validation, the
typed-error mapping and `Idempotency-Key`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from django.db import IntegrityError
from pydantic import BaseModel

from conversations.selectors import conversation_get
from core.auth import Principal
from core.errors import MSG_FORBIDDEN, HostError
from core.models import IdempotencyResult
from core.validation import input_json_schema, model_from_json
from extensions_host.contributions.outside import extension_available
from extensions_host.registry import LoadedExtension
from extensions_host.runtime.hooks import command_hook_name, hook_command
from extensions_host.runtime.outcomes import FrameOutcome
from extensions_host.runtime.stops import extension_stop, redact_secrets
from extensions_host.sdk import Caller, CatalogEntry, Command, Extension
from extensions_host.services.errors import (
    MSG_UNAVAILABLE,
    host_error_for,
    retry_error,
    stopped_message,
)

Scope = Literal["global", "conversation"]

MSG_UNKNOWN = "Extension command is unknown"
MSG_INPUT_INVALID = "Extension command input is invalid"
MSG_IDEMPOTENCY_CONFLICT = "Idempotency key was used with a different request"
MSG_IDEMPOTENCY_KEY_INVALID = "Idempotency-Key must be 1..256 characters"
MAX_IDEMPOTENCY_KEY = 256
# the status of a claimed key whose handler is still running: only its own frame sees the row
PENDING = 0


def no_handler_reason(name: str) -> str:
    return f"command {name} has no handler"


@dataclass(frozen=True)
class CommandResult:
    status: int
    body: Any
    replayed: bool = False


def command_call(
    *,
    principal: Principal,
    extension_id: str,
    name: str,
    scope: Scope,
    conversation_id: str | None,
    body: Any,
    idempotency_key: str | None = None,
) -> CommandResult:
    """Call a command, checking in the order of spec 04: the conversation (404/403), the
    `commands` grant (503), stopped (503), unknown command or scope (400), admin-only (403),
    input (400), handler (stop, 503); then the handler runs in a frame."""
    if scope == "conversation":
        assert conversation_id is not None
        conversation_get(principal=principal, conversation_id=conversation_id, write=True)
    loaded, _ = extension_available(extension_id=extension_id, grant="commands")
    spec = loaded.definition.commands.get(name)
    if spec is None or spec.scope != scope:
        raise HostError("contract", "invalid", MSG_UNKNOWN)
    if spec.admin_only and not principal.admin:
        raise HostError("auth", "forbidden", MSG_FORBIDDEN)
    # A retry answers its stored result only where the call itself would still be let in
    # (spec 04's order: a stopped or ungranted extension is 503 for retries too); the stored
    # result stands in for the input check and the handler, which must not run twice.
    replay = _Idempotency.of(principal, extension_id, name, conversation_id, body, idempotency_key)
    if replay is not None:
        stored = replay.lookup()
        if stored is not None:
            return stored
    data = _validate_input(spec, body)
    handler = loaded.definition.hooks.commands.get(name)
    if handler is None:
        stop = extension_stop(
            extension_id=extension_id,
            hook=command_hook_name(name),
            reason=no_handler_reason(name),
            revision=loaded.revision,
        )
        raise HostError("extensions", "unavailable", stopped_message(extension_id, stop.reason))
    caller = Caller(
        username=principal.user.get_username() if principal.is_authenticated else "",
        admin=principal.admin,
        service=principal.service,
    )
    try:
        outcome = hook_command(
            loaded=loaded,
            name=name,
            spec=spec,
            handler=handler,
            conversation_id=conversation_id,
            data=data,
            caller=caller,
            prepare=replay.claim if replay is not None else None,
            finish=replay.store if replay is not None else None,
        )
    except IntegrityError:
        # a call with the same key committed first (`claim` waited for it on the unique
        # index): answer with the result it stored
        stored = replay.lookup() if replay is not None else None
        if stored is None:
            raise
        return stored
    return _result(extension_id, outcome)


def _validate_input(spec: Command, body: Any) -> BaseModel:
    if not isinstance(body, dict):
        raise HostError(
            "contract",
            "invalid",
            MSG_INPUT_INVALID,
            details={"non_field_errors": ["Expected a JSON object."]},
        )
    return model_from_json(spec.input, body, message=MSG_INPUT_INVALID)


def _result(extension_id: str, outcome: FrameOutcome) -> CommandResult:
    if outcome.status == "ok":
        return CommandResult(status=200, body=outcome.value)
    if outcome.status == "failed" and outcome.error is not None:
        raise host_error_for(outcome.error, extension_id=extension_id)
    if outcome.status == "retry":
        raise retry_error(
            extension_id=extension_id, after_seconds=outcome.retry_after, reason=outcome.reason
        )
    if outcome.status == "stopped" or outcome.skip == "stopped":
        raise HostError("extensions", "unavailable", stopped_message(extension_id, outcome.reason))
    raise HostError("extensions", "unavailable", MSG_UNAVAILABLE)


@dataclass(frozen=True)
class _Idempotency:
    """The stored result of a call with an `Idempotency-Key`, claimed before its handler runs.

    `claim` inserts the key's row (pending) in the command's frame, before the handler; `store`
    fills it in with the result, in the same transaction, so the row only ever commits with a
    result, together with the handler's effects. A concurrent retry with the same key blocks
    on the row's unique index until the first call's frame ends: committed, it replays that
    result (`IntegrityError` in `command_call`); rolled back (a typed failure, a stop), nothing
    was stored and the retry runs the handler itself. The same pattern as tool calls.
    """

    scope: str
    key: str
    fingerprint: str
    extension_id: str

    @classmethod
    def of(
        cls,
        principal: Principal,
        extension_id: str,
        name: str,
        conversation_id: str | None,
        body: Any,
        key: str | None,
    ) -> _Idempotency | None:
        if key is None:
            return None
        if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY or "\x00" in key:
            raise HostError("contract", "invalid", MSG_IDEMPOTENCY_KEY_INVALID)
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        return cls(
            scope=f"extcmd:{principal.user_id}:{extension_id}:{name}:{conversation_id or ''}",
            key=key,
            fingerprint=hashlib.sha256(canonical.encode()).hexdigest(),
            extension_id=extension_id,
        )

    def lookup(self) -> CommandResult | None:
        stored = IdempotencyResult.objects.filter(scope=self.scope, key=self.key).first()
        if stored is None:
            return None
        if stored.request_fingerprint != self.fingerprint:
            raise HostError("contract", "conflict", MSG_IDEMPOTENCY_CONFLICT)
        return CommandResult(status=stored.status, body=stored.body, replayed=True)

    def claim(self) -> None:
        IdempotencyResult.objects.create(
            scope=self.scope,
            key=self.key,
            request_fingerprint=self.fingerprint,
            status=PENDING,
            body=None,
        )

    def store(self, value: Any) -> None:
        # kept for 24 hours, in the database and its backups: a secret the handler returned
        # (a token "shown once") is not kept with it; a replay shows it redacted
        IdempotencyResult.objects.filter(scope=self.scope, key=self.key).update(
            status=200, body=redact_secrets(value, self.extension_id)
        )


_catalogs: dict[tuple[str, str], list[CatalogEntry]] = {}


def command_catalog(loaded: LoadedExtension) -> list[CatalogEntry]:
    """The extension's command catalog (cached per revision)."""
    key = (loaded.id, loaded.revision)
    if key not in _catalogs:
        _catalogs[key] = _catalog(loaded.definition)
    return _catalogs[key]


def _catalog(definition: Extension) -> list[CatalogEntry]:
    return [
        CatalogEntry(
            name=name,
            scope=spec.scope,
            description=spec.description,
            admin_only=spec.admin_only,
            input_schema=input_json_schema(spec.input),
            output_schema=spec.output.model_json_schema() if spec.output else None,
        )
        for name, spec in sorted(definition.commands.items())
    ]
