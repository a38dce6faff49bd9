"""Fixtures for the conversation capabilities: install test extensions, run frames, make
conversations, claim runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from django.core.cache import cache

from conversations.models import Conversation
from core import clock
from extensions_host import registry
from extensions_host.models import RosterEntry
from extensions_host.runtime import FrameOutcome, forget_activations, run_frame
from extensions_host.sdk import Extension
from extensions_host.services.roster import roster_sync


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    cache.clear()  # send-rate counters live in the cache
    yield
    cache.clear()


@pytest.fixture
def install(db: Any) -> Iterator[Callable[..., None]]:
    """`install(ext, …)`: run with exactly these extensions loaded and the roster synced."""
    stack = ExitStack()

    def do(*definitions: Extension, sync: bool = True) -> None:
        stack.enter_context(registry.installed(*definitions))
        forget_activations()
        if sync:
            roster_sync()

    yield do
    stack.close()
    forget_activations()


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
