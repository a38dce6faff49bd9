"""Per-principal write throttling (429 `limit/throttled` with `Retry-After`).

A fixed-window counter on the default cache: `HOST_WRITE_RATE=N/period` admits at most N
writes per principal in each clock-aligned window of one period (each calendar minute for
`/min`); the write over it gets 429 with `Retry-After` = whole seconds until that window ends.
Refused writes are not counted. The count is `cache.add` + `cache.incr`, atomic on Redis
(production) and on the in-process memory cache, so concurrent writes cannot slip past the
bound the way DRF's read-the-history-then-write-it-back throttle lets them; the embedded file
cache has no atomic increment (one process, best effort).

While the cache cannot be reached, writes are not limited (logged as `write_limit_unavailable`):
the limit protects the host, and a cache outage must not refuse every write (or answer 500s).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from core import clock
from core.auth import principal_of

SAFE = {"GET", "HEAD", "OPTIONS"}

logger = logging.getLogger("core.throttling")


class WriteRateThrottle(SimpleRateThrottle):
    """Bounds writes per principal (user id, or client address when anonymous). Reads and the
    runtime's service principal are not throttled here."""

    scope = "writes"
    # parsed from the rate by SimpleRateThrottle.__init__ (the stubs don't declare them)
    num_requests: int
    duration: int

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if request.method in SAFE:
            return None
        principal = principal_of(request)
        if principal.service:
            return None
        ident = principal.user_id if principal.is_authenticated else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request: Request, view: Any) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        try:
            return self.admit(key, now_ms=clock.now_ms())
        except Exception as exc:  # the cache's own errors (redis, OS) have no common base
            logger.warning(
                "write limit not applied: the cache is unreachable: %s",
                exc,
                extra={"event": "write_limit_unavailable"},
            )
            return True

    def admit(self, key: str, *, now_ms: int) -> bool:
        """Count one write under `key` in the window holding `now_ms`; False (and not counted)
        when the window already holds `num_requests`."""
        period_ms = self.duration * 1000
        window = now_ms // period_ms
        self._wait_ms = (window + 1) * period_ms - now_ms
        counter = f"{key}:{window}"
        # The counter outlives its window by a second, so it cannot expire between `add` and
        # `incr` (Redis would then recreate it without a TTL); the next window has its own key.
        self.cache.add(counter, 0, timeout=self.duration + 1)
        try:
            count = self.cache.incr(counter)
        except ValueError:  # evicted between add and incr: start the window over
            self.cache.add(counter, 0, timeout=self.duration + 1)
            count = self.cache.incr(counter)
        if count <= self.num_requests:
            return True
        # Refusals do not use up the window: take this one back. The counter only exceeds the
        # bound while refusals are in flight, so admitted writes never exceed it.
        self.cache.decr(counter)
        return False

    def wait(self) -> float | None:
        """Seconds until the current window ends (the exception handler rounds up)."""
        return math.ceil(self._wait_ms / 1000) if hasattr(self, "_wait_ms") else None
