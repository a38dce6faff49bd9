"""Typed SDK failures → the host's error model (spec 02 §3, after the seed's commandFailure).

Their messages go to API callers: redacted of the extension's secrets like stop reasons are
(spec 02 §6: messages never include secrets), then bounded."""

from __future__ import annotations

import math

from core.errors import Category, Cause, HostError, bound_text
from extensions_host.runtime.stops import redact
from extensions_host.sdk import AdmissionError, CommandError, SdkError, StateError

MESSAGE_MAX = 512
MSG_UNAVAILABLE = "Extension is unavailable"


def stopped_message(extension_id: str, reason: str) -> str:
    """The message of 503 `extensions/unavailable` for a stopped extension (spec 04)."""
    return f"Extension {extension_id} is stopped: {reason}"


_COMMAND: dict[str, tuple[Category, Cause]] = {
    "invalid": ("contract", "invalid"),
    "conflict": ("store", "conflict"),
    "not_found": ("store", "not_found"),
    "rejected": ("extensions", "rejected"),
}
_ADMISSION: dict[str, tuple[Category, Cause]] = {
    "invalid": ("contract", "invalid"),
    "conflict": ("contract", "conflict"),
    "closed": ("contract", "closed"),
    "throttled": ("limit", "throttled"),
}
_STATE: dict[str, tuple[Category, Cause]] = {
    "bound": ("contract", "invalid"),
    "conflict": ("store", "conflict"),
    "encode": ("store", "unavailable"),
    "decode": ("store", "unavailable"),
    "unavailable": ("store", "unavailable"),
}


def _caller_message(text: str, extension_id: str) -> str:
    """A message of the extension's code as a caller may see it."""
    return bound_text(redact(text, extension_id), MESSAGE_MAX)


def host_error_for(error: SdkError, *, extension_id: str) -> HostError:
    """The caller-facing error for a typed failure of a command, route or `transact`."""
    table: dict[str, tuple[Category, Cause]] = (
        _COMMAND
        if isinstance(error, CommandError)
        else _ADMISSION
        if isinstance(error, AdmissionError)
        else _STATE
        if isinstance(error, StateError)
        else {}
    )
    category, cause = table.get(error.kind, ("store", "unavailable"))
    retry_after = 1 if cause == "throttled" else None
    return HostError(
        category,
        cause,
        _caller_message(error.message, extension_id),
        retry_after=retry_after,
    )


def retry_error(*, extension_id: str, after_seconds: float | None, reason: str) -> HostError:
    """`Retry` from a command or route: 503 with `Retry-After`."""
    return HostError(
        "extensions",
        "unavailable",
        _caller_message(f"Extension {extension_id} asked to retry: {reason}", extension_id),
        retry_after=max(1, math.ceil(after_seconds or 1)),
    )
