"""Run participation at claim, through the API: participants, prompt sections and every bound
of spec 04, tool modules, files, compaction handoff, skills (spec 01 / 04)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from conversations.models import Run, Submission
from conversations.services import run_settle
from core.validation import input_json_schema
from extensions_host.models import ExtensionStatus
from extensions_host.sdk import Retry, ToolModule

from .conftest import claim, roster, submit
from .exts import LookupInput, make_ext, prompter, sections


class Near(BaseModel):
    city: str


class PlaceInput(BaseModel):
    name: str
    near: Near


PROMPT_INVALID = "Extension prompt is invalid"
MODULE_INVALID = "Extension tool module is invalid"


@pytest.fixture
def ready(conversation, owner):
    conversation("c1")
    submit("c1", owner)


def test_the_claim_captures_participants_with_fingerprints_and_orders_and_renames_sections(
    install, ready, runtime
):
    install(
        prompter("zeta", sections(("tone", "Be brief."))),
        prompter("alpha", sections(("rules", "No jargon."), ("about", "A user in Oslo."))),
        make_ext("bystander", grants={"state"}),
    )

    response = claim(runtime)

    assert response.status_code == 201, response.json()
    capture = response.json()["capture"]
    assert [p["id"] for p in capture["participants"]] == ["alpha", "zeta"]
    assert capture["participants"][0]["fingerprint"] == roster("alpha").fingerprint
    assert capture["prompt_sections"] == [
        {"name": "alpha.about", "text": "A user in Oslo."},
        {"name": "alpha.rules", "text": "No jargon."},
        {"name": "zeta.tone", "text": "Be brief."},
    ]
    assert capture["skills"] == []
    assert Run.objects.get().capture["prompt_sections"][0]["name"] == "alpha.about"


def test_the_prompt_hook_receives_the_run_and_runs_read_only(install, ready, runtime):
    seen: list[Any] = []

    def prompt(ctx: Any, run: Any) -> list[dict[str, str]]:
        seen.append(run)
        return [{"name": "inputs", "text": " / ".join(run.input_texts)}]

    install(prompter("alpha", prompt))

    capture = claim(runtime).json()["capture"]

    assert capture["prompt_sections"] == [{"name": "alpha.inputs", "text": "hello"}]
    assert seen[0].conversation_id == "c1"
    assert len(seen[0].inputs) == 1


VIOLATIONS = {
    "name does not match the pattern": [("Tone", "x")],
    "name longer than 64": [("a" * 65, "x")],
    "empty text": [("tone", "")],
    "text over 8192 bytes": [("tone", "é" * 4097)],
    "17 sections": [(f"s{n}", "x") for n in range(17)],
    "duplicate names": [("tone", "a"), ("tone", "b")],
}


@pytest.mark.parametrize("rule", list(VIOLATIONS))
def test_a_prompt_section_rule_violation_stops_the_extension_and_a_second_claim_succeeds(
    install, ready, runtime, rule
):
    install(
        prompter("alpha", sections(("ok", "Fine."))),
        prompter("bad", sections(*VIOLATIONS[rule])),
    )

    rejected = claim(runtime)

    assert rejected.status_code == 422
    assert rejected.json()["error"] == {
        "category": "extensions",
        "cause": "rejected",
        "message": PROMPT_INVALID,
    }
    bad = roster("bad")
    assert bad.status == ExtensionStatus.STOPPED
    assert bad.reason.startswith("prompt: section is invalid or exceeds its bound")
    assert Submission.objects.get().status == "queued"  # released and re-queued
    assert Run.objects.get().status == "released"

    again = claim(runtime)

    assert again.status_code == 201
    capture = again.json()["capture"]
    assert [p["id"] for p in capture["participants"]] == ["alpha"]
    assert capture["prompt_sections"] == [{"name": "alpha.ok", "text": "Fine."}]


def test_a_section_with_extra_keys_is_accepted_and_the_runtime_gets_only_name_and_text(
    install, ready, runtime
):
    def prompt(ctx: Any, run: Any) -> list[dict[str, Any]]:
        return [{"name": "tone", "text": "Be brief.", "priority": 1, "meta": {"a": "b"}}]

    install(prompter("alpha", prompt))

    response = claim(runtime)

    assert response.status_code == 201, response.json()
    assert response.json()["capture"]["prompt_sections"] == [
        {"name": "alpha.tone", "text": "Be brief."}
    ]
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_secret_in_an_invalid_section_name_never_reaches_the_stop_reason_in_part(
    install, ready, runtime, monkeypatch
):
    from extensions_host.runtime import stops

    secret = "sk-live-IN-A-SECTION-NAME-0123456789"
    monkeypatch.setattr(stops, "secret_sources", [lambda ext_id: [secret]])
    install(prompter("bad", sections(("X" * 70 + secret, "x"))))

    assert claim(runtime).status_code == 422

    reason = roster("bad").reason
    assert reason.endswith("a section name is longer than 64 characters")
    assert secret[:8] not in reason


def test_a_section_of_exactly_8192_bytes_and_16_sections_are_accepted(install, ready, runtime):
    pairs = [("big", "x" * 8192)] + [(f"s{n:02}", "y") for n in range(15)]
    install(prompter("alpha", sections(*pairs)))

    response = claim(runtime)

    assert response.status_code == 201
    assert len(response.json()["capture"]["prompt_sections"]) == 16


def test_sections_over_65536_bytes_in_total_stop_the_extension_that_crosses_the_bound(
    install, ready, runtime
):
    eight = [(f"s{n:02}", "x" * 8192) for n in range(7)]  # 57,344 bytes each extension
    install(prompter("alpha", sections(*eight)), prompter("beta", sections(*eight)))

    rejected = claim(runtime)

    assert rejected.status_code == 422
    assert rejected.json()["error"]["message"] == PROMPT_INVALID
    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert roster("beta").status == ExtensionStatus.STOPPED
    again = claim(runtime)
    assert again.status_code == 201
    assert len(again.json()["capture"]["prompt_sections"]) == 7


def test_a_raising_prompt_hook_stops_the_extension_and_fails_the_claim(install, ready, runtime):
    def prompt(ctx: Any, run: Any) -> Any:
        raise RuntimeError("no prompt today")

    install(prompter("alpha", prompt))

    rejected = claim(runtime)

    assert rejected.status_code == 422
    assert rejected.json()["error"]["message"] == "Extension prompt failed"
    assert roster("alpha").reason == "prompt defect: no prompt today"
    assert claim(runtime).status_code == 201


def test_a_prompt_hook_that_writes_is_a_defect(install, ready, runtime):
    from pydantic import BaseModel

    from extensions_host.sdk import Collection

    class Note(BaseModel):
        key: str

    def prompt(ctx: Any, run: Any) -> Any:
        ctx.collection("note").put(Note(key="k"))
        return []

    ext = make_ext(
        "alpha",
        grants={"prompt", "state"},
        hooks={"prompt": prompt},
        collections={"note": Collection(Note, key=lambda n: n.key)},
    )
    install(ext)

    assert claim(runtime).status_code == 422
    assert roster("alpha").status == ExtensionStatus.STOPPED


def test_a_granted_prompt_without_a_hook_stops_with_the_missing_handler_reason(
    install, ready, runtime
):
    install(make_ext("alpha", grants={"prompt"}))

    rejected = claim(runtime)

    assert rejected.status_code == 422
    assert roster("alpha").reason == "prompt: granted capability has no handler"


# --- tool modules, files, compaction handoff --------------------------------------------------


def lookup(ctx: Any, run: Any, arguments: LookupInput) -> dict[str, Any]:
    return {"hits": [arguments.query] * min(arguments.limit, 2)}


def test_tool_modules_carry_json_schemas_of_the_declared_tools(install, ready, runtime):
    install(
        make_ext("alpha", grants={"run_tools"}, tools={"lookup": (LookupInput, lookup)}),
        make_ext(
            "beta",
            grants={"run_tools"},
            tools={"lookup": (LookupInput, lookup), "hidden": (LookupInput, lookup)},
            hooks={
                "module_for_run": lambda ctx, run: ToolModule(
                    tools=["lookup"], instructions="Use it."
                )
            },
        ),
        make_ext("gamma", grants={"run_tools"}, hooks={"module_for_run": lambda ctx, run: None}),
    )

    modules = claim(runtime).json()["capture"]["tool_modules"]

    assert [m["extension"] for m in modules] == ["alpha", "beta"]
    tool = modules[0]["tools"][0]
    assert tool["name"] == "lookup"
    assert tool["description"] == "the lookup tool"
    assert tool["parameters"] == input_json_schema(LookupInput)
    assert [t["name"] for t in modules[1]["tools"]] == ["lookup"]
    assert modules[1]["instructions"] == "Use it."


def test_tool_parameters_close_every_object_as_the_tool_call_check_does(install, ready, runtime):
    install(
        make_ext(
            "alpha",
            grants={"run_tools"},
            tools={"place": (PlaceInput, lambda ctx, run, arguments: {"ok": True})},
        )
    )

    response = claim(runtime)
    (tool,) = response.json()["capture"]["tool_modules"][0]["tools"]
    parameters = tool["parameters"]
    assert parameters["additionalProperties"] is False
    assert parameters["$defs"]["Near"]["additionalProperties"] is False

    run_id = response.json()["id"]
    url = f"/v1/runs/{run_id}/tool-calls"
    refused = runtime.post(
        url,
        {
            "tool_call_id": "t1",
            "extension": "alpha",
            "tool": "place",
            "arguments": {"name": "x", "near": {"city": "y", "zip": "1"}},
        },
        format="json",
    )
    assert refused.status_code == 400
    assert set(refused.json()["error"]["details"]) == {"arguments.near.zip"}


def test_a_failing_module_for_run_stops_that_extension_and_the_run_goes_on(install, ready, runtime):
    install(
        make_ext(
            "alpha",
            grants={"run_tools"},
            tools={"lookup": (LookupInput, lookup)},
            hooks={"module_for_run": lambda ctx, run: ["undeclared"]},
        ),
        prompter("beta", sections(("tone", "Brief."))),
    )

    response = claim(runtime)

    assert response.status_code == 201
    assert response.json()["capture"]["tool_modules"] == []
    alpha = roster("alpha")
    assert alpha.status == ExtensionStatus.STOPPED
    # refused by the module's validation, not a crash on the undeclared name
    assert (alpha.failing_hook, alpha.reason) == (
        "module_for_run",
        f"module_for_run defect: {MODULE_INVALID}",
    )
    assert response.json()["capture"]["prompt_sections"] == [
        {"name": "beta.tone", "text": "Brief."}
    ]


def test_files_come_from_the_first_captured_extension_with_files(install, ready, runtime):
    install(
        make_ext(
            "alpha",
            grants={"files"},
            hooks={"files_for_run": lambda ctx, run: [{"path": "notes/today.md"}]},
        ),
        make_ext(
            "beta",
            grants={"files"},
            hooks={"files_for_run": lambda ctx, run: [{"url": "https://x.test/f"}]},
        ),
    )

    assert claim(runtime).json()["capture"]["files"] == [{"path": "notes/today.md"}]


def test_failing_files_stop_the_extension_and_reject_the_claim(install, ready, runtime):
    def files(ctx: Any, run: Any) -> Any:
        raise RuntimeError("disk gone")

    install(make_ext("alpha", grants={"files"}, hooks={"files_for_run": files}))

    rejected = claim(runtime)

    assert rejected.status_code == 422
    assert rejected.json()["error"]["message"] == "Extension Files capture failed"
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert Submission.objects.get().status == "queued"
    assert claim(runtime).json()["capture"]["files"] == []


def test_granted_files_without_a_hook_stop_the_extension_and_fail_the_claim_as_a_capture(
    install, ready, runtime
):
    install(make_ext("alpha", grants={"files"}))

    rejected = claim(runtime)

    assert rejected.status_code == 422
    assert rejected.json()["error"]["category"] == "extensions"
    assert rejected.json()["error"]["cause"] == "rejected"
    assert rejected.json()["error"]["message"] == "Extension Files capture failed"
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert roster("alpha").reason == "files: granted capability has no handler"
    assert claim(runtime).json()["capture"]["files"] == []


def test_the_compaction_handoff_comes_from_the_first_captured_extension(install, ready, runtime):
    install(
        make_ext(
            "alpha",
            grants={"compaction_handoff"},
            hooks={"compaction_handoff": lambda ctx, run: {"summary": "so far"}},
        ),
        make_ext(
            "beta",
            grants={"compaction_handoff"},
            hooks={"compaction_handoff": lambda ctx, run: "ignored"},
        ),
    )

    capture = claim(runtime).json()["capture"]

    assert capture["compaction_handoff"] == {"extension": "alpha", "value": {"summary": "so far"}}


def test_a_stopped_extension_is_not_captured_and_its_hooks_are_not_called(install, ready, runtime):
    calls: list[str] = []

    def prompt(ctx: Any, run: Any) -> Any:
        calls.append("prompt")
        return []

    install(prompter("alpha", prompt))
    from extensions_host.runtime import extension_stop

    extension_stop(extension_id="alpha", hook="test", reason="off")

    capture = claim(runtime).json()["capture"]

    assert capture["participants"] == []
    assert calls == []


def test_an_extension_in_runs_whose_migration_failed_is_reported_as_incompatible(install):
    from extensions_host.runtime import extension_stop
    from extensions_host.surfaces.services.participation import incompatible_migrations

    install(
        make_ext("alpha", grants={"prompt"}, hooks={"prompt": sections()}),
        make_ext("beta", grants={"state"}),
        make_ext("gamma", grants={"run_tools"}),
    )
    for ext_id in ("alpha", "beta"):
        extension_stop(extension_id=ext_id, hook="migration", reason="migration: step 1 failed")
    extension_stop(extension_id="gamma", hook="prompt", reason="prompt defect: x")

    reported = incompatible_migrations()

    # beta does not take part in runs; gamma stopped for another reason
    assert reported == [{"id": "alpha", "reason": "migration: step 1 failed"}]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("not a list", "the result is not a list of sections"),
        ([{"name": "a"}], "a section has no {name, text}"),
        ([{"name": "a", "text": "nul\x00"}], "section a is not valid text"),
        ([("a", "x")], "a section has no {name, text}"),
        ([{"name": 5, "text": "x"}], "a section name is not a string but int"),
        ([{"name": "a" * 65, "text": "x"}], "a section name is longer than 64 characters"),
    ],
)
def test_section_shapes_the_rules_do_not_list_are_invalid_too(value, problem):
    from extensions_host.surfaces.services.participation import prompt_sections_check

    assert prompt_sections_check(value) == ([], problem)


# --- Retry at claim ---------------------------------------------------------------------------


def retrying(ctx: Any, run: Any) -> Any:
    raise Retry(7, "upstream down")


RETRYING_HOOKS = {
    # the grant, and what the claim answers once the extension stopped past the retry bound
    "prompt": ("prompt", 422),
    "files_for_run": ("files", 422),
    "module_for_run": ("run_tools", 201),
    "compaction_handoff": ("compaction_handoff", 201),
}


@pytest.mark.parametrize("hook", list(RETRYING_HOOKS))
def test_a_retry_at_claim_is_503_with_the_run_released_until_the_retry_limit_then_a_stop(
    install, ready, runtime, settings, hook
):
    settings.HOST_RETRY_LIMIT = 2
    grant, after_stop = RETRYING_HOOKS[hook]
    install(make_ext("alpha", grants={grant}, hooks={hook: retrying}))

    for _ in range(2):
        retried = claim(runtime)

        assert retried.status_code == 503
        assert retried["Retry-After"] == "7"
        assert retried.json()["error"] == {
            "category": "extensions",
            "cause": "unavailable",
            "message": "Extension alpha asked to retry: upstream down",
        }
        assert roster("alpha").status == ExtensionStatus.RUNNING
        assert Submission.objects.get().status == "queued"  # released and re-queued
        assert not Run.objects.filter(status="claimed").exists()

    stopped = claim(runtime)

    assert stopped.status_code == after_stop
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert roster("alpha").reason == f"{hook} defect: retried 2 times: upstream down"
    if after_stop == 422:
        assert claim(runtime).status_code == 201  # the runtime claims again without it


def test_a_claim_hook_that_answers_again_starts_its_retry_count_afresh(
    install, ready, runtime, settings, owner
):
    settings.HOST_RETRY_LIMIT = 2
    answers: list[Any] = [Retry(1), Retry(1), [], Retry(1), Retry(1)]

    def prompt(ctx: Any, run: Any) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Retry):
            raise answer
        return answer

    install(prompter("alpha", prompt))
    codes = [claim(runtime).status_code for _ in range(2)]
    answered = claim(runtime)
    assert answered.status_code == 201
    run_settle(run_id=answered.json()["id"], status="unanswered", reason="done")
    submit("c1", owner, "again")

    codes += [claim(runtime).status_code for _ in range(2)]

    assert codes == [503, 503, 503, 503]
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_a_granted_compaction_handoff_without_a_hook_stops_and_the_run_goes_on(
    install, ready, runtime
):
    install(make_ext("alpha", grants={"compaction_handoff"}))

    response = claim(runtime)

    assert response.status_code == 201
    assert response.json()["capture"]["compaction_handoff"] is None
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert roster("alpha").reason == "compaction_handoff: granted capability has no handler"
