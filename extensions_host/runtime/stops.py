"""Stopping an extension: the reason (format, redaction, bound), the durable stop record, the
structured log event and the audit entry.

Reason formats (spec 02 §3): an `ExtensionStop` gives its own reason; a typed failure in a
background hook `<hook>: <ErrorType>: <message>`; any other exception `<hook> defect: <message>`;
a timeout `<hook> exceeded its deadline`. Reasons are redacted, then bounded to 512 characters
(ending in `…` when cut).
"""

from __future__ import annotations

import json
import logging
import re
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction

from core import clock
from core.errors import HostError, bound_text
from core.services import audit_record
from core.validation import storable_text
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime.current import TransientDatabaseError
from extensions_host.runtime.transient import is_transient, with_transient_retries
from extensions_host.sdk import ExtensionStop, SdkError
from extensions_host.services.recovery import auto_resume_next_at

logger = logging.getLogger("extensions_host.stops")

REASON_MAX = 512
CAUSE_MAX = 8000  # the logged cause keeps its last characters (the innermost frames, the error)
REDACTED = "[redacted]"
SECRET_MIN_CHARS = 4  # a shorter secret value is not redacted (it would match ordinary text)

# Sources of an extension's secret values (the secrets store registers one): every value is
# removed from reasons and logged causes of that extension.
secret_sources: list[Callable[[str], Iterable[str]]] = []
# Called after a stop commits, with the extension id (attention visibility, metrics, …).
stop_listeners: list[Callable[[str], None]] = []

_BEARER = re.compile(r"(?i)\b(bearer|token)(\s*[:=]?\s*)[A-Za-z0-9._~+/=-]{8,}")
_TOKEN_SHAPED = re.compile(
    r"\b(?:hy_[A-Za-z0-9_-]{16,}"
    r"|sk-[A-Za-z0-9_-]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"
)


def redact(text: str, extension_id: str) -> str:
    """Remove the extension's secret values, the host's service tokens and anything shaped like
    a bearer token."""
    text = _without(text, _secret_forms(extension_id))
    text = _BEARER.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return _TOKEN_SHAPED.sub(REDACTED, text)


def redact_secrets(value: Any, extension_id: str) -> Any:
    """A JSON value with the extension's secret values and the host's service tokens replaced
    in every string, keys included (the exact values only, no guessing at token shapes: the
    value is a result, not a message). What the host keeps of a result for later (a command's
    stored idempotent replay) never holds a secret in plaintext."""
    forms = _secret_forms(extension_id)
    if not forms:
        return value

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return _without(item, forms)
        if isinstance(item, dict):
            return {walk(key): walk(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [walk(inner) for inner in item]
        return item

    return walk(value)


def _secret_forms(extension_id: str) -> list[str]:
    """The extension's secret values and the host's service tokens, each as written and escaped
    as messages quote it (`KeyError(secret)` shows its repr, a JSON text its `json.dumps`),
    longest first, so a secret containing another is removed whole."""
    values: set[str] = {token for token in settings.HOST_API_TOKEN if token}
    for source in secret_sources:
        try:
            values.update(v for v in source(extension_id) if isinstance(v, str) and v)
        except Exception:  # a broken source must not block a stop
            logger.exception("secret source failed while redacting")
    forms = {
        form
        for value in values
        if len(value) >= SECRET_MIN_CHARS
        for form in (value, repr(value)[1:-1], json.dumps(value)[1:-1])
    }
    return sorted(forms, key=len, reverse=True)


def _without(text: str, forms: list[str]) -> str:
    for form in forms:
        text = text.replace(form, REDACTED)
    return text


def bounded_reason(reason: str, extension_id: str, limit: int = REASON_MAX) -> str:
    """A failure's text as the host writes it down: redacted, storable (a NUL or a lone
    surrogate quoted from the failure would make the write itself fail), at most `limit`."""
    return bound_text(storable_text(redact(reason, extension_id)), limit)


def exception_message(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def reason_for(hook: str, exc: BaseException) -> str:
    """The stop reason for an exception that escaped a hook."""
    if isinstance(exc, ExtensionStop):
        return exc.reason
    if isinstance(exc, SdkError):
        return f"{hook}: {type(exc).__name__}: {exc.message}"
    return f"{hook} defect: {exception_message(exc)}"


def deadline_reason(hook: str) -> str:
    return f"{hook} exceeded its deadline"


def async_reason(hook: str) -> str:
    return f"{hook} crossed an asynchronous boundary inside a core transaction"


def missing_handler_reason(capability: str) -> str:
    return f"{capability}: granted capability has no handler"


@dataclass(frozen=True)
class StopRecord:
    """What a stop did: `applied` is False when the extension was already stopped (its stored
    reason is returned) or a newer revision was synced meanwhile."""

    extension_id: str
    hook: str
    reason: str
    event_id: str
    applied: bool


def extension_stop(
    *,
    extension_id: str,
    hook: str,
    reason: str,
    cause: BaseException | None = None,
    revision: str | None = None,
    enclosing: bool = False,
) -> StopRecord:
    """Record a stop durably: `status=stopped`, reason, time, failing hook, log event id.

    `FOR UPDATE` on the roster row waits for in-flight frames of this extension (they hold it
    `FOR SHARE`), so no frame starts after the stop commits. `enclosing=True` writes into the
    caller's transaction (frames sharing an outer commit); otherwise in its own transaction.
    A stop that cannot be written fails the triggering operation with `store/unavailable`.
    """
    text = bounded_reason(reason, extension_id)
    event_id = uuid.uuid4().hex
    cause_text = _cause_text(cause, extension_id)

    def write() -> tuple[bool, str]:
        row = RosterEntry.objects.select_for_update().filter(pk=extension_id).first()
        if row is None:
            return False, text
        if row.status != ExtensionStatus.RUNNING:
            return False, row.reason or text
        if revision is not None and row.revision != revision:
            return False, text  # a newer revision was synced; this old code's failure is moot
        now = clock.now()
        row.status = ExtensionStatus.STOPPED
        row.reason = text
        row.last_error = text
        row.stopped_at = now
        row.failing_hook = hook[:128]
        row.stop_event_id = event_id
        row.next_auto_resume_at = auto_resume_next_at(row=row, stopped_at=now)
        row.save(
            update_fields=[
                "status",
                "reason",
                "last_error",
                "stopped_at",
                "failing_hook",
                "stop_event_id",
                "next_auto_resume_at",
                "updated_at",
            ]
        )
        audit_record(
            actor=f"ext:{extension_id}",
            action="extension_stopped",
            target=extension_id,
            detail={"hook": hook, "reason": text, "event_id": event_id},
        )
        return True, text

    def durable_write() -> tuple[bool, str]:
        with transaction.atomic(durable=True):
            return write()

    try:
        if enclosing:
            with transaction.atomic():
                applied, stored = write()
        else:
            applied, stored = with_transient_retries(durable_write)
    except DatabaseError as exc:
        if enclosing and is_transient(exc):
            # inside a page: a deadlock/serialization failure retries the whole page; the stop
            # is written again on the retry, so nothing is lost
            raise TransientDatabaseError(str(exc)) from exc
        _log(extension_id, hook, text, event_id, cause_text, durable=False)
        raise HostError(
            "store", "unavailable", f"Extension {extension_id} stop status is unavailable"
        ) from exc
    except HostError as exc:
        _log(extension_id, hook, text, event_id, cause_text, durable=False)
        raise HostError(
            "store", "unavailable", f"Extension {extension_id} stop status is unavailable"
        ) from exc
    if applied:

        def committed() -> None:
            _log(extension_id, hook, text, event_id, cause_text, durable=True)
            for listener in stop_listeners:
                listener(extension_id)

        if enclosing:
            transaction.on_commit(committed)
        else:
            committed()
    return StopRecord(
        extension_id=extension_id, hook=hook, reason=stored, event_id=event_id, applied=applied
    )


def in_host_transaction() -> bool:
    """True inside an atomic block the host (not the test runner) opened."""
    return any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks)


def _cause_text(cause: BaseException | None, extension_id: str) -> str | None:
    if cause is None:
        return None
    text = "".join(traceback.format_exception(cause))
    # redact the whole text before cutting it: a cut first could split a secret, leaving its
    # tail unmatched and in clear
    return redact(text, extension_id)[-CAUSE_MAX:]


def _log(
    extension_id: str, hook: str, reason: str, event_id: str, cause: str | None, *, durable: bool
) -> None:
    logger.error(
        "extension_stopped",
        extra={
            "event": "extension_stopped",
            "event_id": event_id,
            "extension_id": extension_id,
            "hook": hook,
            "reason": reason,
            "durable": durable,
            "cause": cause,
        },
    )
