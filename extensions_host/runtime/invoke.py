"""Calling a hook: the frame made current and the deadline armed around the call, and whatever
the hook raised, returned or swallowed classified into a `HookFailure` (the stop rules of
spec 02 in one place)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal

from django.db import DatabaseError

from extensions_host.runtime import deadlines
from extensions_host.runtime.context import HookContext
from extensions_host.runtime.current import (
    PROCESS_EXIT,
    Failures,
    Frame,
    FrameDefect,
    HostTransient,
    InvalidResult,
    _current,
)
from extensions_host.runtime.outcomes import HookFailure
from extensions_host.runtime.stops import (
    async_reason,
    deadline_reason,
    exception_message,
    reason_for,
)
from extensions_host.runtime.transient import is_statement_timeout, is_transient
from extensions_host.sdk import ExtensionStop, Retry, SdkError, StateError
from extensions_host.services.recovery import retry_limit


def invoke(
    frame: Frame,
    ctx: HookContext,
    call: Callable[[HookContext], Any],
    validate: Callable[[Any], Any] | None,
    failures: Failures,
    retry_attempt: int,
) -> tuple[Any, HookFailure | None]:
    """Call the hook with the frame current and the deadline armed; classify what happened."""
    token = _current.set(frame)
    try:
        with deadlines.alarm(frame, frame.deadline_s):
            result = call(ctx)
            if inspect.isawaitable(result):
                _discard(result)
                return None, HookFailure("stop", frame.hook, async_reason(frame.hook))
            if validate is not None:
                result = validate(result)
    except BaseException as exc:
        return None, classify(frame, exc, failures, retry_attempt)
    finally:
        frame.open = False
        _current.reset(token)
    # The hook returned: a swallowed defect or store error, or a late return, still count.
    if frame.defect is not None:
        return None, HookFailure("stop", frame.hook, f"{frame.hook} defect: {frame.defect}")
    if frame.poisoned is not None:
        poisoned = frame.poisoned
        if isinstance(poisoned, DatabaseError) and not (
            is_transient(poisoned) or is_statement_timeout(poisoned)
        ):
            # the hook swallowed a store failure; the transaction cannot commit
            poisoned = StateError("unavailable", "Extension state is unavailable")
        return None, classify(frame, poisoned, "stop", retry_attempt)
    if frame.elapsed() > frame.deadline_s:
        return None, deadline_failure(frame)
    return result, None


def deadline_failure(frame: Frame, cause: BaseException | None = None) -> HookFailure:
    """The frame ran out of time: its own deadline stops the extension; an enclosing call's
    (`Frame.enclosed`) is that call's to judge."""
    kind: Literal["enclosing", "stop"] = "enclosing" if frame.enclosed else "stop"
    return HookFailure(kind, frame.hook, deadline_reason(frame.hook), cause=cause)


def classify(
    frame: Frame, exc: BaseException, failures: Failures, retry_attempt: int
) -> HookFailure:
    hook = frame.hook
    if isinstance(exc, PROCESS_EXIT):
        # the host process is told to exit (gunicorn's worker timeout or a shutdown signal
        # raise SystemExit mid-hook; Ctrl-C): not the extension's failure, never a stop. The
        # frame rolls back as the exception leaves its transaction.
        raise exc
    if frame.defect is not None:
        return HookFailure("stop", hook, f"{hook} defect: {frame.defect}", cause=exc)
    if deadlines.past_deadline(exc) or is_statement_timeout(exc):
        return deadline_failure(frame, exc)
    # host trouble (a lock timeout, a deadlock, …) is retried, never a stop, even when it took
    # the hook past its deadline (spec 02 §1): checked before the elapsed time
    if isinstance(exc, HostTransient) or is_transient(exc):
        return HookFailure("transient", hook, exception_message(exc), cause=exc)
    if frame.elapsed() > frame.deadline_s:
        return deadline_failure(frame, exc)
    if isinstance(exc, FrameDefect | InvalidResult):
        return HookFailure("stop", hook, f"{hook} defect: {exception_message(exc)}", cause=exc)
    if isinstance(exc, ExtensionStop):
        return HookFailure("stop", hook, exc.reason, cause=exc)
    if isinstance(exc, Retry):
        limit = retry_limit()
        if retry_attempt >= limit:
            return HookFailure(
                "stop", hook, f"{hook} defect: retried {limit} times: {exc.reason}", cause=exc
            )
        return HookFailure("retry", hook, exc.reason, cause=exc, retry_after=exc.after_seconds)
    if isinstance(exc, SdkError):
        if failures == "return":
            return HookFailure("typed", hook, exc.message, cause=exc, error=exc)
        return HookFailure("stop", hook, reason_for(hook, exc), cause=exc)
    return HookFailure("stop", hook, reason_for(hook, exc), cause=exc)


def _discard(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()  # never awaited: no "coroutine was never awaited" warning, no side effects
