"""Fixtures for the conversation capabilities: install test extensions, run frames, make
conversations, claim runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache import cache

from conversations.models import Conversation, Submission
from conversations.services import Origin, submission_admit
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


def submit(cid: str, owner: Any, text: str = "hello") -> Submission:
    """Admit a user's input into the conversation (ready for a claim)."""
    return submission_admit(
        conversation_id=cid, parts=[{"type": "text", "text": text}], origin=Origin.of_user(owner)
    ).submission


def claim(runtime: Any, cid: str = "c1") -> Any:
    """The agent runtime claims the conversation's next run (`POST …/runs`)."""
    return runtime.post(f"/v1/conversations/{cid}/runs", {}, format="json")


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
