"""The author harness itself: what each `TestHost` method drives is the host's real machinery
(its effects show in the same stores the API reads), and the host is torn down cleanly."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from core import clock
from core.errors import HostError
from extensions_host import registry
from extensions_host.sdk import Collection, CommandError, Extension, Job, Prompt, add_job
from extensions_host.testing import running_host


class Seen(BaseModel):
    key: str
    detail: str = ""


def recorder(**extra: Any) -> Extension:
    ext = Extension(
        id="recorder",
        version="1.0.0",
        grants={"state", "lifecycle", "timers", "send", "commands"},
        collections={"seen": Collection(Seen, key=lambda s: s.key)},
        **extra,
    )

    @ext.on_lifecycle("conversation_archived")
    def archived(ctx: Any, event: Any) -> None:
        ctx.collection("seen").put(
            Seen(key=f"archived:{event.conversation_id}", detail=str(event["archived"]))
        )

    @ext.on_timer
    def due(ctx: Any, timer: Any) -> None:
        ctx.send(
            "c1",
            prompt=Prompt(request_id=f"t:{timer.key}", text="later"),
            when=timer.due_at + 5_000,
        )

    @ext.command("fail", scope="global")
    def fail(ctx: Any, data: Any) -> None:
        raise CommandError("conflict", "Always")

    return ext


def test_emit_lifecycle_delivers_the_event_to_its_handler(hyphae_host):
    hyphae_host.install(recorder())

    hyphae_host.emit_lifecycle("conversation_archived", "c9", archived=True)

    assert hyphae_host.record("recorder", "seen", "archived:c9") == Seen(
        key="archived:c9", detail="True"
    )


def test_install_admits_only_the_listed_grants(hyphae_host):
    hyphae_host.install(recorder(), grants={"recorder": ["state", "timers", "commands"]})
    hyphae_host.transact("recorder", lambda ctx: ctx.timers.set("t1", hyphae_host.clock.now_ms()))

    hyphae_host.fire_timers()

    state = hyphae_host.status("recorder")
    assert state.admitted_grants == {"state", "timers", "commands"}
    assert state.stopped
    assert state.reason == "on_timer: AdmissionError: Extension is not granted send"


def test_sent_reports_delayed_prompts_and_respond_answers_when_due(hyphae_host):
    hyphae_host.install(recorder())
    hyphae_host.conversation("c1")
    now = hyphae_host.clock.now_ms()
    hyphae_host.transact("recorder", lambda ctx: ctx.timers.set("t1", now))
    hyphae_host.fire_timers()

    (prompt,) = hyphae_host.sent("c1", extension_id="recorder")
    assert (prompt.text, prompt.request_id, prompt.not_before_ms) == ("later", "t:t1", now + 5_000)
    assert prompt.correlation is None  # none was named: as the API shows it
    assert hyphae_host.respond() == []  # not runnable before its instant
    hyphae_host.advance(seconds=5)
    (turn,) = hyphae_host.respond()
    assert turn.input_texts == ("later",)
    assert turn.answer.startswith("echo: later")


def test_typed_errors_of_commands_and_transact_reach_the_test_as_they_reach_callers(hyphae_host):
    hyphae_host.install(recorder())

    with pytest.raises(HostError) as error:
        hyphae_host.command("recorder", "fail")
    assert (error.value.status, error.value.message) == (409, "Always")

    def bad(ctx: Any) -> None:
        raise CommandError("not_found", "nope")

    with pytest.raises(CommandError):
        hyphae_host.transact("recorder", bad)
    assert hyphae_host.status("recorder").running


def test_trigger_job_runs_a_declared_job_now(hyphae_host):
    ext = recorder()
    add_job(
        ext,
        Job(
            "tick",
            every_seconds=3600,
            action=lambda ctx, run: ctx.collection("seen").put(Seen(key=f"job:{run.manual}")),
        ),
    )
    hyphae_host.install(ext)
    hyphae_host.user("root", staff=True)

    assert hyphae_host.trigger_job("ext:recorder:tick") == "ok"

    assert hyphae_host.read("recorder", lambda ctx: ctx.collection("seen").get("job:True"))
    assert hyphae_host.jobs()["ext:recorder:tick"]["runs"] == 1


def test_a_job_is_scheduled_at_install_so_the_first_instant_after_it_runs(hyphae_host):
    # a running host's sweep declares a new job within a tick: moving the clock before the
    # first run_jobs() must not lose the instants it passes
    ext = recorder()
    add_job(
        ext,
        Job(
            "hourly",
            every_seconds=3600,
            action=lambda ctx, run: ctx.collection("seen").put(Seen(key=f"at:{run.scheduled_for}")),
        ),
    )
    hyphae_host.install(ext)
    installed = hyphae_host.clock.now_ms()
    assert hyphae_host.jobs()["ext:recorder:hourly"]["next_run_at"] == clock.from_ms(
        installed + 3_600_000
    )

    hyphae_host.advance(seconds=3600)
    hyphae_host.run_jobs()

    assert hyphae_host.read(
        "recorder", lambda ctx: ctx.collection("seen").get(f"at:{installed + 3_600_000}")
    )


def test_workers_reports_the_outcome_of_a_worker_a_delivery_ran(hyphae_host):
    from extensions_host.sdk import Worker, add_worker

    ext = recorder()

    def kaput(ctx: Any, wake: Any) -> None:
        raise RuntimeError("kaput")

    add_worker(ext, Worker("w", wake_on=["conversation_created"], run=kaput))
    hyphae_host.install(ext)
    hyphae_host.conversation("c1")

    hyphae_host.deliver_lifecycle()

    worker = hyphae_host.workers()["ext:recorder:worker:w"]
    assert (worker["last_outcome"], worker["last_error"]) == ("failed", "worker w defect: kaput")


def test_the_host_restores_the_clock_and_the_installed_set(db, tmp_path):
    before = registry._override

    with running_host(data_dir=tmp_path) as host:
        host.install(recorder())
        assert isinstance(clock._clock, clock.FakeClock)
        assert list(registry.loaded()) == ["recorder"]

    assert isinstance(clock._clock, clock.SystemClock)
    assert registry._override is before


class Lookup(BaseModel):
    word: str


def dictionary() -> Extension:
    ext = Extension(
        id="dictionary",
        version="1.0.0",
        grants={"run_tools", "state"},
        collections={"seen": Collection(Seen, key=lambda s: s.key)},
    )

    @ext.tool("define", input=Lookup, description="Define a word")
    def define(ctx: Any, run: Any, arguments: Lookup) -> dict[str, str]:
        if arguments.word == "boom":
            raise RuntimeError("no such word")
        ctx.collection("seen").put(Seen(key=arguments.word, detail=run.conversation_id))
        return {"word": arguments.word, "meaning": arguments.word[::-1]}

    return ext


def test_tool_call_runs_the_handler_of_a_claimed_run_then_the_turn_settles(hyphae_host):
    hyphae_host.install(dictionary())
    hyphae_host.conversation("c1")

    run_id = hyphae_host.claim("c1", "what does kayak mean?")
    call = hyphae_host.tool_call(run_id, "dictionary", "define", {"word": "kayak"})
    again = hyphae_host.tool_call(
        run_id, "dictionary", "define", {"word": "kayak"}, tool_call_id=call.tool_call_id
    )
    turn = hyphae_host.answer(run_id, "it reads the same both ways")

    assert call.ok and call.result == {"word": "kayak", "meaning": "kayak"}
    assert again == call  # idempotent on the tool-call id: the recorded result
    assert hyphae_host.record("dictionary", "seen", "kayak") == Seen(key="kayak", detail="c1")
    assert turn.run_id == run_id and turn.answer == "it reads the same both ways"
    roles = [role for role, _ in hyphae_host.transcript("c1")]
    assert roles == ["user", "tool", "assistant"]


def test_a_failing_tool_is_recorded_not_ok_and_stops_its_extension(hyphae_host):
    hyphae_host.install(dictionary())
    hyphae_host.conversation("c1")
    run_id = hyphae_host.claim("c1")

    call = hyphae_host.tool_call(run_id, "dictionary", "define", {"word": "boom"})

    assert not call.ok and "no such word" in call.reason
    assert hyphae_host.status("dictionary").stopped
    with pytest.raises(HostError) as bad:
        hyphae_host.tool_call(run_id, "dictionary", "define", {"wrd": "x"})
    assert bad.value.status == 400
