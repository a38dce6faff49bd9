"""An unarchived conversation owes its idle period (spec 01, 03): the idle sweep's watermark
passed over it while it was archived, so unarchiving lowers the watermark to its last activity.
Unarchiving is not activity: one `conversation_idle` per idle period still holds."""

from __future__ import annotations

import pytest

from core.models import LifecycleEvent
from extensions_host.background.models import Mark
from extensions_host.background.services import idle
from extensions_host.background.services.idle import conversations_detect_idle

pytestmark = pytest.mark.django_db


def idle_events() -> list[tuple[str, int]]:
    return [
        (e.conversation_id, e.payload["idle_ms"])
        for e in LifecycleEvent.objects.filter(kind="conversation_idle").order_by("pk")
    ]


def sweep_for(fake_clock, *, seconds: int) -> None:
    """Beat's idle sweep every 30 s (host clock) for `seconds`."""
    for _ in range(seconds // 30):
        fake_clock.advance(seconds=30)
        conversations_detect_idle()


@pytest.fixture
def client(api, owner, settings):
    settings.IDLE_AFTER_SECONDS = 60
    return api(owner)


def test_an_unarchived_conversation_emits_idle_once(client, fake_clock):
    assert client.post("/v1/conversations", {"id": "c"}, format="json").status_code == 201
    assert client.patch("/v1/conversations/c", {"archived": True}, format="json").status_code == 200
    sweep_for(fake_clock, seconds=300)
    assert idle_events() == []
    assert (
        client.patch("/v1/conversations/c", {"archived": False}, format="json").status_code == 200
    )
    sweep_for(fake_clock, seconds=300)
    assert idle_events() == [("c", 330_000)]  # idle since its creation, told once


def test_an_idle_period_already_told_is_not_told_again_after_unarchiving(client, fake_clock):
    client.post("/v1/conversations", {"id": "c"}, format="json")
    sweep_for(fake_clock, seconds=120)
    assert idle_events() == [("c", 60_000)]
    client.patch("/v1/conversations/c", {"archived": True}, format="json")
    sweep_for(fake_clock, seconds=120)
    client.patch("/v1/conversations/c", {"archived": False}, format="json")
    sweep_for(fake_clock, seconds=300)
    assert idle_events() == [("c", 60_000)]


def test_a_sweep_never_raises_the_watermark_over_a_concurrent_unarchive(fake_clock):
    """The sweep advances the watermark by compare-and-set from the value it read."""
    Mark.objects.create(name=idle.IDLE_WATERMARK, value=5_000)
    idle.idle_watermark_lower(activity_at=idle.clock.from_ms(1_000))  # lands mid-sweep
    idle._watermark_advance(read_ms=5_000, to_ms=9_000)
    assert Mark.objects.get(name=idle.IDLE_WATERMARK).value == 1_000
    idle.idle_watermark_lower(activity_at=idle.clock.from_ms(3_000))  # not above: unchanged
    assert Mark.objects.get(name=idle.IDLE_WATERMARK).value == 1_000
    idle._watermark_advance(read_ms=1_000, to_ms=9_000)
    assert Mark.objects.get(name=idle.IDLE_WATERMARK).value == 9_000


def test_an_unarchive_before_any_watermark_sets_one_no_sweep_can_raise(fake_clock):
    idle.idle_watermark_lower(activity_at=idle.clock.from_ms(1_000))
    idle._watermark_advance(read_ms=None, to_ms=9_000)  # a sweep that read "no watermark"
    assert Mark.objects.get(name=idle.IDLE_WATERMARK).value == 1_000
