"""Fixtures for the staff console and the inspector: installed extensions and a host with
data in every table the console shows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client

from conversations.models import Conversation
from core import clock
from extensions_host.runtime import FrameOutcome, extension_stop, run_frame

STOP_REASON = "on_timer defect: RuntimeError: the disk is on fire"


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


def in_frame(extension_id: str, fn: Callable[[Any], Any]) -> FrameOutcome:
    """Run `fn(ctx)` in a worker frame of the extension, as a timer would."""
    outcome = run_frame(extension_id=extension_id, hook="on_timer", call=fn, boundary="worker")
    assert outcome.ok, outcome
    return outcome


def stop(extension_id: str, reason: str = STOP_REASON) -> None:
    extension_stop(extension_id=extension_id, hook="on_timer", reason=reason)


@pytest.fixture
def conversation(owner: Any) -> Callable[..., Conversation]:
    def make(cid: str = "c1", *, who: Any = None, sharing: str = "private") -> Conversation:
        return Conversation.objects.create(
            id=cid, owner=who or owner, sharing=sharing, last_activity_at=clock.now()
        )

    return make


@pytest.fixture
def console(staff: Any) -> Client:
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def host(install: Any, owner: Any) -> Any:
    """Two extensions installed (a keeper and a flaky one) and a row in every table."""
    from .data import fill_host
    from .exts import flaky, keeper

    install(keeper(), flaky())
    return fill_host(owner)


def section(html: str, element_id: str) -> str:
    """The part of a console page from the element with this id to the end of its block."""
    start = html.index(f'id="{element_id}"')
    return html[start : html.index("</div>", start)]
