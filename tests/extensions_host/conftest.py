"""Fixtures for the extension host: install test extensions, fire hooks, make conversations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conversations.models import Conversation
from core import clock
from extensions_host import registry
from extensions_host.models import RosterEntry
from extensions_host.runtime import FrameOutcome, run_frame
from extensions_host.sdk import TimerEvent


def fire_timer(extension_id: str, key: str = "t1", **options: Any) -> FrameOutcome:
    """Call the extension's `on_timer` the way the timer sweep does: a worker frame."""
    loaded = registry.get(extension_id)
    assert loaded is not None
    hook = loaded.definition.hooks.single["on_timer"]
    now = clock.now_ms()
    event = TimerEvent(key=key, due_at=now, fired_at=now)
    options.setdefault("boundary", "worker")
    return run_frame(
        extension_id=extension_id, hook="on_timer", call=lambda ctx: hook(ctx, event), **options
    )


def write(body: Any, extension_id: str = "alpha") -> Any:
    """Run `body(ctx)` in a frame that returns typed failures (as a command would)."""
    return run_frame(extension_id=extension_id, hook="test", call=body, failures="return")


def roster(extension_id: str) -> RosterEntry:
    return RosterEntry.objects.get(pk=extension_id)


@pytest.fixture
def conversation(owner: Any) -> Callable[..., Conversation]:
    def make(cid: str = "c1", *, who: Any = None, sharing: str = "private") -> Conversation:
        return Conversation.objects.create(
            id=cid, owner=who or owner, sharing=sharing, last_activity_at=clock.now()
        )

    return make
