"""Where `save=none` payloads live: the Django cache, never the database (spec 06).

The `artifacts` cache alias (config/settings/base.py): Redis in production, local memory
embedded, where the default cache is a file cache that would keep them on disk across a
restart. A settings module that declares only a default cache (the tests', the bench's) has
that one hold them. A restart or an eviction loses the payload; the record row (metadata,
fingerprints) and its events stay, so the projection simply stops showing it and nothing older
comes back in its place.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.base import BaseCache
from django.db import transaction

from core.errors import HostError

logger = logging.getLogger(__name__)

MSG_CACHE_UNAVAILABLE = "Artifact cache is unavailable"
DEFAULT_TTL_SECONDS = 24 * 3600


CACHE_ALIAS = "artifacts"


def ephemeral_cache() -> BaseCache:
    """The cache `save=none` payloads live in."""
    return caches[CACHE_ALIAS if CACHE_ALIAS in settings.CACHES else "default"]


def _key(record_pk: int) -> str:
    return f"hyphae:artifacts:payload:{record_pk}"


def _ttl() -> int:
    return int(getattr(settings, "ARTIFACTS_EPHEMERAL_TTL_SECONDS", DEFAULT_TTL_SECONDS))


def ephemeral_put(*, record_pk: int, text: str) -> None:
    """Store a payload. Called inside the emit transaction, just before it commits: were the
    transaction to roll back, the orphan entry is unreachable (no row names that pk) and
    expires; writing after commit instead could lose a payload the caller was told exists."""
    try:
        ephemeral_cache().set(_key(record_pk), text, timeout=_ttl())
    except Exception as exc:  # a cache outage must not half-publish: the caller rolls back
        logger.warning("artifact cache write failed: %s", type(exc).__name__)
        raise HostError("store", "unavailable", MSG_CACHE_UNAVAILABLE) from exc


def ephemeral_get_many(record_pks: Iterable[int]) -> dict[int, str]:
    """The payloads still cached, by record pk. A cache outage reads as "all evicted"."""
    pks = list(record_pks)
    if not pks:
        return {}
    try:
        found = ephemeral_cache().get_many([_key(pk) for pk in pks])
    except Exception as exc:
        logger.warning("artifact cache read failed: %s", type(exc).__name__)
        return {}
    return {pk: found[_key(pk)] for pk in pks if _key(pk) in found}


def ephemeral_forget_on_commit(record_pks: Iterable[int]) -> None:
    """Drop payloads of superseded records once that is durable (supersede is final)."""
    keys = [_key(pk) for pk in record_pks]
    if not keys:
        return

    def forget() -> None:
        try:
            ephemeral_cache().delete_many(keys)
        except Exception as exc:  # they expire anyway
            logger.warning("artifact cache delete failed: %s", type(exc).__name__)

    transaction.on_commit(forget)
