"""Tool calls: `POST /v1/runs/{id}/tool-calls`, idempotent on tool_call_id, results recorded as
`tool_result` entries, defects stop the extension and record `ok: false` (spec 04)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from conversations.models import Conversation, Entry, Role, Run
from conversations.services import Origin, run_settle, submission_admit
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.services.roster import extension_admit_grants
from extensions_host.surfaces.models import ToolCallResult
from extensions_host.surfaces.services import toolcalls
from extensions_host.surfaces.services.participation import successful_tool_result

from .conftest import in_frame, roster
from .exts import LookupInput, make_ext


@pytest.fixture
def calls() -> list[Any]:
    return []


@pytest.fixture
def tooled(install, conversation, owner, runtime, calls):
    """An extension `finder` with tools `lookup` (records its calls), `explode` (raises) and
    `check` (reads has_successful_tool_result); a claimed run of c1. Returns the run id."""

    def lookup(ctx: Any, run: Any, arguments: LookupInput) -> dict[str, Any]:
        calls.append((run.id, arguments.query))
        return {"hits": [arguments.query], "limit": arguments.limit}

    def explode(ctx: Any, run: Any, arguments: LookupInput) -> Any:
        calls.append("explode")
        raise RuntimeError(f"cannot look up {arguments.query}")

    def check(ctx: Any, run: Any, arguments: LookupInput) -> dict[str, bool]:
        return {"seen": ctx.has_successful_tool_result(run, arguments.query)}

    def sized(ctx: Any, run: Any, arguments: LookupInput) -> str:
        # a JSON string of exactly `limit` bytes: the two quotes and `limit - 2` ASCII letters
        return "x" * (arguments.limit - 2)

    install(
        make_ext(
            "finder",
            grants={"run_tools"},
            tools={
                "lookup": (LookupInput, lookup),
                "explode": (LookupInput, explode),
                "check": (LookupInput, check),
                "sized": (LookupInput, sized),
            },
        )
    )
    conversation("c1")
    with transaction.atomic():
        submission_admit(
            conversation_id="c1",
            parts=[{"type": "text", "text": "hi"}],
            origin=Origin.of_user(owner),
        )
    response = runtime.post("/v1/conversations/c1/runs", {}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def call(
    runtime: Any,
    run_id: int,
    tool_call_id: str = "tc1",
    tool: str = "lookup",
    arguments: dict[str, Any] | None = None,
    extension: str = "finder",
) -> Any:
    return runtime.post(
        f"/v1/runs/{run_id}/tool-calls",
        {
            "tool_call_id": tool_call_id,
            "extension": extension,
            "tool": tool,
            "arguments": {"query": "tea"} if arguments is None else arguments,
        },
        format="json",
    )


def test_a_tool_call_runs_the_handler_and_records_a_tool_result_entry(tooled, runtime, calls):
    response = call(runtime, tooled)

    assert response.status_code == 201
    body = response.json()
    assert body["ok"] is True
    assert body["result"] == {"hits": ["tea"], "limit": 10}
    assert body["idempotent"] is False
    assert calls == [(tooled, "tea")]
    entry = Entry.objects.get(pk=body["entry_id"])
    assert entry.role == Role.TOOL
    assert entry.run_id == tooled
    assert entry.content[0] == {
        "type": "tool_result",
        "tool_call_id": "tc1",
        "name": "lookup",
        "ok": True,
        "content": {"hits": ["tea"], "limit": 10},
        "meta": {"extension": "finder"},
    }


def test_a_repeated_tool_call_id_with_the_same_arguments_returns_the_recorded_result(
    tooled, runtime, calls
):
    first = call(runtime, tooled)

    again = call(runtime, tooled)

    assert again.status_code == 200
    assert again.json()["idempotent"] is True
    assert again.json()["result"] == first.json()["result"]
    assert again.json()["entry_id"] == first.json()["entry_id"]
    assert len(calls) == 1  # the handler did not run again
    assert ToolCallResult.objects.count() == 1


def test_a_repeated_tool_call_id_with_different_arguments_is_409(tooled, runtime, calls):
    assert call(runtime, tooled).status_code == 201

    conflict = call(runtime, tooled, arguments={"query": "coffee"})

    assert conflict.status_code == 409
    assert (
        conflict.json()["error"]["message"]
        == "Tool call id was already used with different arguments"
    )
    assert len(calls) == 1


def test_a_raising_tool_stops_its_extension_and_records_ok_false(tooled, runtime, calls):
    response = call(runtime, tooled, tool="explode")

    assert response.status_code == 201
    body = response.json()
    assert body["ok"] is False
    assert body["reason"] == "tool explode defect: cannot look up tea"
    assert roster("finder").status == ExtensionStatus.STOPPED
    entry = Entry.objects.get(pk=body["entry_id"])
    assert entry.content[0]["ok"] is False
    assert entry.content[0]["content"] == "tool explode defect: cannot look up tea"
    # a retry returns the recorded failure; a new call of the stopped extension fails too
    assert call(runtime, tooled, tool="explode").json()["idempotent"] is True
    later = call(runtime, tooled, tool_call_id="tc2")
    assert later.json()["ok"] is False
    assert later.json()["reason"].startswith("Extension finder is stopped: tool explode defect")
    assert calls == ["explode"]


def test_has_successful_tool_result_sees_the_recorded_results(tooled, runtime):
    assert call(runtime, tooled, tool_call_id="good").json()["ok"] is True

    seen = call(runtime, tooled, tool_call_id="c1", tool="check", arguments={"query": "good"})
    unseen = call(runtime, tooled, tool_call_id="c2", tool="check", arguments={"query": "nope"})

    assert seen.json()["result"] == {"seen": True}
    assert unseen.json()["result"] == {"seen": False}
    assert successful_tool_result(run=tooled, tool_call_id="good") is True
    call(runtime, tooled, tool_call_id="bad", tool="explode")
    assert successful_tool_result(run=tooled, tool_call_id="bad") is False


@pytest.mark.parametrize(
    "arguments",
    [{"query": ""}, {"query": "tea", "extra": 1}, {"limit": 3}, {"query": "t", "limit": "many"}],
)
def test_arguments_that_do_not_match_the_schema_are_400_and_nothing_is_recorded(
    tooled, runtime, calls, arguments
):
    response = call(runtime, tooled, arguments=arguments)

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Extension tool arguments are invalid"
    assert not ToolCallResult.objects.exists()
    assert calls == []


def test_arguments_are_checked_against_the_published_schema_types_without_coercion(
    tooled, runtime, calls
):
    # the schema the runtime was given says `limit` is an integer: "10" is not one
    response = call(runtime, tooled, arguments={"query": "tea", "limit": "10"})

    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "arguments.limit": ["Input should be a valid integer"]
    }
    assert calls == []
    assert not ToolCallResult.objects.exists()


def test_an_unknown_tool_or_an_uncaptured_extension_is_400_naming_the_wrong_field(tooled, runtime):
    unknown_tool = call(runtime, tooled, tool="nope")
    unknown_extension = call(runtime, tooled, extension="other")

    assert unknown_tool.status_code == unknown_extension.status_code == 400
    assert unknown_tool.json()["error"]["message"] == "Extension tool is unknown"
    assert unknown_tool.json()["error"]["details"] == {
        "tool": ["The extension's captured tools have no tool of this name."]
    }
    assert unknown_extension.json()["error"]["message"] == "Extension tool is unknown"
    assert unknown_extension.json()["error"]["details"] == {
        "extension": ["The run captured no tools of this extension."]
    }


def test_tool_calls_need_the_runtime_and_a_claimed_run(tooled, runtime, api, owner):
    assert call(api(owner), tooled).status_code == 403
    assert call(api(None), tooled).status_code == 401
    assert call(runtime, 999_999).status_code == 404
    entry = Entry.objects.create(conversation_id="c1", role="assistant", content=[], run_id=tooled)
    run_settle(run_id=tooled, status="answered", answer_entry_id=entry.pk)
    settled = call(runtime, tooled, tool_call_id="late")
    assert settled.status_code == 409


def test_has_pending_steer_reads_the_live_runs_steers(tooled, owner):
    from extensions_host.surfaces.services.participation import pending_steer

    assert pending_steer(run=tooled) is False
    submission_admit(
        conversation_id="c1",
        parts=[{"type": "text", "text": "actually…"}],
        origin=Origin.of_user(owner),
        when_busy="steer",
    )

    seen = in_frame("finder", lambda ctx: ctx.has_pending_steer(tooled), hook="check", mode="read")

    assert seen.value is True


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_same_tool_call_id_sent_concurrently_runs_the_handler_once(tooled, calls):
    import threading

    from django.db import connection

    from extensions_host.surfaces.services.toolcalls import tool_call_execute

    ids = [f"tc{n}" for n in range(20)]
    replies: list[tuple[str, bool, int]] = []
    failures: list[BaseException] = []
    start = threading.Barrier(5)

    def worker() -> None:
        try:
            start.wait()
            for tool_call_id in ids:
                outcome = tool_call_execute(
                    run_id=tooled, tool_call_id=tool_call_id, extension_id="finder",
                    tool="lookup", arguments={"query": tool_call_id},
                )  # fmt: skip
                replies.append((tool_call_id, outcome.created, outcome.record.pk))
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert failures == []
    assert ToolCallResult.objects.count() == 20
    assert sorted(query for _, query in calls) == sorted(ids)  # each handler ran once
    for tool_call_id in ids:
        mine = [r for r in replies if r[0] == tool_call_id]
        assert len(mine) == 5
        assert sum(created for _, created, _ in mine) == 1  # 1 creating, 4 idempotent
        assert len({pk for _, _, pk in mine}) == 1  # every reply names the same record


def test_a_tool_call_after_the_run_tools_grant_was_withdrawn_records_ok_false_without_running(
    tooled, runtime, calls
):
    extension_admit_grants(extension_id="finder", grants=[], actor="staff")

    response = call(runtime, tooled)

    assert response.status_code == 201
    assert response.json()["ok"] is False
    assert response.json()["reason"] == "Extension finder is unavailable"
    assert calls == []  # the handler never ran
    assert roster("finder").status == ExtensionStatus.RUNNING
    record = ToolCallResult.objects.get(tool_call_id="tc1")
    assert (record.ok, record.entry.content[0]["ok"]) == (False, False)


def _settle(run_id: int) -> None:
    entry = Entry.objects.create(conversation_id="c1", role="assistant", content=[], run_id=run_id)
    run_settle(run_id=run_id, status="answered", answer_entry_id=entry.pk)


def test_a_call_of_a_settled_run_is_409_and_records_nothing_even_when_the_code_is_gone(
    tooled, runtime, install, calls
):
    _settle(tooled)
    install(sync=False)  # this process no longer has the extension's code

    response = call(runtime, tooled, tool_call_id="late")

    assert response.status_code == 409
    assert response.json()["error"]["message"] == "Run is not claimed"
    assert not ToolCallResult.objects.exists()
    assert not Entry.objects.filter(role=Role.TOOL).exists()


def test_a_run_settled_after_the_first_check_does_not_run_the_handler(
    tooled, runtime, calls, monkeypatch
):
    real_run_info = toolcalls.run_info

    def settle_meanwhile(run: Run) -> Any:
        # the run settles between the request's first read and the frame
        _settle(run.pk)
        return real_run_info(run)

    monkeypatch.setattr(toolcalls, "run_info", settle_meanwhile)

    response = call(runtime, tooled)

    assert response.status_code == 409
    assert response.json()["error"]["message"] == "Run is not claimed"
    assert calls == []
    assert not ToolCallResult.objects.exists()


def test_a_recorded_result_is_replayed_after_the_run_settled(tooled, runtime, calls):
    first = call(runtime, tooled)
    _settle(tooled)

    again = call(runtime, tooled)

    assert again.status_code == 200
    assert again.json()["idempotent"] is True
    assert again.json()["entry_id"] == first.json()["entry_id"]
    assert len(calls) == 1


def test_a_result_of_exactly_512_kib_is_recorded(tooled, runtime):
    response = call(runtime, tooled, tool="sized", arguments={"query": "q", "limit": 512 * 1024})

    assert response.status_code == 201
    assert response.json()["ok"] is True
    assert len(response.json()["result"]) == 512 * 1024 - 2
    assert roster("finder").status == ExtensionStatus.RUNNING


def test_a_result_one_byte_past_512_kib_is_a_defect_recorded_as_ok_false(tooled, runtime):
    response = call(
        runtime, tooled, tool="sized", arguments={"query": "q", "limit": 512 * 1024 + 1}
    )

    assert response.status_code == 201
    assert response.json()["ok"] is False
    assert "Extension tool result is too large" in response.json()["reason"]
    assert roster("finder").status == ExtensionStatus.STOPPED


def test_a_call_while_the_extension_moves_to_a_new_revision_is_503_and_records_nothing(
    tooled, runtime, calls
):
    RosterEntry.objects.filter(pk="finder").update(revision="next")

    response = call(runtime, tooled)

    assert response.status_code == 503
    assert response.json()["error"]["message"] == "Extension is updating to a new revision"
    assert response["Retry-After"] == "1"
    assert calls == []
    assert not ToolCallResult.objects.exists()


def test_a_recorded_failure_bumps_the_conversation_version(tooled, runtime):
    extension_admit_grants(extension_id="finder", grants=[], actor="staff")
    before = Conversation.objects.get(pk="c1").version

    response = call(runtime, tooled)

    assert response.json()["ok"] is False
    assert Conversation.objects.get(pk="c1").version > before
