"""Crash quarantine (spec 02 §7): a worker hook that kills its process (segfault, `os._exit`,
out of memory) leaves no trace in the database — its transaction dies with it — and the task is
redelivered (acks late, reject on worker lost), so without a count it would loop forever.

Each delivery of an item (a timer, a settled position, an outbox delivery, a job run) is
counted in the cache — Redis in production, shared by every worker and outside the database
transaction that dies — before its frame starts, and the count is cleared when the frame
finishes, however it finishes (a `finally`, which a dying process never reaches). A delivery
that finds `CRASH_LIMIT` earlier deliveries that never finished stops the extension with
`<hook> crashed its worker` instead of running the hook again. The count is cleared then too,
so a resumed extension gets fresh deliveries.

A cache that is down never blocks work: the count is skipped (and logged).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from hashlib import sha256

from django.core.cache import cache

logger = logging.getLogger("extensions_host.crashes")

CRASH_LIMIT = 3
# an abandoned count (the item was cancelled, the extension uninstalled) expires on its own
COUNT_TTL_SECONDS = 24 * 3600


def crashed_reason(hook: str) -> str:
    return f"{hook} crashed its worker"


def delivery_key(*, extension_id: str, hook: str, item: str) -> str:
    # items carry user-chosen keys (timer keys up to 256 characters): hash for a safe cache key
    digest = sha256(f"{extension_id}\x00{hook}\x00{item}".encode()).hexdigest()[:32]
    return f"hyphae:deliveries:{extension_id[:64]}:{digest}"


def unfinished_deliveries(*, extension_id: str, hook: str, item: str) -> int:
    """How many deliveries of this item started and never finished (the admin, tests)."""
    try:
        return int(cache.get(delivery_key(extension_id=extension_id, hook=hook, item=item)) or 0)
    except Exception:
        logger.warning("delivery count unavailable", exc_info=True)
        return 0


@contextmanager
def delivery_counted(*, extension_id: str, hook: str, item: str) -> Iterator[bool]:
    """Count this delivery for its whole frame; yields True when `CRASH_LIMIT` earlier
    deliveries of the same item never finished (the caller stops the extension)."""
    key = delivery_key(extension_id=extension_id, hook=hook, item=item)
    try:
        cache.add(key, 0, COUNT_TTL_SECONDS)
        count = int(cache.incr(key))
    except Exception:  # the cache is down (or the key expired between add and incr)
        logger.warning("delivery count unavailable", exc_info=True)
        yield False
        return
    try:
        yield count > CRASH_LIMIT
    finally:
        try:
            cache.delete(key)
        except Exception:
            logger.warning("delivery count not cleared", exc_info=True)
