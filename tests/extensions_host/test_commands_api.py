"""Extension commands over HTTP: the check order and messages of spec 04, the typed-error
mapping of spec 02 §3, output validation and `Idempotency-Key`."""

from __future__ import annotations

import datetime
import enum
import threading
import uuid
from typing import Any

import pytest
from django.db import connection
from pydantic import BaseModel

from conversations.models import Conversation
from extensions_host.contributions.services.stores import secret_set
from extensions_host.models import ExtensionRecord, ExtensionStatus, RosterEntry
from extensions_host.sdk import AdmissionError, CommandError, Retry, StateError
from extensions_host.services import commands as command_service

from .conftest import roster
from .exts import AddInput, AddOutput, add_command, make_ext


class FailInput(BaseModel):
    error: str
    kind: str


ERRORS = {"CommandError": CommandError, "AdmissionError": AdmissionError, "StateError": StateError}


def fail(ctx: Any, conversation_id: str, data: FailInput) -> None:
    ctx.collection("item").put({"key": "rolled-back"})
    raise ERRORS[data.error](data.kind, f"{data.error} {data.kind} happened")


def crash(ctx: Any, conversation_id: str, data: Any) -> None:
    ctx.collection("item").put({"key": "rolled-back"})
    raise RuntimeError("kaboom")


def busy(ctx: Any, conversation_id: str, data: Any) -> None:
    raise Retry(7.5, "upstream busy")


def stats(ctx: Any, data: Any) -> dict[str, Any]:
    return {"items": len(ctx.collection("item").page()), "caller": ctx.caller.username}


def notes(**overrides: Any):
    commands = {
        "add": (
            {
                "scope": "conversation",
                "input": AddInput,
                "output": AddOutput,
            },
            add_command,
        ),
        "fail": ({"scope": "conversation", "input": FailInput}, fail),
        "crash": ({"scope": "conversation"}, crash),
        "retry": ({"scope": "conversation"}, busy),
        "bad-output": (
            {"scope": "conversation", "output": AddOutput},
            lambda ctx, cid, data: {"wrong": 1},
        ),
        "not-json": ({"scope": "global"}, lambda ctx, data: {1, 2}),
        "stats": ({"scope": "global"}, stats),
        "reset": ({"scope": "global", "admin_only": True}, lambda ctx, data: {"reset": True}),
        "ghost": ({"scope": "conversation"}, None),
    }
    return make_ext("notes", commands=commands, **overrides)


@pytest.fixture
def setup(install, conversation, owner):
    install(notes(), make_ext("other", grants={"state", "projection"}))
    conversation("c1")
    return owner


def url(name: str, cid: str | None = "c1", ext: str = "notes") -> str:
    if cid is None:
        return f"/v1/extensions/{ext}/commands/{name}"
    return f"/v1/conversations/{cid}/extensions/{ext}/commands/{name}"


def error_of(response: Any) -> tuple[int, str, str, str]:
    error = response.json()["error"]
    return response.status_code, error["category"], error["cause"], error["message"]


def test_a_conversation_command_runs_in_a_frame_and_returns_its_output(setup, api):
    client = api(setup)

    response = client.post(url("add"), {"key": "k", "n": 5}, format="json")

    assert response.status_code == 200
    assert response.json() == {"key": "k", "total": 5}
    assert ExtensionRecord.objects.get(extension_id="notes").key == "k"
    assert Conversation.objects.get(pk="c1").version == 1


def test_a_global_command_runs_with_the_caller(setup, api):
    response = api(setup).post(url("stats", None), {}, format="json")

    assert response.status_code == 200
    assert response.json() == {"items": 0, "caller": "owner"}


def test_typed_command_error_conflict_is_409_and_the_extension_keeps_running(setup, api):
    client = api(setup)
    client.post(url("add"), {"key": "k", "n": 100}, format="json")

    response = client.post(url("add"), {"key": "k", "n": 1}, format="json")

    assert error_of(response) == (409, "store", "conflict", "Total is over 100")
    assert roster("notes").status == ExtensionStatus.RUNNING
    assert ExtensionRecord.objects.get(key="k").value == '{"key":"k","n":100,"tag":"c1","blob":""}'


@pytest.mark.parametrize(
    ("error", "kind", "status", "category", "cause"),
    [
        ("CommandError", "invalid", 400, "contract", "invalid"),
        ("CommandError", "conflict", 409, "store", "conflict"),
        ("CommandError", "not_found", 404, "store", "not_found"),
        ("CommandError", "rejected", 422, "extensions", "rejected"),
        ("AdmissionError", "invalid", 400, "contract", "invalid"),
        ("AdmissionError", "conflict", 409, "contract", "conflict"),
        ("AdmissionError", "closed", 409, "contract", "closed"),
        ("AdmissionError", "throttled", 429, "limit", "throttled"),
        ("StateError", "bound", 400, "contract", "invalid"),
        ("StateError", "conflict", 409, "store", "conflict"),
        ("StateError", "encode", 503, "store", "unavailable"),
        ("StateError", "decode", 503, "store", "unavailable"),
        ("StateError", "unavailable", 503, "store", "unavailable"),
    ],
)
def test_typed_failures_map_without_a_stop(setup, api, error, kind, status, category, cause):
    response = api(setup).post(url("fail"), {"error": error, "kind": kind}, format="json")

    assert error_of(response) == (status, category, cause, f"{error} {kind} happened")
    assert roster("notes").status == ExtensionStatus.RUNNING
    assert not ExtensionRecord.objects.exists()


def test_retry_is_503_with_retry_after(setup, api):
    response = api(setup).post(url("retry"), {}, format="json")

    assert response.status_code == 503
    assert response["Retry-After"] == "8"
    assert response.json()["error"]["message"] == "Extension notes asked to retry: upstream busy"
    assert roster("notes").status == ExtensionStatus.RUNNING


def test_typed_failure_and_retry_messages_reach_the_caller_without_the_secrets(
    install, conversation, owner, api
):
    def refused(ctx: Any, conversation_id: str, data: Any) -> None:
        raise CommandError("rejected", f"upstream refused key={ctx.stores.secrets.get('api')}")

    def later(ctx: Any, conversation_id: str, data: Any) -> None:
        raise Retry(3, f"upstream 503 for key={ctx.stores.secrets.get('api')}")

    commands = {
        "refused": ({"scope": "conversation"}, refused),
        "later": ({"scope": "conversation"}, later),
    }
    install(make_ext("vault", commands=commands))
    secret_set(extension_id="vault", key="api", value="upstream-key-7f3a9c2e1d")
    conversation("c1")
    client = api(owner)

    refusal = client.post(url("refused", ext="vault"), {}, format="json")
    retry = client.post(url("later", ext="vault"), {}, format="json")

    assert error_of(refusal) == (422, "extensions", "rejected", "upstream refused key=[redacted]")
    assert error_of(retry) == (
        503,
        "extensions",
        "unavailable",
        "Extension vault asked to retry: upstream 503 for key=[redacted]",
    )


def test_a_defect_stops_the_extension_and_answers_503_with_the_reason(setup, api):
    response = api(setup).post(url("crash"), {}, format="json")

    assert error_of(response) == (
        503,
        "extensions",
        "unavailable",
        "Extension notes is stopped: command crash defect: kaboom",
    )
    assert roster("notes").reason == "command crash defect: kaboom"
    assert not ExtensionRecord.objects.exists()


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        (
            "bad-output",
            "command bad-output defect: Extension command output is invalid: key: Field required"
            " (and 1 more)",
        ),
        ("not-json", "command not-json defect: Extension command result is not JSON"),
    ],
)
def test_an_invalid_command_result_is_a_defect(setup, api, name, reason):
    cid = None if name == "not-json" else "c1"

    response = api(setup).post(url(name, cid), {}, format="json")

    assert response.status_code == 503
    assert roster("notes").reason == reason


# --- the check order and errors of spec 04, one row each ---------------------------------------


def test_missing_conversation_is_404(setup, api):
    response = api(setup).post(url("add", "nope"), {"key": "k"}, format="json")

    assert error_of(response) == (404, "store", "not_found", "Conversation not found")


def test_unreadable_conversation_is_404_before_anything_else(setup, api, outsider):
    response = api(outsider).post(url("unknown-command", ext="ghost-ext"), {}, format="json")

    assert error_of(response) == (404, "store", "not_found", "Conversation not found")


def test_readable_but_not_writable_conversation_is_403(setup, api, member):
    Conversation.objects.filter(pk="c1").update(sharing="users")

    response = api(member).post(url("add"), {"key": "k"}, format="json")

    assert error_of(response)[:3] == (403, "auth", "forbidden")


def test_an_extension_not_granted_commands_is_503_unavailable(setup, api):
    response = api(setup).post(url("add", ext="other"), {}, format="json")

    assert error_of(response) == (503, "extensions", "unavailable", "Extension is unavailable")


@pytest.mark.parametrize("cid", ["c1", None], ids=["conversation", "global"])
def test_an_extension_not_in_the_roster_is_404_as_everywhere_else(setup, api, cid):
    client = api(setup)
    response = client.post(url("add", cid=cid, ext="ghost-ext"), {}, format="json")

    assert error_of(response) == (404, "store", "not_found", "Not found")
    assert "Retry-After" not in response
    assert client.get("/v1/extensions/ghost-ext").status_code == 404
    # an id no extension could have is not found either, without a query
    assert client.post(url("add", cid=cid, ext="Bad%00Id"), {}, format="json").status_code == 404


def test_grants_not_admitted_by_staff_are_503_unavailable(
    install, conversation, api, owner, settings
):
    settings.HOST_AUTO_ADMIT = False
    install(notes())
    conversation("c1")

    response = api(owner).post(url("add"), {"key": "k"}, format="json")

    assert error_of(response) == (503, "extensions", "unavailable", "Extension is unavailable")


def test_a_stopped_extension_is_503_with_its_reason(setup, api):
    client = api(setup)
    client.post(url("crash"), {}, format="json")

    response = client.post(url("add"), {"key": "k"}, format="json")

    assert error_of(response) == (
        503,
        "extensions",
        "unavailable",
        "Extension notes is stopped: command crash defect: kaboom",
    )


def test_an_unknown_command_is_400(setup, api):
    response = api(setup).post(url("nope"), {}, format="json")

    assert error_of(response) == (400, "contract", "invalid", "Extension command is unknown")


def test_a_command_called_in_the_wrong_scope_is_400_unknown(setup, api):
    client = api(setup)

    as_global = client.post(url("add", None), {"key": "k"}, format="json")
    as_conversation = client.post(url("stats"), {}, format="json")

    assert error_of(as_global) == (400, "contract", "invalid", "Extension command is unknown")
    assert error_of(as_conversation) == (400, "contract", "invalid", "Extension command is unknown")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"key": "k", "extra": 1}, "extra"),
        ({"key": "k", "n": "many"}, "n"),
        ({}, "key"),
        ({"key": ""}, "key"),
    ],
)
def test_input_that_does_not_validate_is_400_with_field_details(setup, api, body, field):
    response = api(setup).post(url("add"), body, format="json")

    assert error_of(response) == (400, "contract", "invalid", "Extension command input is invalid")
    assert field in response.json()["error"]["details"]
    assert not ExtensionRecord.objects.exists()


def test_input_is_checked_against_its_json_schema_types_without_coercion(setup, api):
    # the published schema says `n` is an integer: a string of digits is not one
    response = api(setup).post(url("add"), {"key": "k", "n": "10"}, format="json")

    assert error_of(response) == (400, "contract", "invalid", "Extension command input is invalid")
    assert response.json()["error"]["details"] == {"n": ["Input should be a valid integer"]}
    assert not ExtensionRecord.objects.exists()


class Color(enum.Enum):
    RED = "red"


class WhenInput(BaseModel):
    at: datetime.datetime
    ref: uuid.UUID
    color: Color
    ratio: float


def test_input_takes_what_json_can_only_carry_as_strings(install, conversation, owner, api):
    """Strict is the JSON schema's strictness: ISO datetimes, UUIDs and enum values still come
    from strings, and an integer is still a number."""

    def when(ctx: Any, data: WhenInput) -> dict[str, Any]:
        return {"at": data.at.isoformat(), "ref": data.ref.hex, "color": data.color.name}

    install(make_ext("clock", commands={"when": ({"scope": "global", "input": WhenInput}, when)}))
    ref = uuid.uuid4()
    body = {"at": "2026-01-02T03:04:05Z", "ref": str(ref), "color": "red", "ratio": 1}

    response = api(owner).post(url("when", None, ext="clock"), body, format="json")

    assert response.status_code == 200, response.json()
    assert response.json() == {"at": "2026-01-02T03:04:05+00:00", "ref": ref.hex, "color": "RED"}


def test_a_command_returning_none_answers_json_null_also_when_replayed(install, owner, api):
    install(make_ext("quiet", commands={"nothing": ({"scope": "global"}, lambda ctx, data: None)}))
    client = api(owner)
    headers = {"HTTP_IDEMPOTENCY_KEY": "none-1"}

    first = client.post(url("nothing", None, ext="quiet"), {}, format="json", **headers)
    again = client.post(url("nothing", None, ext="quiet"), {}, format="json", **headers)

    for response in (first, again):
        assert response.status_code == 200
        assert response["Content-Type"] == "application/json"
        assert response.content == b"null"
    assert again["Idempotent-Replayed"] == "true"


def test_a_secret_a_command_returns_once_is_not_kept_for_its_replay(install, owner, api):
    """A command that mints a token, keeps it in the secret store and shows it once: its
    stored replay (24 hours in the database and its backups) holds it redacted, never in
    plaintext (spec 08: no plaintext secret anywhere in a dump)."""
    from core.models import IdempotencyResult

    def rotate(ctx: Any, data: Any) -> dict[str, Any]:
        token = f"cb-{uuid.uuid4().hex}"
        ctx.stores.secrets.set("callback", token)
        return {"callback_token": token, "note": "shown once"}

    install(make_ext("hooks", commands={"rotate": ({"scope": "global"}, rotate)}))
    client = api(owner)
    headers = {"HTTP_IDEMPOTENCY_KEY": "rot-1"}

    first = client.post(url("rotate", None, ext="hooks"), {}, format="json", **headers)
    again = client.post(url("rotate", None, ext="hooks"), {}, format="json", **headers)

    token = first.json()["callback_token"]
    assert token.startswith("cb-")  # the caller sees it once
    assert again.json() == {"callback_token": "[redacted]", "note": "shown once"}
    assert again["Idempotent-Replayed"] == "true"
    assert token not in str(IdempotencyResult.objects.values_list("body", flat=True)[0])


def test_a_key_the_database_cannot_store_is_400_not_a_store_error(setup, api):
    """A NUL in the input reaches `get(key)`: a bound violation (400) on every database, never
    `store/unavailable` (503) from the driver, and no stop."""
    response = api(setup).post(url("add"), {"key": "a\x00b", "n": 1}, format="json")

    assert error_of(response) == (
        400,
        "contract",
        "invalid",
        "A record key cannot be stored: Null characters are not allowed.",
    )
    assert roster("notes").status == ExtensionStatus.RUNNING
    assert not ExtensionRecord.objects.exists()


def test_a_body_that_is_not_an_object_is_400_invalid_input(setup, api):
    response = api(setup).post(url("add"), [1, 2], format="json")

    assert error_of(response) == (400, "contract", "invalid", "Extension command input is invalid")


def test_a_declared_command_without_handler_stops_the_extension(setup, api):
    response = api(setup).post(url("ghost"), {}, format="json")

    assert error_of(response) == (
        503,
        "extensions",
        "unavailable",
        "Extension notes is stopped: command ghost has no handler",
    )
    row = roster("notes")
    assert (row.status, row.reason, row.failing_hook) == (
        ExtensionStatus.STOPPED,
        "command ghost has no handler",
        "command ghost",
    )


def test_global_commands_need_an_authenticated_principal(setup, api):
    response = api(None).post(url("stats", None), {}, format="json")

    assert error_of(response)[:3] == (401, "auth", "unauthenticated")


def test_an_admin_only_command_is_403_for_others_and_runs_for_staff(setup, api, staff):
    assert error_of(api(setup).post(url("reset", None), {}, format="json"))[:3] == (
        403,
        "auth",
        "forbidden",
    )
    response = api(staff).post(url("reset", None), {}, format="json")
    assert (response.status_code, response.json()) == (200, {"reset": True})


# --- idempotency ----------------------------------------------------------------------------


def test_a_retry_with_the_same_idempotency_key_returns_the_stored_result(setup, api):
    client = api(setup)
    headers = {"HTTP_IDEMPOTENCY_KEY": "req-1"}

    first = client.post(url("add"), {"key": "k", "n": 5}, format="json", **headers)
    again = client.post(url("add"), {"key": "k", "n": 5}, format="json", **headers)

    assert first.json() == again.json() == {"key": "k", "total": 5}
    assert again["Idempotent-Replayed"] == "true"
    assert ExtensionRecord.objects.get(key="k").value.startswith('{"key":"k","n":5,')


def test_the_same_idempotency_key_with_another_body_is_409(setup, api):
    client = api(setup)
    headers = {"HTTP_IDEMPOTENCY_KEY": "req-1"}
    client.post(url("add"), {"key": "k", "n": 5}, format="json", **headers)

    response = client.post(url("add"), {"key": "k", "n": 6}, format="json", **headers)

    assert error_of(response) == (
        409,
        "contract",
        "conflict",
        "Idempotency key was used with a different request",
    )


def test_a_failed_command_is_not_stored_under_its_idempotency_key(setup, api):
    client = api(setup)
    headers = {"HTTP_IDEMPOTENCY_KEY": "req-2"}
    client.post(url("add"), {"key": "k", "n": 100}, format="json")

    failed = client.post(url("add"), {"key": "k", "n": 1}, format="json", **headers)
    repeated = client.post(url("add"), {"key": "k", "n": 1}, format="json", **headers)

    assert failed.status_code == repeated.status_code == 409
    assert "Idempotent-Replayed" not in repeated


def test_a_retry_of_a_stopped_or_ungranted_extension_is_503_not_its_stored_result(setup, api):
    """Spec 04's order holds for retries too: the stored result answers only a call that would
    still be let in."""
    from extensions_host.runtime import extension_stop

    client = api(setup)
    headers = {"HTTP_IDEMPOTENCY_KEY": "req-3"}
    first = client.post(url("add"), {"key": "k", "n": 5}, format="json", **headers)
    assert first.status_code == 200

    extension_stop(extension_id="notes", hook="test", reason="halted")
    stopped = client.post(url("add"), {"key": "k", "n": 5}, format="json", **headers)
    assert error_of(stopped) == (
        503, "extensions", "unavailable", "Extension notes is stopped: halted",
    )  # fmt: skip
    assert "Idempotent-Replayed" not in stopped

    entry = roster("notes")
    entry.status, entry.admitted_grants = ExtensionStatus.RUNNING, ["state"]
    entry.save(update_fields=["status", "admitted_grants"])
    ungranted = client.post(url("add"), {"key": "k", "n": 5}, format="json", **headers)
    assert error_of(ungranted)[:3] == (503, "extensions", "unavailable")
    assert "Idempotent-Replayed" not in ungranted


def test_an_idempotency_key_over_256_characters_is_400(setup, api):
    response = api(setup).post(
        url("add"), {"key": "k"}, format="json", HTTP_IDEMPOTENCY_KEY="k" * 257
    )

    assert response.status_code == 400


@pytest.mark.parametrize("key", ["", "k" * 257, "a\x00b"])
def test_an_idempotency_key_outside_1_to_256_characters_is_400_with_its_message(setup, api, key):
    response = api(setup).post(url("add"), {"key": "k"}, format="json", HTTP_IDEMPOTENCY_KEY=key)

    assert error_of(response) == (
        400, "contract", "invalid", "Idempotency-Key must be 1..256 characters",
    )  # fmt: skip


def test_an_idempotency_key_is_remembered_per_user_command_and_conversation(
    setup, api, conversation, member
):
    """docs/extending.md §2.8: the same key elsewhere is a new call, not a replay."""
    client = api(setup)
    conversation("c2")
    headers = {"HTTP_IDEMPOTENCY_KEY": "same"}

    first = client.post(url("add"), {"key": "k", "n": 1}, format="json", **headers)
    other_conversation = client.post(
        url("add", "c2"), {"key": "k", "n": 1}, format="json", **headers
    )
    global_owner = client.post(url("stats", None), {}, format="json", **headers)
    global_member = api(member).post(url("stats", None), {}, format="json", **headers)
    replayed = client.post(url("add"), {"key": "k", "n": 1}, format="json", **headers)

    for response in (first, other_conversation, global_owner, global_member):
        assert response.status_code == 200, response.json()
        assert "Idempotent-Replayed" not in response
    assert other_conversation.json() == {"key": "k", "total": 2}  # the handler ran again
    assert global_member.json()["caller"] == member.get_username()
    assert replayed["Idempotent-Replayed"] == "true"


def test_the_reference_states_the_idempotency_key_bound_and_lifetime():
    from pathlib import Path

    from django.conf import settings

    from core.services import IDEMPOTENCY_TTL

    doc = (Path(settings.BASE_DIR) / "docs" / "extending.md").read_text()
    hours = int(IDEMPOTENCY_TTL.total_seconds() // 3600)
    row = (
        f"| command `Idempotency-Key` | 1..{command_service.MAX_IDEMPOTENCY_KEY} characters (400);"
    )
    assert f"{row} remembered {hours} hours |" in doc
    assert command_service.MSG_IDEMPOTENCY_KEY_INVALID in doc
    assert command_service.MSG_IDEMPOTENCY_CONFLICT in doc


def test_a_stopped_extension_without_the_grant_answers_for_the_grant_first(setup, api):
    # spec 04's order: the `commands` grant (503 unavailable), then stopped (503 with reason)
    RosterEntry.objects.filter(pk="notes").update(
        status=ExtensionStatus.STOPPED, reason="x", admitted_grants=[]
    )

    response = api(setup).post(url("add"), {"key": "k"}, format="json")

    assert error_of(response) == (503, "extensions", "unavailable", "Extension is unavailable")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_concurrent_retry_with_the_same_idempotency_key_waits_and_replays_the_result(
    install, conversation, owner, api, monkeypatch
):
    """The retry arrives while the first call's handler still runs (its lookup finds nothing
    stored yet): it waits for the first call and answers with its result, without running the
    handler a second time."""
    handler_calls: list[str] = []
    first_in_handler = threading.Event()
    retry_looked_up = threading.Event()

    def add(ctx: Any, conversation_id: str, data: AddInput) -> AddOutput:
        handler_calls.append(threading.current_thread().name)
        if threading.current_thread().name == "first":
            first_in_handler.set()
            assert retry_looked_up.wait(timeout=20)  # the retry got past its lookup meanwhile
        return add_command(ctx, conversation_id, data)

    lookup = command_service._Idempotency.lookup

    def observed_lookup(self: Any) -> Any:
        stored = lookup(self)
        if threading.current_thread().name == "retry":
            retry_looked_up.set()
        return stored

    monkeypatch.setattr(command_service._Idempotency, "lookup", observed_lookup)
    spec = {"scope": "conversation", "input": AddInput, "output": AddOutput}
    install(make_ext("notes", commands={"add": (spec, add)}))
    conversation("c1")
    clients = {"first": api(owner), "retry": api(owner)}
    replies: dict[str, Any] = {}
    failures: list[BaseException] = []

    def send() -> None:
        name = threading.current_thread().name
        try:
            if name == "retry":
                assert first_in_handler.wait(timeout=20)
            replies[name] = clients[name].post(
                url("add"), {"key": "k", "n": 60}, format="json", HTTP_IDEMPOTENCY_KEY="K1"
            )
        except BaseException as exc:  # reported below
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=send, name=name) for name in ("first", "retry")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert failures == []
    assert handler_calls == ["first"]
    first, retry = replies["first"], replies["retry"]
    assert (first.status_code, first.json()) == (200, {"key": "k", "total": 60})
    assert (retry.status_code, retry.json()) == (200, {"key": "k", "total": 60})
    assert retry["Idempotent-Replayed"] == "true"
    assert ExtensionRecord.objects.get(key="k").value.startswith('{"key":"k","n":60,')
