"""Hook deadlines: SIGALRM on a main thread, `statement_timeout` in PostgreSQL, and the elapsed
check (done by the frame when the hook returns) everywhere else.

The SIGALRM handler raises `HookDeadline`, a `BaseException`, so an extension's
`except Exception` around a slow call cannot swallow it. While a deadline is armed, its instant
is known to the code it bounds (`seconds_left`): a call that waits by design (`host.watch`)
ends on its own before the deadline instead of being cut off by it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

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

# the monotonic instant the innermost armed deadline ends (None outside any bounded call)
_deadline_at: ContextVar[float | None] = ContextVar("hyphae_hook_deadline_at", default=None)


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
        if frame.open:
            raise HookDeadline(f"{frame.hook} exceeded its deadline")

    previous_handler = signal.signal(signal.SIGALRM, on_alarm)
    previous_delay, _ = signal.setitimer(signal.ITIMER_REAL, max(seconds, MIN_DEADLINE_SECONDS))
    armed_at = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous_handler)
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
