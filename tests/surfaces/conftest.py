"""Fixtures for the conversation capabilities: install test extensions, run frames, make
conversations, claim runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache import cache

from conversations.models import Conversation
from core import clock
from extensions_host.models import RosterEntry
from extensions_host.runtime import FrameOutcome, run_frame


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    cache.clear()  # send-rate counters live in the cache
    yield
    cache.clear()


def in_frame(extension_id: str, fn: Callable[[Any], Any], **options: Any) -> FrameOutcome:
    """Run `fn(ctx)` in a background (worker) frame of the extension, as a timer would."""
    options.setdefault("boundary", "worker")
    options.setdefault("hook", "on_timer")
    return run_frame(extension_id=extension_id, call=fn, **options)


def roster(extension_id: str) -> RosterEntry:
    return RosterEntry.objects.get(pk=extension_id)


@pytest.fixture
def conversation(owner: Any) -> Callable[..., Conversation]:
    def make(cid: str = "c1", *, who: Any = None, sharing: str = "private", **extra: Any):
        return Conversation.objects.create(
            id=cid, owner=who or owner, sharing=sharing, last_activity_at=clock.now(), **extra
        )

    return make


@pytest.fixture
def runtime(api: Any) -> Any:
    return api("service")
