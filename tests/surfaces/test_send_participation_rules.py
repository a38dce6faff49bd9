"""Rules of send, run participation and ambient surfaces that the other tests leave open: the
bounds at their edges, what a refused write leaves behind, which extensions a claim captures,
what a module, a file list or a handoff may be, and the version bumps watchers rely on
(spec 04)."""

from __future__ import annotations

from typing import Any

import pytest

from conversations.models import Conversation, Run, Submission
from conversations.services import run_settle
from core import clock
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import extension_stop
from extensions_host.sdk import AdmissionError, ToolModule
from extensions_host.surfaces.models import AmbientSurface
from extensions_host.surfaces.selectors import ambient_visible
from extensions_host.surfaces.types import Accepted, NotReady, Prompt

from ..contributions.exts import make_skills_ext
from .conftest import claim, in_frame, roster, submit
from .exts import LookupInput, captured, make_ext, prompter, sections

# --- send -------------------------------------------------------------------------------------


def sender(ext_id: str = "rem") -> Any:
    return make_ext(ext_id, grants={"send"})


def sending(cid: str = "c1", request_id: str = "r1", text: str = "Reminder: tea", **kw: Any):
    """A hook that sends and returns the result, or the `AdmissionError` it caught."""

    def hook(ctx: Any) -> Any:
        try:
            return ctx.send(cid, prompt=Prompt(request_id=request_id, text=text), **kw)
        except AdmissionError as exc:
            return exc

    return hook


def test_the_epoch_itself_is_a_valid_when(install, conversation):
    install(sender())
    conversation("c1")

    outcome = in_frame("rem", sending(when=0))

    assert isinstance(outcome.value, Accepted)
    assert clock.to_ms(Submission.objects.get().not_before) == 0


def test_a_correlation_of_256_characters_is_accepted_and_one_of_257_is_invalid(
    install, conversation
):
    install(sender())
    conversation("c1")

    longest = in_frame("rem", sending(request_id="a", correlation="c" * 256))
    too_long = in_frame("rem", sending(request_id="b", correlation="c" * 257))

    assert isinstance(longest.value, Accepted)
    assert Submission.objects.get().correlation == "c" * 256
    assert (too_long.value.kind, too_long.value.message) == (
        "invalid",
        "Send correlation must be a string of at most 256 characters",
    )
    assert Submission.objects.count() == 1


def test_a_refused_send_into_a_missing_conversation_leaves_no_conversation_behind(install):
    """The admission refuses the text only after the conversation was created on demand: the
    savepoint takes the conversation back while the hook catches the error and goes on."""
    install(sender())

    outcome = in_frame("rem", sending(cid="fresh", text="x" * (64 * 1024 + 1)))

    assert outcome.ok
    assert isinstance(outcome.value, AdmissionError)
    assert outcome.value.kind == "invalid"
    assert not Conversation.objects.filter(pk="fresh").exists()
    assert not Submission.objects.exists()
    assert roster("rem").status == ExtensionStatus.RUNNING


def test_a_prompt_sent_as_a_steer_is_admitted_with_steer_delivery(install, conversation):
    install(sender())
    conversation("c1")

    def hook(ctx: Any) -> Any:
        return ctx.send("c1", prompt=Prompt(request_id="r1", text="now", delivery="steer"))

    outcome = in_frame("rem", hook)

    assert outcome.value.delivery == "steer"
    assert Submission.objects.get().delivery == "steer"


def test_the_send_rate_counts_over_the_whole_period_and_starts_afresh_in_the_next(
    install, conversation, settings, fake_clock
):
    settings.HOST_SEND_RATE = "1/min"
    install(sender())
    conversation("c1")
    fake_clock.set(1_767_225_600_000)  # the start of a minute

    first = in_frame("rem", sending(request_id="a"))
    fake_clock.advance(seconds=30)
    same_minute = in_frame("rem", sending(request_id="b"))
    fake_clock.advance(seconds=30)
    next_minute = in_frame("rem", sending(request_id="c"))

    assert isinstance(first.value, Accepted)
    assert same_minute.value.kind == "throttled"
    assert isinstance(next_minute.value, Accepted)
    assert Submission.objects.count() == 2


def test_a_refused_or_busy_send_is_not_counted_against_the_rate(install, conversation, settings):
    """Only an admitted send counts: refusals and `NotReady` admitted nothing."""
    settings.HOST_SEND_RATE = "1/min"
    install(sender())
    conversation("c1")
    conversation("busy")
    Run.objects.create(
        conversation_id="busy",
        status="claimed",
        claimed_at=clock.now(),
        lease_expires_at=clock.now(),
    )

    missing = in_frame("rem", sending(cid="nowhere", require_existing_conversation=True))
    too_long = in_frame("rem", sending(request_id="a", text="x" * (64 * 1024 + 1)))
    rejected = in_frame("rem", sending(cid="busy", request_id="b", when_busy="reject"))
    admitted = in_frame("rem", sending(request_id="c"))
    over = in_frame("rem", sending(request_id="d"))

    assert [missing.value.kind, too_long.value.kind] == ["invalid", "invalid"]
    assert rejected.value == NotReady()
    assert isinstance(admitted.value, Accepted)
    assert over.value.kind == "throttled"
    assert list(Submission.objects.values_list("request_id", flat=True)) == ["c"]


def test_with_the_send_rate_off_sends_are_not_limited(install, conversation, settings):
    settings.HOST_SEND_RATE = "off"
    install(sender())
    conversation("c1")

    outcomes = [in_frame("rem", sending(request_id=f"r{n}")) for n in range(3)]

    assert all(isinstance(outcome.value, Accepted) for outcome in outcomes)
    assert Submission.objects.count() == 3


# --- run participation ------------------------------------------------------------------------


def lookup(ctx: Any, run: Any, arguments: LookupInput) -> dict[str, Any]:
    return {"hits": [arguments.query]}


@pytest.fixture
def ready(conversation, owner):
    conversation("c1")
    submit("c1", owner)


def test_an_extension_loaded_here_at_another_revision_is_not_captured(install, ready, runtime):
    calls: list[str] = []

    def prompt(ctx: Any, run: Any) -> Any:
        calls.append("prompt")
        return [{"name": "tone", "text": "Brief."}]

    install(prompter("alpha", prompt), prompter("beta", sections(("tone", "Kind."))))
    RosterEntry.objects.filter(pk="alpha").update(revision="next")  # a rolling deploy

    capture = claim(runtime).json()["capture"]

    beta = roster("beta")
    assert capture["participants"] == [
        {"id": "beta", "fingerprint": beta.fingerprint, "revision": beta.revision}
    ]
    assert capture["prompt_sections"] == [{"name": "beta.tone", "text": "Kind."}]
    assert calls == []


def test_sections_of_exactly_65536_bytes_in_total_are_accepted(install, ready, runtime):
    four = [(f"s{n}", "x" * 8192) for n in range(4)]  # 32,768 bytes each extension
    install(prompter("alpha", sections(*four)), prompter("beta", sections(*four)))

    response = claim(runtime)

    assert response.status_code == 201, response.json()
    assert len(response.json()["capture"]["prompt_sections"]) == 8
    assert roster("beta").status == ExtensionStatus.RUNNING


def test_a_section_name_of_64_characters_is_accepted():
    from extensions_host.surfaces.services.participation import prompt_sections_check

    name = "a" + "B" * 63

    assert prompt_sections_check([{"name": name, "text": "x"}]) == (
        [{"name": name, "text": "x"}],
        None,
    )


@pytest.mark.parametrize("text", [5, None, ["x"]])
def test_a_section_whose_text_is_not_a_string_has_no_text(text):
    from extensions_host.surfaces.services.participation import prompt_sections_check

    assert prompt_sections_check([{"name": "tone", "text": text}]) == (
        [],
        "section tone has no text",
    )


def test_declared_tools_are_offered_only_by_an_extension_granted_run_tools(install, ready, runtime):
    install(
        make_ext(
            "alpha",
            grants={"prompt"},
            hooks={"prompt": sections(("tone", "Brief."))},
            tools={"lookup": (LookupInput, lookup)},
        )
    )

    capture = claim(runtime).json()["capture"]

    assert [p["id"] for p in capture["participants"]] == ["alpha"]
    assert capture["tool_modules"] == []


def test_a_run_tools_extension_without_tools_or_a_hook_offers_no_module(install, ready, runtime):
    install(make_ext("alpha", grants={"run_tools"}))

    capture = claim(runtime).json()["capture"]

    assert [p["id"] for p in capture["participants"]] == ["alpha"]
    assert capture["tool_modules"] == []


@pytest.mark.parametrize("choice", [[], ToolModule(tools=[], instructions="none today")])
def test_module_for_run_choosing_no_tools_offers_no_module(install, ready, runtime, choice):
    install(
        make_ext(
            "alpha",
            grants={"run_tools"},
            tools={"lookup": (LookupInput, lookup)},
            hooks={"module_for_run": lambda ctx, run: choice},
        )
    )

    response = claim(runtime)

    assert response.json()["capture"]["tool_modules"] == []
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_module_for_run_without_a_tool_list_offers_every_declared_tool_by_name(
    install, ready, runtime
):
    install(
        make_ext(
            "alpha",
            grants={"run_tools"},
            tools={"zoom": (LookupInput, lookup), "lookup": (LookupInput, lookup)},
            hooks={"module_for_run": lambda ctx, run: ToolModule(instructions="Use both.")},
        )
    )

    (module,) = claim(runtime).json()["capture"]["tool_modules"]

    assert [t["name"] for t in module["tools"]] == ["lookup", "zoom"]
    assert module["instructions"] == "Use both."


def test_a_tool_module_naming_a_tool_twice_offers_it_once(install, ready, runtime):
    install(
        make_ext(
            "alpha",
            grants={"run_tools"},
            tools={"lookup": (LookupInput, lookup)},
            hooks={"module_for_run": lambda ctx, run: ["lookup", "lookup"]},
        )
    )

    (module,) = claim(runtime).json()["capture"]["tool_modules"]

    assert [t["name"] for t in module["tools"]] == ["lookup"]


def files_ext(count: int) -> Any:
    return make_ext(
        "alpha",
        grants={"files"},
        hooks={"files_for_run": lambda ctx, run: [{"path": f"f{n}.md"} for n in range(count)]},
    )


def test_256_files_are_captured(install, ready, runtime):
    install(files_ext(256))

    response = claim(runtime)

    assert response.status_code == 201
    assert len(response.json()["capture"]["files"]) == 256


def test_more_than_256_files_stop_the_extension_and_reject_the_claim(install, ready, runtime):
    install(files_ext(257))

    rejected = claim(runtime)

    assert rejected.status_code == 422
    assert rejected.json()["error"]["message"] == "Extension Files capture failed"
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert Submission.objects.get().status == "queued"


def test_a_compaction_handoff_of_none_is_no_handoff(install, ready, runtime):
    install(
        make_ext(
            "alpha",
            grants={"compaction_handoff"},
            hooks={"compaction_handoff": lambda ctx, run: None},
        )
    )

    response = claim(runtime)

    assert response.status_code == 201
    assert response.json()["capture"]["compaction_handoff"] is None
    assert roster("alpha").status == ExtensionStatus.RUNNING


def test_the_skills_of_a_stopped_extension_are_not_listed_with_the_run(
    install, ready, runtime, owner
):
    install(make_skills_ext("skilled"))
    listed = claim(runtime).json()
    assert {s["extension_id"] for s in listed["capture"]["skills"]} == {"skilled"}
    run_settle(run_id=listed["id"], status="unanswered", reason="done")
    submit("c1", owner, "again")
    extension_stop(extension_id="skilled", hook="test", reason="off")

    capture = claim(runtime).json()["capture"]

    assert capture["participants"] == []
    assert capture["skills"] == []


@pytest.mark.parametrize("unstorable", ["\x00", "\ud800"], ids=["nul", "surrogate"])
@pytest.mark.parametrize(
    ("hook", "grant", "gives", "claimed"),
    [
        ("files_for_run", "files", lambda x: [{"path": "f" + x}], 422),
        ("module_for_run", "run_tools", lambda x: ToolModule(instructions="use" + x), 201),
        ("compaction_handoff", "compaction_handoff", lambda x: {"note": "n" + x}, 201),
    ],
    ids=["files", "module", "handoff"],
)
def test_a_capture_the_database_cannot_store_is_an_invalid_result_not_a_failed_claim(
    install, ready, runtime, hook, grant, gives, claimed, unstorable
):
    """The claim stores what the hooks gave in the run's capture: on PostgreSQL a NUL or a lone
    surrogate in it was a 500 for every claim of the conversation; now it is the extension's
    invalid result, as for prompt sections, alike on both databases."""
    install(
        make_ext(
            "alpha",
            grants={grant},
            tools={"lookup": (LookupInput, lookup)},
            hooks={hook: lambda ctx, run: gives(unstorable)},
        )
    )

    response = claim(runtime)

    assert response.status_code == claimed
    assert roster("alpha").status == ExtensionStatus.STOPPED
    assert roster("alpha").failing_hook == hook
    if claimed == 201:  # the run goes on without what the extension gave
        capture = response.json()["capture"]
        assert (capture["tool_modules"], capture["compaction_handoff"]) == ([], None)


# --- ambient surfaces -------------------------------------------------------------------------


def ambient_ext(ext_id: str = "amb") -> Any:
    return make_ext(ext_id, grants={"attention"}, ambient_kinds=("status", "progress"))


def panel(key: str = "status", **extra: Any) -> dict[str, Any]:
    return {"key": key, "place": "header", **extra}


def test_setting_a_surface_in_a_missing_conversation_is_a_bound_error(install):
    install(ambient_ext())

    outcome = in_frame("amb", captured(lambda ctx: ctx.set_ambient("nope", panel(body="x"))))

    assert (outcome.value.kind, outcome.value.message) == (
        "bound",
        "Ambient conversation does not exist",
    )
    assert not AmbientSurface.objects.exists()
    assert roster("amb").status == ExtensionStatus.RUNNING


def test_setting_and_clearing_a_surface_bump_the_conversation_version(install, conversation):
    install(ambient_ext())
    conversation("c1")

    def version() -> int:
        return Conversation.objects.get(pk="c1").version

    before = version()
    assert in_frame("amb", lambda ctx: ctx.set_ambient("c1", panel(body="on"))).ok
    after_set = version()
    assert in_frame("amb", lambda ctx: ctx.clear_ambient("c1", "status")).ok
    after_clear = version()

    assert before < after_set < after_clear


def test_clearing_another_extensions_key_is_a_conflict_and_an_undeclared_key_is_bound(
    install, conversation
):
    install(ambient_ext("amb"), ambient_ext("rival"))
    conversation("c1")
    assert in_frame("amb", lambda ctx: ctx.set_ambient("c1", panel(body="mine"))).ok

    rival = in_frame("rival", captured(lambda ctx: ctx.clear_ambient("c1", "status"))).value
    undeclared = in_frame("amb", captured(lambda ctx: ctx.clear_ambient("c1", "weather"))).value

    assert rival.kind == "conflict"
    assert (undeclared.kind, undeclared.message) == ("bound", "Ambient key is not declared")
    assert ambient_visible(conversation_id="c1")[0]["body"] == "mine"


@pytest.mark.parametrize(
    "content",
    [{"body": "nul\x00here"}, {"details": {"note": "nul\x00"}}, {"body": ["lone \ud800"]}],
)
def test_a_surface_whose_content_cannot_be_stored_is_a_bound_error(install, conversation, content):
    install(ambient_ext())
    conversation("c1")

    outcome = in_frame("amb", captured(lambda ctx: ctx.set_ambient("c1", panel(**content))))

    assert (outcome.value.kind, outcome.value.message) == ("bound", "Ambient surface is invalid")
    assert not AmbientSurface.objects.exists()
    assert roster("amb").status == ExtensionStatus.RUNNING


def test_a_surface_is_shown_with_its_place_rows_overflow_and_refresh_interval(
    install, conversation
):
    install(ambient_ext())
    conversation("c1")
    record = {
        "key": "progress",
        "place": "sidebar",
        "max_rows": 5,
        "overflow": "summarize",
        "refresh_ms": 5000,
        "body": ["1/3"],
    }

    assert in_frame("amb", lambda ctx: ctx.set_ambient("c1", record)).ok

    (surface,) = ambient_visible(conversation_id="c1")
    shown = {name: surface[name] for name in ("place", "max_rows", "overflow", "refresh_ms")}
    assert shown == {"place": "sidebar", "max_rows": 5, "overflow": "summarize", "refresh_ms": 5000}


# --- version bumps outside frames -------------------------------------------------------------


def test_touching_conversations_wakes_their_live_streams_after_commit(
    conversation, monkeypatch, django_capture_on_commit_callbacks
):
    from extensions_host.surfaces import live
    from extensions_host.surfaces.services.common import conversations_touch

    published: list[list[str]] = []
    monkeypatch.setattr(live, "changes_publish", lambda ids: published.append(list(ids)))
    conversation("c1")

    with django_capture_on_commit_callbacks(execute=True):
        touched = conversations_touch(conversation_ids=["c1", "c1"])
    with django_capture_on_commit_callbacks(execute=True):
        none = conversations_touch(conversation_ids=["missing"])

    assert (touched, none) == (1, 0)
    assert published == [["c1"]]
    assert Conversation.objects.get(pk="c1").version == 1
