"""Which database errors are the host's transient trouble (retry), never an extension's fault."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connection

from core.errors import HostError
from extensions_host.runtime.current import TransientDatabaseError

T = TypeVar("T")

# serialization_failure, deadlock_detected, lock_not_available (lock_timeout)
TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03"})
QUERY_CANCELED = "57014"  # statement_timeout: the frame's deadline, not a transient error
ATTEMPTS = 5
MSG_STORE_UNAVAILABLE = "Extension store is unavailable"


def sqlstate(exc: BaseException) -> str | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        code = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if code:
            return str(code)
        current = current.__cause__ or current.__context__
    return None


def is_statement_timeout(exc: BaseException) -> bool:
    return isinstance(exc, DatabaseError) and sqlstate(exc) == QUERY_CANCELED


def is_transient(exc: BaseException) -> bool:
    """Serialization failures, deadlocks, lock timeouts, a lost connection, SQLite's busy lock."""
    if isinstance(exc, InterfaceError):
        return True  # the connection is gone
    if not isinstance(exc, DatabaseError):
        return False
    code = sqlstate(exc)
    if code is not None:
        return code in TRANSIENT_SQLSTATES or code.startswith("08")
    if isinstance(exc, OperationalError):
        text = str(exc).lower()
        return any(
            marker in text
            for marker in ("database is locked", "connection", "server closed", "terminating")
        )
    return False


def with_transient_retries(step: Callable[[], T], *, attempts: int = ATTEMPTS) -> T:
    """Run `step` (one whole transaction) again after a transient database error, with bounded
    exponential backoff; past the bound the caller gets `store/unavailable` (503)."""
    last: BaseException | None = None
    for attempt in range(attempts):
        try:
            return step()
        except TransientDatabaseError as exc:
            last = exc
        except DatabaseError as exc:
            if not is_transient(exc):
                raise
            last = exc
        # a lost connection is replaced before the next attempt (only outside any atomic block)
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()
        if attempt + 1 < attempts:
            time.sleep(min(0.02 * 2**attempt, 0.5) * (0.5 + random.random()))  # noqa: S311
    raise HostError("store", "unavailable", MSG_STORE_UNAVAILABLE, retry_after=1) from last
