"""Measurement side channel: bench extensions report *when their effects committed* to a Redis
list the runner reads (commit time is what a user sees; the hook's own clock is earlier).

Only bench code uses this; it is instrumentation, not a host feature.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from django.db import transaction

_client: Any = None
_pid = 0


def redis_url() -> str:
    return os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/7")


def client() -> Any:
    """One Redis client per process (created lazily, again after a fork)."""
    global _client, _pid
    if _client is None or _pid != os.getpid():
        import redis

        _client = redis.Redis.from_url(redis_url())
        _pid = os.getpid()
    return _client


def push_now(channel: str, payload: dict[str, Any]) -> None:
    client().rpush(channel, json.dumps(payload, separators=(",", ":")))


def push_on_commit(channel: str, payload: dict[str, Any]) -> None:
    """Report `payload` plus `committed` (epoch ms) once the current transaction commits; a
    rolled-back frame (its savepoint) reports nothing."""

    def send() -> None:
        push_now(channel, {**payload, "committed": time.time() * 1000})

    transaction.on_commit(send, robust=True)


def drain(channel: str) -> list[dict[str, Any]]:
    """Everything reported on `channel` so far (and forget it)."""
    pipe = client().pipeline()
    pipe.lrange(channel, 0, -1)
    pipe.delete(channel)
    items, _ = pipe.execute()
    return [json.loads(item) for item in items]
