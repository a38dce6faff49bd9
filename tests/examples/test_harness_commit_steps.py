"""The author harness runs the host's after-commit steps of every method, as a real commit
would: a stop inside a page (timer sweep, claim, projection) logs its `extension_stopped`
event with the full cause, and `stop_cause` hands that cause to the test."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel

from extensions_host.sdk import EmptyInput, Extension, TimerEvent


class Slot(BaseModel):
    n: int


def crashing() -> Extension:
    ext = Extension(
        id="crashy",
        version="1.0.0",
        grants={"commands", "timers", "projection"},
        projection_schema=Slot,
    )

    @ext.command("arm", scope="conversation", input=EmptyInput)
    def arm(ctx: Any, cid: str, data: EmptyInput) -> None:
        ctx.timers.set("t", ctx.now_ms() + 1000)

    @ext.on_timer
    def on_timer(ctx: Any, timer: TimerEvent) -> None:
        {}["missing"]

    @ext.project
    def project(ctx: Any, conversation_id: str) -> Slot:
        raise ValueError("projection broke")

    return ext


def stop_events(caplog: Any) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == "extension_stopped"]


def test_a_timer_stop_in_the_harness_logs_its_full_cause_once(hyphae_host, caplog):
    hyphae_host.install(crashing())
    hyphae_host.conversation("c1")
    hyphae_host.command("crashy", "arm", {}, conversation_id="c1")
    hyphae_host.advance(seconds=1)
    caplog.clear()

    hyphae_host.tick(0)  # nested: tick → fire_timers; the step must run exactly once

    state = hyphae_host.status("crashy")
    assert state.stopped
    (event,) = stop_events(caplog)
    assert event.extension_id == "crashy"
    assert event.hook == "on_timer"
    assert "KeyError: 'missing'" in event.cause
    assert "Traceback (most recent call last)" in event.cause
    assert "in on_timer" in event.cause
    assert hyphae_host.stop_cause("crashy") == event.cause


def test_a_projection_stop_in_the_harness_logs_its_full_cause(hyphae_host, caplog):
    hyphae_host.install(crashing())
    hyphae_host.conversation("c1")
    caplog.clear()

    hyphae_host.projection("c1")

    (event,) = stop_events(caplog)
    assert "ValueError: projection broke" in event.cause
    assert hyphae_host.stop_cause("crashy") == event.cause


def test_stop_cause_is_none_for_a_running_extension_and_after_a_resume(hyphae_host):
    hyphae_host.install(crashing())
    hyphae_host.conversation("c1")
    assert hyphae_host.stop_cause("crashy") is None
    hyphae_host.projection("c1")
    assert "ValueError" in (hyphae_host.stop_cause("crashy") or "")
    hyphae_host.resume("crashy")
    assert hyphae_host.stop_cause("crashy") is None


def test_a_stop_in_a_request_of_the_harness_api_client_has_its_cause(hyphae_host):
    hyphae_host.install(crashing())
    hyphae_host.conversation("c1")
    response = hyphae_host.api().get("/v1/conversations/c1/projection")
    assert response.status_code == 200
    assert hyphae_host.status("crashy").stopped
    assert "ValueError: projection broke" in (hyphae_host.stop_cause("crashy") or "")
