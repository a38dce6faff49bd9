"""Hook deadlines: SIGALRM on a main thread, `statement_timeout` in PostgreSQL, and the elapsed
check (done by the frame when the hook returns) everywhere else.

The SIGALRM handler raises `HookDeadline`, a `BaseException`, so an extension's
`except Exception` around a slow call cannot swallow it. While a deadline is armed, its instant
is known to the code it bounds (`seconds_left`): a call bounded inside it (a route's
`ctx.transact`, `host.watch`) ends on its own a margin before it (`seconds_left_nested`)
instead of being cut off by it. An enclosing alarm that falls while the host runs a nested
frame's own code (its commit or rollback, the stop it records) is held until that code is done
(`alarms_held`): interrupted mid-command, psycopg would leave the connection unusable.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from extensions_host.runtime.current import Frame, HookDeadline

MAX_DEADLINE_SECONDS = 300.0
MIN_DEADLINE_SECONDS = 0.001
# A lock wait ends (`lock_timeout`, SQLSTATE 55P03) well before the hook's deadline: a lock
# timeout is host trouble, retried and never a stop (spec 02 §1), so neither SIGALRM nor
# `statement_timeout` may overtake it. Half the deadline, at least 1 ms (0 would disable it).
LOCK_TIMEOUT_SHARE = 0.5
MIN_LOCK_TIMEOUT_MS = 1
# A call bounded inside another (a route's `ctx.transact`, `host.watch` in a worker run) ends
# this long before the enclosing deadline, at most half of the time left: it then rolls back or
# returns, and the enclosing call records the stop or answers, before its own alarm falls
NESTED_MARGIN_SECONDS = 0.25
NESTED_MARGIN_SHARE = 0.5

# the monotonic instant the innermost armed deadline ends (None outside any bounded call)
_deadline_at: ContextVar[float | None] = ContextVar("hyphae_hook_deadline_at", default=None)


@dataclass
class _Held:
    """Alarms held while the host runs its own code inside a bounded call (main thread only:
    SIGALRM is delivered there): how deep, and the reason of an alarm that fell meanwhile."""

    depth: int = 0
    fell: str | None = None


_held = _Held()


def default_deadline(boundary: str) -> float:
    """5 s in a request, 30 s in a worker (settings), never above 300 s."""
    ms = (
        settings.HOST_HOOK_DEADLINE_WORKER_MS
        if boundary == "worker"
        else (settings.HOST_HOOK_DEADLINE_REQUEST_MS)
    )
    return min(ms / 1000, MAX_DEADLINE_SECONDS)


def past_deadline(exc: BaseException) -> bool:
    """The host's deadline interrupted the code: its alarm, or Celery's soft time limit (the
    backstop of a worker task)."""
    return isinstance(exc, HookDeadline) or type(exc).__name__ == "SoftTimeLimitExceeded"


def alarm_usable() -> bool:
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def seconds_left() -> float | None:
    """Seconds left before the deadline of the bounded call running now (a frame, a route, a
    slash command, a notifier, a worker run), never negative; None outside any."""
    at = _deadline_at.get()
    return None if at is None else max(at - time.monotonic(), 0.0)


def seconds_left_nested() -> float | None:
    """What a call bounded inside the one running now may take: `seconds_left` less the
    margin (`NESTED_MARGIN_SECONDS`, at most half of it); None outside any bounded call."""
    left = seconds_left()
    if left is None:
        return None
    return left - min(NESTED_MARGIN_SECONDS, left * NESTED_MARGIN_SHARE)


@contextmanager
def alarms_held() -> Iterator[None]:
    """Run host code (a frame's setup, commit or rollback, the stop it records) with the alarm
    of an enclosing bounded call held: if it falls meanwhile, `HookDeadline` is raised when the
    code is done, at a safe point, never inside a database command. The extension code of a
    frame run in here is interrupted by its own alarm as usual (`alarm`)."""
    if not alarm_usable():
        yield
        return
    _held.depth += 1
    try:
        yield
    finally:
        _held.depth -= 1
        if not _held.depth and _held.fell is not None:
            reason, _held.fell = _held.fell, None
            raise HookDeadline(reason)


@contextmanager
def _deadline_known(seconds: float) -> Iterator[None]:
    """Record the deadline instant for `seconds_left` (a nested deadline never extends an
    outer one)."""
    at = time.monotonic() + max(seconds, MIN_DEADLINE_SECONDS)
    outer = _deadline_at.get()
    token = _deadline_at.set(at if outer is None else min(at, outer))
    try:
        yield
    finally:
        _deadline_at.reset(token)


@contextmanager
def alarm(frame: Frame, seconds: float) -> Iterator[None]:
    """Raise `HookDeadline` into the hook if it runs past `seconds` (main thread only; other
    threads rely on the elapsed check). Either way, `seconds_left` knows the deadline."""
    with _deadline_known(seconds):
        with _alarm(frame, seconds):
            yield


@contextmanager
def _alarm(frame: Frame, seconds: float) -> Iterator[None]:
    if not alarm_usable():
        yield
        return

    def on_alarm(signum: int, stack: object) -> None:
        if not frame.open:
            return
        reason = f"{frame.hook} exceeded its deadline"
        if _held.depth:
            _held.fell = _held.fell or reason  # raised when the host's code is done
            return
        raise HookDeadline(reason)

    previous_handler = signal.signal(signal.SIGALRM, on_alarm)
    previous_delay, _ = signal.setitimer(signal.ITIMER_REAL, max(seconds, MIN_DEADLINE_SECONDS))
    armed_at = time.monotonic()
    held, _held.depth = _held.depth, 0  # the code bounded here is the extension's: interruptible
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
        _held.depth = held  # before the enclosing timer runs again
        if previous_delay:
            # someone else's timer was running: give it back what is left of it
            left = previous_delay - (time.monotonic() - armed_at)
            signal.setitimer(signal.ITIMER_REAL, max(left, MIN_DEADLINE_SECONDS))


def database_timeouts_ms(seconds: float) -> tuple[int, int]:
    """(`statement_timeout`, `lock_timeout`) in ms for a deadline of `seconds`: statements end
    with the deadline, lock waits clearly before it."""
    ms = max(int(seconds * 1000), 1)
    return ms, max(int(ms * LOCK_TIMEOUT_SHARE), MIN_LOCK_TIMEOUT_MS)


def database_limits(seconds: float) -> None:
    """Bound the database side of the current transaction (PostgreSQL): statements and lock
    waits end with an error instead of outliving the hook's deadline."""
    if connection.vendor != "postgresql":
        return
    statement_ms, lock_ms = database_timeouts_ms(seconds)
    with connection.cursor() as cursor:
        # one round trip; integers formatted by us (SET does not take bind parameters)
        cursor.execute(
            f"SET LOCAL statement_timeout = {statement_ms}; SET LOCAL lock_timeout = {lock_ms}"
        )
