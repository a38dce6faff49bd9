"""The one host clock, in UTC epoch milliseconds.

Every due-time comparison (timers, jobs, leases, idle, expiry) reads `now_ms()`, never the
database's `now()`, so tests drive time with `FakeClock`.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep(self, ms: int) -> None:
        time.sleep(max(ms, 0) / 1000)


class FakeClock:
    """A clock that only moves when told to. Thread-safe."""

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:  # 2026-01-01T00:00:00Z
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def advance(self, *, ms: int = 0, seconds: float = 0) -> int:
        with self._lock:
            self._now += ms + int(seconds * 1000)
            return self._now

    def set(self, ms: int) -> None:
        with self._lock:
            self._now = ms

    def sleep(self, ms: int) -> None:
        """Waiting on a fake clock is time passing at once."""
        self.advance(ms=max(ms, 0))


_clock: SystemClock | FakeClock = SystemClock()


def now_ms() -> int:
    return _clock.now_ms()


def sleep(ms: int) -> None:
    """Wait `ms` milliseconds of host time (a fake clock just moves on)."""
    _clock.sleep(ms)


def now() -> dt.datetime:
    """The host clock as an aware UTC datetime (for DateTimeFields)."""
    return from_ms(now_ms())


# 9999-12-31T23:59:59.999Z: the last instant a datetime holds, so the largest millisecond instant
# an extension may hand the host (a timer's due time, a prompt's `when`): each is shown or stored
# as a datetime somewhere
MAX_MS = 253_402_300_799_999


def from_ms(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def to_ms(value: dt.datetime) -> int:
    return int(value.timestamp() * 1000)


def install(clock: SystemClock | FakeClock) -> None:
    global _clock
    _clock = clock


@contextmanager
def fake_clock(start_ms: int | None = None) -> Iterator[FakeClock]:
    """Install a FakeClock for the duration of the block."""
    previous = _clock
    clock = FakeClock() if start_ms is None else FakeClock(start_ms)
    install(clock)
    try:
        yield clock
    finally:
        install(previous)
