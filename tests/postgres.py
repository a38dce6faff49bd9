"""Helpers for tests on real PostgreSQL with several connections (threads)."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.db import connection


def someone_waits_for_a_lock() -> bool:
    """Whether any session of this test database is waiting for a lock right now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
        return cursor.fetchone()[0] > 0


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """A bounded poll: fails the test when `check` is not true within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)
