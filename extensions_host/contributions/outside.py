"""Extension code that runs outside any frame: route handlers, slash commands (rules of spec 05
for routes) and notifiers (best-effort: never a stop).

Before the first such call in a process (and again after a resume or a new revision), the
extension's `activate` runs as it does before a frame (`runtime.outside.activate_outside`); a
failing one stops the extension (notifiers included: `activate` failing is a stop wherever it runs).
Like a frame, the call is deadline-bounded (SIGALRM on a main thread, the elapsed check
everywhere: `runtime.outside.bounded`, which idle workers and `shutdown` use too) and
classified, but it holds no transaction: it may call slow services and writes through
`ctx.transact`/`ctx.update`. Routes and commands: a typed SDK error maps to the error model
without a stop (its message redacted of the extension's secrets); `Retry` → 503 with
`Retry-After`; host-transient database trouble (a store read included) → 503
`store/unavailable`, never a stop; any other exception, an async result or an overrun deadline
is a defect that stops the extension (503). A process told to exit
(`SystemExit`, `KeyboardInterrupt`) passes through: never a stop, never a failed delivery.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import DatabaseError

from core.errors import MSG_NOT_FOUND, HostError
from extensions_host import registry
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.registry import LoadedExtension
from extensions_host.runtime import deadlines
from extensions_host.runtime.current import PROCESS_EXIT, Boundary
from extensions_host.runtime.frames import hook_deadline
from extensions_host.runtime.outside import activate_outside, bounded, outside_reason
from extensions_host.runtime.roster_rows import RosterView, roster_view
from extensions_host.runtime.stops import (
    bounded_reason,
    deadline_reason,
    exception_message,
    extension_stop,
)
from extensions_host.runtime.transient import is_transient, store_unavailable
from extensions_host.sdk import Retry, SdkError
from extensions_host.selectors import extension_id_usable
from extensions_host.services.errors import (
    MSG_UNAVAILABLE,
    host_error_for,
    retry_error,
    stopped_message,
)

T = TypeVar("T")

__all__ = [
    "DeliveryFailure",
    "activated",
    "bounded",
    "extension_available",
    "notify_deadline",
    "run_best_effort",
    "run_outside",
]


def extension_available(*, extension_id: str, grant: str) -> tuple[LoadedExtension, RosterView]:
    """The loaded extension and its roster row, when its code may run now outside a frame
    (commands, routes, slash commands). An id the roster does not hold is 404 `store/not_found`
    ("Not found", as `GET /v1/extensions/{id}` answers). Then, in the order of spec 04:
    installed here, `grant` admitted, not stopped, the roster's revision; otherwise 503
    `extensions/unavailable` — "Extension is unavailable", or "Extension <id> is stopped:
    <reason>" for a stopped extension that holds the grant."""
    # an id no extension could have (NUL, overlong, …) never reaches a query
    row = roster_view(extension_id) if extension_id_usable(extension_id) else None
    if row is None:
        raise HostError("store", "not_found", MSG_NOT_FOUND)
    loaded = registry.get(extension_id)
    if loaded is None:
        raise HostError("extensions", "unavailable", MSG_UNAVAILABLE)
    if row.status == ExtensionStatus.UNINSTALLED or grant not in row.admitted_grants:
        raise HostError("extensions", "unavailable", MSG_UNAVAILABLE)
    if row.status == ExtensionStatus.STOPPED:
        raise HostError("extensions", "unavailable", stopped_message(extension_id, row.reason))
    if row.revision != loaded.revision:
        raise HostError("extensions", "unavailable", MSG_UNAVAILABLE)
    return loaded, row


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
    reason: str
    cause: BaseException
    try:
        return bounded(loaded, hook, limit, call)
    except HostError:
        raise  # the host's own vocabulary (a service the handler called refused): no stop
    except Retry as exc:
        raise retry_error(
            extension_id=loaded.id, after_seconds=exc.after_seconds, reason=exc.reason
        ) from exc
    except SdkError as exc:
        raise host_error_for(exc, extension_id=loaded.id) from exc
    except PROCESS_EXIT:
        raise  # the process is told to exit: not the extension's failure
    except DatabaseError as exc:
        if is_transient(exc):  # host trouble (deadlock, lost connection), never a defect
            raise store_unavailable() from exc
        reason, cause = outside_reason(hook, exc, started=started, limit=limit), exc
    except BaseException as exc:
        reason, cause = outside_reason(hook, exc, started=started, limit=limit), exc
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
    except PROCESS_EXIT:
        raise  # the process is told to exit: not a delivery failure
    except Retry as exc:
        raise DeliveryFailure(_message(loaded, exc.reason), exc.after_seconds) from exc
    except BaseException as exc:
        if deadlines.past_deadline(exc):
            raise DeliveryFailure(deadline_reason(hook)) from exc
        raise DeliveryFailure(_message(loaded, exception_message(exc))) from exc


def _message(loaded: LoadedExtension, text: str) -> str:
    return bounded_reason(text, loaded.id, 512)


def notify_deadline(
    loaded: LoadedExtension | None = None,
    *,
    row: RosterView | RosterEntry | None = None,
    declared: float | None = None,
) -> float:
    """The deadline of one `notify` call: a hook run in a worker, so the rule of every hook
    (`hook_deadline`): the notifier's own `deadline_s` (`declared`), else the staff override on
    the roster `row`, else the extension's `deadline_s`, else the worker default (30 s)."""
    if loaded is None:
        return deadlines.default_deadline("worker")
    return hook_deadline(row, loaded, declared, boundary="worker")
