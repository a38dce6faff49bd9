"""Retrying a transaction after the host's transient database trouble (never an extension's
fault; which errors are transient is `core.db`'s rule)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import DatabaseError, connection

from core.db import is_statement_timeout, is_transient, sqlstate
from core.errors import HostError
from extensions_host.runtime.current import TransientDatabaseError

T = TypeVar("T")
__all__ = [
    "is_statement_timeout",
    "is_transient",
    "sqlstate",
    "store_unavailable",
    "with_transient_retries",
]

ATTEMPTS = 5
MSG_STORE_UNAVAILABLE = "Extension store is unavailable"


def store_unavailable() -> HostError:
    """The host's transient database trouble, as the caller gets it when no retry is left (or
    none is possible: extension code outside a frame): 503 `store/unavailable`, `Retry-After`."""
    return HostError("store", "unavailable", MSG_STORE_UNAVAILABLE, retry_after=1)


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
    raise store_unavailable() from last
