"""Slash commands: the list, the core commands through the conversation services, and
extension commands with the route failure rules."""

from __future__ import annotations

import pytest

from conversations.models import Conversation, Entry
from core.models import LifecycleEvent
from extensions_host.contributions.services.slash import ARGS_MAX, MSG_ARGS_TOO_LONG, MSG_NO_ARGS
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import current_frame
from extensions_host.sdk import CommandError, Retry

from . import exts
from .exts import make_slash_ext


@pytest.fixture(autouse=True)
def _reset_calls():
    exts.calls.clear()


def run(client, cid: str, name: str, args: str = ""):
    return client.post(f"/v1/conversations/{cid}/commands/{name}", {"args": args}, format="json")


def test_the_list_has_the_core_commands_then_the_extensions(install, api, member):
    install(make_slash_ext())
    listed = api(member).get("/v1/commands").json()["results"]
    assert [c["name"] for c in listed] == ["help", "fork", "archive", "rename", "share", "todo"]
    assert listed[-1] == {
        "name": "todo",
        "description": "Add a todo",
        "args_hint": "<text>",
        "source": "todo",
    }
    assert {c["source"] for c in listed[:5]} == {"core"}


def test_the_command_list_is_a_cursor_page_in_the_same_order(install, api, member):
    install(make_slash_ext("todo"), make_slash_ext("alpha", name="add"))
    client = api(member)
    names, url = [], "/v1/commands?limit=2"
    while url:
        body = client.get(url).json()
        assert set(body) == {"next", "previous", "results"}, body
        names += [(c["name"], c["source"]) for c in body["results"]]
        url = body["next"]
    core = [(name, "core") for name in ("help", "fork", "archive", "rename", "share")]
    assert names == [*core, ("add", "alpha"), ("todo", "todo")]


@pytest.mark.parametrize("query", ["limit=0", "limit=101", "limit=abc", "limit="])
def test_a_command_list_limit_out_of_bounds_is_a_400(api, member, query):
    response = api(member).get(f"/v1/commands?{query}")
    assert response.status_code == 400
    assert "limit" in response.json()["error"]["details"]


def test_a_stopped_extension_s_commands_are_not_listed(install, api, member):
    install(make_slash_ext())
    RosterEntry.objects.filter(pk="todo").update(status=ExtensionStatus.STOPPED, reason="x")
    listed = api(member).get("/v1/commands").json()["results"]
    assert "todo" not in [c["name"] for c in listed]


def test_an_extension_command_runs_for_the_owner_and_returns_its_notice(
    install, api, owner, conversation
):
    install(make_slash_ext())
    conversation("c1")
    response = run(api(owner), "c1", "todo", "buy milk")
    assert response.status_code == 200
    assert response.json() == {"notice": "added buy milk"}
    assert exts.calls == ["todo buy milk owner"]


def test_only_the_owner_may_run_commands(install, api, member, outsider, owner, conversation):
    install(make_slash_ext())
    conversation("shared", sharing="users")
    conversation("private")
    assert run(api(member), "shared", "todo", "x").status_code == 403
    assert run(api(outsider), "private", "todo", "x").status_code == 404
    assert run(api(None), "shared", "todo", "x").status_code == 401
    assert exts.calls == []


def test_an_unknown_command_is_400(install, api, owner, conversation):
    install(make_slash_ext())
    conversation("c1")
    response = run(api(owner), "c1", "teleport")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Command is unknown"


def test_unknown_fields_are_refused(install, api, owner, conversation):
    conversation("c1")
    response = api(owner).post(
        "/v1/conversations/c1/commands/help", {"args": "", "extra": 1}, format="json"
    )
    assert response.status_code == 400


def test_a_typed_error_maps_and_a_defect_stops(install, api, owner, conversation):
    conversation("c1")

    def refuse(ctx, invocation):
        raise CommandError("rejected", "Not today")

    install(make_slash_ext("picky", run=refuse, name="picky"))
    refused = run(api(owner), "c1", "picky")
    assert refused.status_code == 422
    assert refused.json()["error"]["message"] == "Not today"
    assert RosterEntry.objects.get(pk="picky").status == ExtensionStatus.RUNNING

    def later(ctx, invocation):
        raise Retry(3)

    install(make_slash_ext("later", run=later, name="later"))
    retry = run(api(owner), "c1", "later")
    assert retry.status_code == 503
    assert retry["Retry-After"] == "3"

    def broken(ctx, invocation):
        return {"unexpected": True}

    install(make_slash_ext("broken", run=broken, name="broken"))
    assert run(api(owner), "c1", "broken").status_code == 503
    row = RosterEntry.objects.get(pk="broken")
    assert row.status == ExtensionStatus.STOPPED
    assert row.reason == "slash broken defect: Slash command result must be {notice} or a string"


def test_transact_in_a_slash_command_has_the_request_deadline_not_the_workers(
    install, api, owner, conversation, settings
):
    settings.HOST_HOOK_DEADLINE_REQUEST_MS = 300
    settings.HOST_HOOK_DEADLINE_WORKER_MS = 10_000
    conversation("c1")
    deadlines: list[float] = []

    def note(ctx, invocation):
        ctx.transact(lambda tx: deadlines.append(current_frame().deadline_s))

    install(make_slash_ext(run=note, deadline_s=60))

    assert run(api(owner), "c1", "todo").status_code == 200
    assert 0 < deadlines[0] <= 0.3


def test_core_rename_share_archive_go_through_the_conversation_services(
    install, api, owner, conversation
):
    conversation("c1")
    client = api(owner)
    assert run(client, "c1", "rename", "Plans").json() == {"notice": "Renamed to Plans"}
    assert run(client, "c1", "share", "users").json() == {"notice": "Sharing is now users"}
    assert run(client, "c1", "share", "everyone").status_code == 400
    assert run(client, "c1", "rename", "").status_code == 400
    assert run(client, "c1", "archive").json() == {"notice": "Conversation archived"}
    row = Conversation.objects.get(pk="c1")
    assert (row.name, row.sharing, row.archived) == ("Plans", "users", True)
    assert LifecycleEvent.objects.filter(kind="conversation_archived").count() == 1


def test_core_commands_without_arguments_refuse_some_and_change_nothing(
    install, api, owner, conversation
):
    conversation("c1")
    client = api(owner)

    for name in ("archive", "help"):
        refused = run(client, "c1", name, "now")
        assert refused.status_code == 400
        assert refused.json()["error"]["details"] == {"args": [MSG_NO_ARGS]}
    assert not Conversation.objects.get(pk="c1").archived
    assert not LifecycleEvent.objects.filter(kind="conversation_archived").exists()
    # blanks around the arguments are not arguments
    assert run(client, "c1", "archive", "  ").json() == {"notice": "Conversation archived"}


def test_core_fork_forks_at_the_head_or_at_an_entry(install, api, owner, conversation):
    conversation("c1")
    client = api(owner)
    assert run(client, "c1", "fork").status_code == 400  # nothing to fork yet
    first = Entry.objects.create(conversation_id="c1", role="user", content=[])
    Entry.objects.create(conversation_id="c1", role="assistant", content=[])
    forked = run(client, "c1", "fork").json()
    child = forked["conversation_id"]
    assert forked["notice"] == f"Forked into {child}"
    assert Entry.objects.filter(conversation_id=child).count() == 2
    at_first = run(client, "c1", "fork", str(first.pk)).json()["conversation_id"]
    assert Entry.objects.filter(conversation_id=at_first).count() == 1
    assert run(client, "c1", "fork", "abc").status_code == 400


def test_core_help_lists_every_command(install, api, owner, conversation):
    install(make_slash_ext())
    conversation("c1")
    notice = run(api(owner), "c1", "help").json()["notice"]
    assert "/fork [entry id]" in notice
    assert "/todo <text> — Add a todo" in notice


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"status": ExtensionStatus.STOPPED, "reason": "x"}, "Extension todo is stopped: x"),
        ({"admitted_grants": []}, "Extension is unavailable"),
        # spec 04's order (the grant before the stop), as for the extension commands API
        ({"status": ExtensionStatus.STOPPED, "reason": "x", "admitted_grants": []},
         "Extension is unavailable"),
    ],
    ids=["stopped", "not-granted", "stopped-and-not-granted"],
)  # fmt: skip
def test_an_unavailable_extension_s_command_answers_as_an_extension_command_does(
    install, api, owner, conversation, update, message
):
    install(make_slash_ext())
    conversation("c1")
    RosterEntry.objects.filter(pk="todo").update(**update)

    response = run(api(owner), "c1", "todo", "x")

    assert response.status_code == 503
    assert response.json()["error"]["message"] == message
    assert exts.calls == []


@pytest.mark.parametrize("name", ["todo", "rename"])
def test_over_long_arguments_answer_the_documented_400_before_the_handler(
    install, api, owner, conversation, name
):
    install(make_slash_ext())
    conversation("c1")
    client = api(owner)

    response = run(client, "c1", name, "a" * (ARGS_MAX + 1))

    assert response.status_code == 400
    assert response.json()["error"] == {
        "category": "contract",
        "cause": "invalid",
        "message": MSG_ARGS_TOO_LONG,
        "details": {"args": [MSG_ARGS_TOO_LONG]},
    }
    assert exts.calls == []
    assert run(client, "c1", "todo", "a" * ARGS_MAX).status_code == 200  # the bound itself is fine
