"""The chaos example, through the author harness: each fault stops the extension with the
spec's reason, rolls its frame back, and resume catches up on what it missed."""

from __future__ import annotations

from typing import Any

import pytest
from hyphae_chaos.extension import chaos

from core.errors import HostError


@pytest.fixture
def host(hyphae_host: Any) -> Any:
    hyphae_host.install(chaos)
    hyphae_host.user("root", staff=True)
    hyphae_host.conversation("c1")
    return hyphae_host


def set_fault(host: Any, fault: str, *hooks: str) -> None:
    host.command("chaos", "fault", {"fault": fault, "hooks": list(hooks)}, user="root")


def hooks_hit(host: Any) -> list[str]:
    return [h.hook for h in host.records("chaos", "hit")]


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("raise", "on_timer defect: chaos: on_timer raised on purpose"),
        ("sleep", "on_timer exceeded its deadline"),
        (
            "async",
            "on_timer crossed an asynchronous boundary inside a core transaction",
        ),
        ("outside", "on_timer defect: Extension write used a context of an earlier frame"),
        ("stop", "chaos: stopped on purpose"),
    ],
)
def test_a_faulty_timer_hook_stops_chaos_and_rolls_its_frame_back(host, fault, reason):
    host.command("chaos", "arm", {"in_seconds": 1}, conversation_id="c1")
    set_fault(host, fault, "on_timer")

    host.advance(seconds=1)
    assert host.fire_timers() == 0

    state = host.status("chaos")
    assert (state.status, state.reason, state.failing_hook) == ("stopped", reason, "on_timer")
    assert "on_timer" not in hooks_hit(host)  # its write was rolled back with the frame
    assert host.timers("chaos") == {"chaos": host.clock.now_ms()}  # the timer stays


def test_after_resume_the_timer_it_missed_fires(host):
    host.command("chaos", "arm", {"in_seconds": 1}, conversation_id="c1")
    set_fault(host, "raise", "on_timer")
    host.advance(seconds=1)
    host.fire_timers()
    assert host.status("chaos").stopped
    host.set_settings("chaos", {"fault": "off"})  # staff fix the cause in the admin

    assert host.resume("chaos").running
    assert host.fire_timers() == 1

    assert hooks_hit(host) == ["on_timer"]
    assert host.timers("chaos") == {}


def test_a_stopped_consumer_replays_the_runs_it_missed_after_resume(host):
    set_fault(host, "stop", "on_settled")
    host.settle("c1", "one")
    host.deliver_settled()
    assert host.status("chaos").reason == "chaos: stopped on purpose"
    host.settle("c1", "two")
    host.settle("c1", "three")
    assert host.deliver_settled() == 0  # stopped means stopped

    host.set_settings("chaos", {"fault": "off"})
    host.resume("chaos")

    assert host.deliver_settled() == 3
    assert hooks_hit(host).count("on_settled") == 1  # one batch of all three


def test_a_projection_outside_its_schema_stops_only_that_slot(host):
    set_fault(host, "bad_projection")

    slot = host.projection("c1")["chaos"]

    assert slot["status"] == "stopped"
    assert slot["reason"] == (
        "project defect: Extension projection is invalid: fault: Input should be 'off', 'raise',"
        " 'sleep', 'async', 'outside', 'bad_projection' or 'stop'"
    )


def test_a_faulty_prompt_hook_rejects_the_claim_and_the_next_claim_goes_on(host):
    set_fault(host, "raise", "prompt")

    with pytest.raises(HostError) as error:
        host.settle("c1", "hello")

    assert (error.value.status, error.value.message) == (422, "Extension prompt failed")
    assert host.status("chaos").failing_hook == "prompt"
    turn = host.settle("c1", None)  # the released input is claimed again, without chaos
    assert turn.input_texts == ("hello",)


def test_a_faulty_lifecycle_handler_stops_and_gets_the_events_after_resume(host):
    host.deliver_lifecycle()  # c1's creation, delivered while all is well
    set_fault(host, "raise", "conversation_created")

    host.conversation("c2")
    host.conversation("c3")
    host.deliver_lifecycle()
    assert host.status("chaos").failing_hook == "conversation_created"
    assert hooks_hit(host) == ["conversation_created"]  # c1 only

    host.set_settings("chaos", {"fault": "off"})
    host.resume("chaos")
    host.deliver_lifecycle()
    assert hooks_hit(host) == ["conversation_created"] * 3  # c2 and c3 caught up


def test_a_defect_in_a_command_answers_503_with_the_reason(host):
    set_fault(host, "raise", "command poke")

    with pytest.raises(HostError) as error:
        host.command("chaos", "poke", conversation_id="c1")

    assert error.value.status == 503
    assert error.value.message == (
        "Extension chaos is stopped: command poke defect: chaos: command poke raised on purpose"
    )


def test_a_write_outside_any_frame_from_a_route_stops_chaos(host):
    set_fault(host, "outside", "route POST poke")

    response = host.route("POST", "chaos", "poke")

    assert response.status_code == 503
    assert host.status("chaos").reason == (
        "route POST poke defect: Extension write used outside its own core transaction"
    )
    assert hooks_hit(host) == []


def test_with_the_fault_off_every_hook_works(host):
    host.command("chaos", "arm", {"in_seconds": 1}, conversation_id="c1")
    host.advance(seconds=1)
    host.fire_timers()
    host.settle("c1", "fine")
    host.deliver_settled()
    assert host.command("chaos", "poke", conversation_id="c1") == {"poked": True}
    assert host.route("POST", "chaos", "poke").json() == {"poked": True}

    assert host.status("chaos").running
    assert host.projection("c1")["chaos"]["value"] == {"fault": "off"}
    assert sorted(set(hooks_hit(host))) == [
        "command poke",
        "on_settled",
        "on_timer",
        "route POST poke",
    ]
