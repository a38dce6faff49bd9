"""Extension code that runs outside any frame: route handlers, slash commands, notifiers, idle
workers and `shutdown`. The extension's `activate` before it (`activate_outside`), one way to
bound it (`bounded`) and one way to read its failure (`outside_reason`); what a failure then
does (a stop, a failed run, a retried delivery, a log line) is the caller's rule.

No transaction is held: the code may call slow services and writes through
`ctx.transact`/`ctx.update`, which are frames of their own. A process told to exit while the
code runs (`SystemExit` from gunicorn's worker timeout or a shutdown signal, `KeyboardInterrupt`)
is never the extension's failure: it passes through untouched, like from a frame.
"""

from __future__ import annotations

import contextvars
import inspect
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from extensions_host.models import RosterEntry
from extensions_host.registry import LoadedExtension
from extensions_host.runtime import deadlines
from extensions_host.runtime.activation import is_activated
from extensions_host.runtime.context import HookContext
from extensions_host.runtime.current import PROCESS_EXIT, Boundary, Frame, HookDeadline
from extensions_host.runtime.frames import run_frame
from extensions_host.runtime.outcomes import FrameOutcome
from extensions_host.runtime.stops import deadline_reason, reason_for
from extensions_host.sdk import ExtensionStop

T = TypeVar("T")

__all__ = [
    "MSG_ASYNC",
    "PROCESS_EXIT",
    "OutsideDefect",
    "activate_outside",
    "bounded",
    "outside_reason",
]

MSG_ASYNC = "returned an awaitable; handlers must be synchronous"


class OutsideDefect(Exception):
    """Code outside a frame broke its contract (an awaitable result, a bad return value)."""


def activate_outside(
    loaded: LoadedExtension, *, boundary: Boundary = "request", epoch: int | None = None
) -> FrameOutcome | None:
    """Run `activate` before the extension's code that runs outside any frame (routes, slash
    commands, workers, notifiers) when this process has not run it at the roster's revision and
    activation epoch yet (spec 02 §1). It runs as `run_frame` runs it (read-only, deadline-bound,
    in a frame of its own that calls no hook), so a failing `activate` stops the extension with
    hook `activation`, exactly as in a frame. `epoch`: the roster's activation epoch when the
    caller has read it (else it is read here).

    None when the extension is activated here; otherwise the frame's outcome: `stopped` (the
    activation failed), or `skipped` (not runnable here now: stopped, another revision, …)."""
    if "activate" not in loaded.definition.hooks.single:
        return None  # nothing to run: no frame, no query
    if epoch is None:
        epoch = (
            RosterEntry.objects.filter(pk=loaded.id)
            .values_list("activation_epoch", flat=True)
            .first()
        )
    if epoch is not None and is_activated(loaded, epoch):
        return None
    outcome = run_frame(
        extension_id=loaded.id,
        hook="activation",
        call=_no_hook,
        mode="read",
        boundary=boundary,
    )
    return None if outcome.ok else outcome


def _no_hook(ctx: HookContext) -> None:
    """The frame of `activate_outside` calls no hook: its work is the activation."""


def bounded(
    loaded: LoadedExtension,
    hook: str,
    limit: float,
    call: Callable[[], T],
    *,
    abandon: bool = False,
) -> T:
    """Run `call()` with its deadline armed: SIGALRM on a main thread; elsewhere the elapsed
    check after the return, or, with `abandon`, a daemon thread given up at the deadline (for a
    process that is exiting anyway: `shutdown`). An awaitable result raises `OutsideDefect`; an
    overrun raises `HookDeadline`; whatever `call` raises propagates as it is."""
    marker = Frame(  # only arms the alarm; never made current (the code is outside any frame)
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
            if abandon and not deadlines.alarm_usable():
                result = _in_daemon_thread(call, hook, limit)
            else:
                result = call()
            if inspect.isawaitable(result):
                close = getattr(result, "close", None)
                if callable(close):
                    close()  # never awaited: no warning, no side effects
                raise OutsideDefect(MSG_ASYNC)
    finally:
        marker.open = False
    if marker.elapsed() > limit:
        raise HookDeadline(deadline_reason(hook))
    return result


def _in_daemon_thread(call: Callable[[], T], hook: str, limit: float) -> T:
    """No alarm can interrupt code off the main thread: run it in a daemon thread and stop
    waiting for it at the deadline."""
    outcome: list[T] = []
    failure: list[BaseException] = []
    context = contextvars.copy_context()  # the deadline `seconds_left` reads goes along

    def target() -> None:
        try:
            outcome.append(context.run(call))
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target, name=f"outside-{hook}", daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        raise HookDeadline(deadline_reason(hook))
    if failure:
        raise failure[0]
    return outcome[0]


def outside_reason(hook: str, exc: BaseException, *, started: float, limit: float) -> str:
    """How a failure of code outside a frame reads (the formats of spec 02 §3): an
    `ExtensionStop` its own reason; the deadline (its interrupt, or any raise once the deadline
    had passed) `<hook> exceeded its deadline`; a typed error `<hook>: <Type>: <message>`;
    anything else `<hook> defect: <message>`."""
    if isinstance(exc, ExtensionStop):
        return exc.reason
    if deadlines.past_deadline(exc) or time.monotonic() - started > limit:
        return deadline_reason(hook)
    return reason_for(hook, exc)
