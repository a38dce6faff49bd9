"""Fixtures for contributions: install test extensions, make conversations, capture enqueues."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from conversations.models import Conversation
from core import clock
from extensions_host import registry
from extensions_host.runtime import forget_activations
from extensions_host.sdk import Extension
from extensions_host.services.roster import roster_sync


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


@pytest.fixture
def conversation(owner: Any) -> Callable[..., Conversation]:
    def make(cid: str = "c1", *, who: Any = None, sharing: str = "private") -> Conversation:
        return Conversation.objects.create(
            id=cid, owner=who or owner, sharing=sharing, last_activity_at=clock.now()
        )

    return make


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, float | None]]:
    """Notifier deliveries enqueued (delivery id, countdown) instead of sent to a broker."""
    from extensions_host.contributions import tasks

    sent: list[tuple[int, float | None]] = []
    monkeypatch.setattr(tasks.notifier_deliver, "delay", lambda i: sent.append((i, None)))
    monkeypatch.setattr(
        tasks.notifier_deliver,
        "apply_async",
        lambda args, countdown=None: sent.append((args[0], countdown)),
    )
    return sent
