"""Fixtures for contributions: install test extensions, make conversations, capture enqueues."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conversations.models import Conversation
from core import clock


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


@pytest.fixture
def notify_settings(settings: Any) -> Any:
    """Notifier retries small enough to walk through: 3 attempts, 2 s backoff up to 60 s."""
    settings.HOST_NOTIFY_MAX_ATTEMPTS = 3
    settings.HOST_NOTIFY_BACKOFF_SECONDS = 2
    settings.HOST_NOTIFY_BACKOFF_MAX_SECONDS = 60
    settings.HOST_PUBLIC_URL = "https://hyphae.example/"
    return settings
