"""Crash quarantine (spec 02 §7): a worker hook that kills its process (segfault, `os._exit`,
out of memory) leaves no trace in the database — its transaction dies with it — and the task is
redelivered (acks late, reject on worker lost), so without a count it would loop forever.

Each delivery of an item (a timer, a settled position, an outbox delivery, a job run) is
counted in the cache — Redis in production, shared by every worker and outside the database
transaction that dies — before its frame starts, and the count is cleared when the frame
finishes, however it finishes (which a dying process never reaches; a process told to exit
mid-delivery, `SystemExit`, does not clear it either: to the count that is a death). A delivery
that finds `CRASH_LIMIT` earlier deliveries that never finished stops the extension with
`<hook> crashed its worker` instead of running the hook again. The count is cleared then too,
so a resumed extension gets fresh deliveries.

The same cache count bounds `Retry` (spec 02 §7) for items that have no row to keep a
`retry_attempt` on: the claim-time hooks, per (extension, hook, conversation). `retries_asked`
is passed to the frame as its `retry_attempt`; `retry_noted` adds one after a `Retry` and clears
the count after anything else.

A cache that is down never blocks work: the count is skipped (and logged).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from hashlib import sha256
from typing import Any

from django.core.cache import DEFAULT_CACHE_ALIAS, cache, caches
from django.core.cache.backends.redis import RedisCache, RedisCacheClient

from extensions_host.runtime.current import PROCESS_EXIT

logger = logging.getLogger("extensions_host.crashes")

CRASH_LIMIT = 3
# an abandoned count (the item was cancelled, the extension uninstalled) expires on its own
COUNT_TTL_SECONDS = 24 * 3600


def crashed_reason(hook: str) -> str:
    return f"{hook} crashed its worker"


def delivery_key(*, extension_id: str, hook: str, item: str) -> str:
    return _key("deliveries", extension_id, hook, item)


def _key(kind: str, extension_id: str, hook: str, item: str) -> str:
    # items carry user-chosen keys (timer keys up to 256 characters): hash for a safe cache key
    digest = sha256(f"{extension_id}\x00{hook}\x00{item}".encode()).hexdigest()[:32]
    return f"hyphae:{kind}:{extension_id[:64]}:{digest}"


def unfinished_deliveries(*, extension_id: str, hook: str, item: str) -> int:
    """How many deliveries of this item started and never finished (the admin, tests)."""
    try:
        return int(cache.get(delivery_key(extension_id=extension_id, hook=hook, item=item)) or 0)
    except Exception:
        logger.warning("delivery count unavailable", exc_info=True)
        return 0


@contextmanager
def delivery_counted(
    *, extension_id: str, hook: str, item: str, deferred: bool = False
) -> Iterator[bool]:
    """Count this delivery for its whole frame; yields True when `CRASH_LIMIT` earlier
    deliveries of the same item never finished (the caller stops the extension).

    `deferred` (the frames of a page): the clear is sent with the next count's round trip, or by
    `clear_deferred()` when the page ends. The clear of a frame that finished is then pending
    only while host code (no hook) runs between two frames."""
    key = delivery_key(extension_id=extension_id, hook=hook, item=item)
    try:
        count = _count(key)
    except Exception:  # the cache is down (or the key expired between add and incr)
        logger.warning("delivery count unavailable", exc_info=True)
        yield False
        return
    try:
        yield count > CRASH_LIMIT
    except PROCESS_EXIT:
        # the process is exiting mid-delivery (a hook calling `sys.exit`, a shutdown signal):
        # the delivery did not finish, so it stays counted, as if the process had died
        raise
    except BaseException:
        _finished(key, deferred)
        raise
    else:
        _finished(key, deferred)


def retries_asked(*, extension_id: str, hook: str, item: str) -> int:
    """How many times in a row this item asked to `Retry` (the frame's `retry_attempt`)."""
    try:
        return int(cache.get(_key("retries", extension_id, hook, item)) or 0)
    except Exception:
        logger.warning("retry count unavailable", exc_info=True)
        return 0


def retry_noted(*, extension_id: str, hook: str, item: str, retried: bool) -> None:
    """Add one to the item's `Retry` count after a `Retry`; clear it after anything else."""
    key = _key("retries", extension_id, hook, item)
    try:
        if retried:
            _count(key)
        else:
            cache.delete(key)
    except Exception:
        logger.warning("retry count not kept", exc_info=True)


def _finished(key: str, deferred: bool) -> None:
    _pending().append(key)
    if not deferred:
        clear_deferred()


def clear_deferred() -> None:
    """Send the clears still pending on this thread."""
    keys = _pending()
    if not keys:
        return
    try:
        cache.delete_many(keys)
    except Exception:
        logger.warning("delivery count not cleared", exc_info=True)
    keys.clear()


_local = threading.local()


def _pending() -> list[str]:
    if not hasattr(_local, "keys"):
        _local.keys = []
    return _local.keys


def _count(key: str) -> int:
    """Add one to the count, and send the pending clears. One round trip on Redis (DEL, INCR
    and EXPIRE pipelined); the portable `delete_many`, `add` and `incr` on any other cache."""
    backend = caches[DEFAULT_CACHE_ALIAS]  # `cache` is a proxy: isinstance needs the backend
    pending = _pending()
    if isinstance(backend, RedisCache):
        name = backend.make_and_validate_key(key)
        pipe = _redis(backend).pipeline(transaction=False)
        if pending:
            pipe.delete(*(backend.make_and_validate_key(k) for k in pending))
        pipe.incr(name)
        pipe.expire(name, COUNT_TTL_SECONDS)
        count = int(pipe.execute()[-2])
        pending.clear()
        return count
    clear_deferred()
    cache.add(key, 0, COUNT_TTL_SECONDS)
    return int(cache.incr(key))


_clients: dict[int, Any] = {}


def _redis(backend: RedisCache) -> Any:
    """A redis-py client on the cache's own connection pool, made once per backend (Django
    builds a new client object on every call)."""
    client = _clients.get(id(backend))
    if client is None:
        # `RedisCache._cache` (its `RedisCacheClient`) is private: the stubs leave it out
        cache_client: RedisCacheClient = backend._cache  # type: ignore[attr-defined]
        client = _clients[id(backend)] = cache_client.get_client(write=True)
    return client
