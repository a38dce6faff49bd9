"""Per-principal write throttling (429 `limit/throttled` with `Retry-After`)."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from core.auth import principal_of

SAFE = {"GET", "HEAD", "OPTIONS"}


class WriteRateThrottle(SimpleRateThrottle):
    """Bounds writes per principal (user id, or client address when anonymous). Reads and the
    runtime's service principal are not throttled here."""

    scope = "writes"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if request.method in SAFE:
            return None
        principal = principal_of(request)
        if principal.service:
            return None
        ident = principal.user_id if principal.is_authenticated else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}
