"""Typed failures an extension raises (or receives) — the SDK's error vocabulary.

`StateError`, `AdmissionError` and `CommandError` are *typed* failures: in a command handler, a
route or a `ctx.transact`/`ctx.update` body they roll back the frame and go back to the caller
without stopping the extension. In a background hook (timer, settled, lifecycle, tool call) any
exception but `Retry` stops the extension. `ExtensionStop` stops it on purpose, with its reason.
"""

from __future__ import annotations

from typing import ClassVar, Literal

StateErrorKind = Literal["bound", "conflict", "encode", "decode", "unavailable"]
AdmissionErrorKind = Literal["invalid", "conflict", "closed", "throttled"]
CommandErrorKind = Literal["invalid", "conflict", "not_found", "rejected"]

RETRY_MAX_SECONDS = 24 * 3600


class SdkError(Exception):
    """A typed extension failure with a `kind` from a closed set and a caller-safe message."""

    kinds: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, kind: str, message: str = "") -> None:
        if kind not in self.kinds:
            raise ValueError(f"{type(self).__name__} kind must be one of {sorted(self.kinds)}")
        self.kind = kind
        self.message = message or f"{type(self).__name__}({kind})"
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.kind!r}, {self.message!r})"


class StateError(SdkError):
    """Records, documents, timers, attention: `bound | conflict | encode | decode | unavailable`."""

    kinds = frozenset({"bound", "conflict", "encode", "decode", "unavailable"})

    def __init__(self, kind: StateErrorKind, message: str = "") -> None:
        super().__init__(kind, message)


class AdmissionError(SdkError):
    """Admitting work into a conversation (send, host API): `invalid | conflict | closed |
    throttled`."""

    kinds = frozenset({"invalid", "conflict", "closed", "throttled"})

    def __init__(self, kind: AdmissionErrorKind, message: str = "") -> None:
        super().__init__(kind, message)


class CommandError(SdkError):
    """What a command handler answers its caller: `invalid | conflict | not_found | rejected`."""

    kinds = frozenset({"invalid", "conflict", "not_found", "rejected"})

    def __init__(self, kind: CommandErrorKind, message: str = "") -> None:
        super().__init__(kind, message)


class ExtensionStop(Exception):
    """Stop this extension now with `reason` (also what a stopped extension's `transact`
    raises)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason or "Extension stopped"
        super().__init__(self.reason)


class Retry(Exception):
    """A transient failure that is not the extension's defect (an upstream API is down).

    The frame rolls back, the extension keeps running and the work is offered again after
    `after_seconds`. Retries are bounded per item; past the bound it counts as a defect.
    """

    def __init__(self, after_seconds: float, reason: str = "") -> None:
        if not isinstance(after_seconds, int | float) or not 0 < after_seconds <= RETRY_MAX_SECONDS:
            raise ValueError(f"Retry after_seconds must be in (0, {RETRY_MAX_SECONDS}]")
        self.after_seconds = float(after_seconds)
        self.reason = reason or "retry requested"
        super().__init__(self.reason)
