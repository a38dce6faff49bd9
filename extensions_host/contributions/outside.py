"""Extension code that runs outside any frame: route handlers, slash commands (rules of spec 05
for routes) and notifiers (best-effort: never a stop).

Before the first such call in a process (and again after a resume or a new revision), the
extension's `activate` runs as it does before a frame (`frames.activate_outside`); a failing
one stops the extension (notifiers included: `activate` failing is a stop wherever it runs).
Like a frame, the call is deadline-bounded (SIGALRM on a main thread, the elapsed check
everywhere) and classified, but it holds no transaction: it may call slow services and writes
through `ctx.transact`/`ctx.update`. Routes and commands: a typed SDK error maps to the error
model without a stop; `Retry` → 503 with `Retry-After`; any other exception, an async result
or an overrun deadline is a defect that stops the extension (503).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.db import DatabaseError

from core.errors import HostError
from extensions_host import registry
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.registry import LoadedExtension
from extensions_host.runtime import deadlines
from extensions_host.runtime.current import Frame, HookDeadline
from extensions_host.runtime.frames import Boundary, activate_outside
from extensions_host.runtime.stops import (
    deadline_reason,
    exception_message,
    extension_stop,
    reason_for,
    redact,
)
from extensions_host.runtime.transient import is_transient
from extensions_host.sdk import ExtensionStop, Retry, SdkError
from extensions_host.services.commands import stopped_message
from extensions_host.services.errors import host_error_for, retry_error

T = TypeVar("T")

MSG_UNAVAILABLE = "Extension is unavailable"
MSG_STORE_BUSY = "Extension store is busy; retry"
MSG_ASYNC = "returned an awaitable; handlers must be synchronous"


def not_granted_message(extension_id: str, grant: str) -> str:
    return f"Extension {extension_id} is not granted {grant}"


def extension_available(*, extension_id: str, grant: str) -> tuple[LoadedExtension, RosterEntry]:
    """The loaded extension and its roster row, when it may run now: installed here with the
    roster's revision, running, `grant` admitted. Otherwise 503 `extensions/unavailable`."""
    loaded = registry.get(extension_id)
    row = RosterEntry.objects.filter(pk=extension_id).first()
    if loaded is None or row is None or row.status == ExtensionStatus.UNINSTALLED:
        raise HostError("extensions", "unavailable", MSG_UNAVAILABLE)
    if row.status == ExtensionStatus.STOPPED:
        raise HostError("extensions", "unavailable", stopped_message(extension_id, row.reason))
    if row.revision != loaded.revision:
        raise HostError("extensions", "unavailable", MSG_UNAVAILABLE)
    if grant not in row.admitted_grants:
        raise HostError("extensions", "unavailable", not_granted_message(extension_id, grant))
    return loaded, row


def deadline_for(
    row: RosterEntry | None, loaded: LoadedExtension, explicit: float | None = None
) -> float:
    """The explicit deadline, else the staff override, the extension's, the request default."""
    if explicit is not None:
        limit = explicit
    elif row is not None and row.deadline_seconds:
        limit = row.deadline_seconds
    elif loaded.definition.deadline_s:
        limit = loaded.definition.deadline_s
    else:
        limit = deadlines.default_deadline("request")
    return min(max(limit, deadlines.MIN_DEADLINE_SECONDS), deadlines.MAX_DEADLINE_SECONDS)


class _Defect(Exception):
    """An outside-frame call that broke its contract (an async result, a bad return value)."""


def bounded(loaded: LoadedExtension, hook: str, limit: float, call: Callable[[], T]) -> T:
    """Run `call()` with the deadline armed; an awaitable result is a `_Defect`; an overrun
    noticed after the return raises `HookDeadline`."""
    marker = Frame(
        extension_id=loaded.id,
        revision=loaded.revision,
        hook=hook,
        mode="read",
        grants=frozenset(),
        quotas={},
        deadline_s=limit,
    )
    try:
        with deadlines.alarm(marker, limit):
            result = call()
            if inspect.isawaitable(result):
                close = getattr(result, "close", None)
                if callable(close):
                    close()
                raise _Defect(MSG_ASYNC)
    finally:
        marker.open = False
    if marker.elapsed() > limit:
        raise HookDeadline(deadline_reason(hook))
    return result


def activated(loaded: LoadedExtension, *, boundary: Boundary = "request") -> None:
    """Run the extension's `activate` first when this process has not yet (at the roster's
    revision and activation epoch; spec 02 §1). A failing `activate` stops the extension, as in
    a frame: 503 `extensions/unavailable` with the stop reason."""
    outcome = activate_outside(loaded, boundary=boundary)
    if outcome is None:
        return
    if outcome.status == "stopped" or outcome.skip == "stopped":
        raise HostError("extensions", "unavailable", stopped_message(loaded.id, outcome.reason))
    raise HostError("extensions", "unavailable", MSG_UNAVAILABLE)


def run_outside(*, loaded: LoadedExtension, hook: str, limit: float, call: Callable[[], T]) -> T:
    """Run route or command code with the stop rules of spec 05 (see module docstring), after
    the extension's `activate` when this process has not run it yet."""
    activated(loaded)
    started = time.monotonic()
    try:
        return bounded(loaded, hook, limit, call)
    except HostError:
        raise  # the host's own vocabulary (a service the handler called refused): no stop
    except Retry as exc:
        raise retry_error(
            extension_id=loaded.id, after_seconds=exc.after_seconds, reason=exc.reason
        ) from exc
    except SdkError as exc:
        raise host_error_for(exc) from exc
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except DatabaseError as exc:
        if is_transient(exc):  # host trouble (deadlock, lost connection), never a defect
            raise HostError("store", "unavailable", MSG_STORE_BUSY, retry_after=1) from exc
        reason = reason_for(hook, exc)
        cause: BaseException = exc
    except HookDeadline as exc:
        reason, cause = deadline_reason(hook), exc
    except _Defect as exc:
        reason, cause = f"{hook} defect: {exc}", exc
    except BaseException as exc:
        overran = time.monotonic() - started > limit
        reason = deadline_reason(hook) if overran else reason_for(hook, exc)
        if isinstance(exc, ExtensionStop):
            reason = exc.reason
        cause = exc
    stop = extension_stop(
        extension_id=loaded.id, hook=hook, reason=reason, cause=cause, revision=loaded.revision
    )
    raise HostError("extensions", "unavailable", stopped_message(loaded.id, stop.reason))


class DeliveryFailure(Exception):
    """A notifier call failed (any raise, `Retry`, an overrun): retried, never a stop."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


def run_best_effort(
    *, loaded: LoadedExtension, hook: str, limit: float, call: Callable[[], Any]
) -> Any:
    """Run notifier code (after the extension's `activate` when this process has not run it
    yet): any failure becomes `DeliveryFailure` with a redacted message; a failing `activate`
    stops the extension first, as in a frame."""
    try:
        activated(loaded, boundary="worker")
        return bounded(loaded, hook, limit, call)
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except Retry as exc:
        raise DeliveryFailure(_message(loaded, exc.reason), exc.after_seconds) from exc
    except HookDeadline as exc:
        raise DeliveryFailure(deadline_reason(hook)) from exc
    except BaseException as exc:
        if type(exc).__name__ == "SoftTimeLimitExceeded":
            raise DeliveryFailure(deadline_reason(hook)) from exc
        raise DeliveryFailure(_message(loaded, exception_message(exc))) from exc


def _message(loaded: LoadedExtension, text: str) -> str:
    from core.errors import bound_text

    return bound_text(redact(text, loaded.id), 512)


def notify_deadline() -> float:
    return min(settings.HOST_NOTIFY_DEADLINE_MS / 1000, deadlines.MAX_DEADLINE_SECONDS)
