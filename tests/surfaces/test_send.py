"""`ctx.send`: admission inside the frame, origin, results and errors (spec 04, Send)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from conversations.echo import echo_sweep
from conversations.models import Conversation, Entry, Role, Run, Submission
from conversations.services import Origin, submission_admit
from core import clock
from extensions_host.models import ExtensionStatus
from extensions_host.sdk import AdmissionError, ExtensionStop
from extensions_host.surfaces.types import Accepted, NotReady, Prompt

from .conftest import in_frame, roster
from .exts import SendInput, make_ext


def sender(**grants: Any) -> Any:
    return make_ext("rem", grants={"send", "commands"} if not grants else grants["grants"])


def send(cid: str = "c1", request_id: str = "r1", text: str = "Reminder: tea", **kw: Any):
    return lambda ctx: ctx.send(cid, prompt=Prompt(request_id=request_id, text=text), **kw)


def test_a_send_admits_a_submission_with_the_extension_as_origin(install, conversation):
    install(sender())
    conversation("c1")

    outcome = in_frame("rem", send(correlation="reminder:7"))

    assert outcome.ok
    assert isinstance(outcome.value, Accepted)
    submission = Submission.objects.get(pk=outcome.value.submission_id)
    assert (submission.origin_kind, submission.origin_extension_id) == ("extension", "rem")
    assert submission.correlation == "reminder:7"
    assert outcome.value.delivery == "follow_up"
    assert submission.entry.role == Role.EXTENSION
    assert submission.entry.content == [{"type": "text", "text": "Reminder: tea"}]


@pytest.mark.parametrize(("correlation", "shown"), [(None, None), ("reminder:7", "reminder:7")])
def test_the_runs_input_origin_shows_the_correlation_or_null_without_one(
    install, conversation, runtime, correlation, shown
):
    from drf_spectacular.generators import SchemaGenerator

    install(sender())
    conversation("c1")
    assert in_frame("rem", send(correlation=correlation)).ok
    run_id = runtime.post("/v1/conversations/c1/runs", {}, format="json").json()["id"]

    run = runtime.get(f"/v1/runs/{run_id}").json()

    assert run["inputs"][0]["origin"] == {
        "kind": "extension",
        "user": None,
        "extension_id": "rem",
        "correlation": shown,
    }
    schemas = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    assert schemas["Origin"]["properties"]["correlation"]["nullable"] is True


def test_the_echo_runtime_answers_an_extension_sent_prompt_like_a_user_one(
    install, conversation, settings
):
    settings.AGENT_RUNTIME = "echo"
    install(sender())
    conversation("c1")
    assert in_frame("rem", send(text="Reminder: stretch")).ok

    echo_sweep()

    run = Run.objects.get(conversation_id="c1")
    assert run.status == "settled"
    answer = Entry.objects.get(pk=run.answer_entry_id)
    assert answer.role == Role.ASSISTANT
    assert "echo: Reminder: stretch" in answer.content[0]["text"]


def test_an_on_timer_that_sends_then_raises_leaves_no_submission(install, conversation):
    install(sender())
    conversation("c1")

    def hook(ctx: Any) -> None:
        send()(ctx)
        raise RuntimeError("after the send")

    outcome = in_frame("rem", hook)

    assert outcome.status == "stopped"
    assert not Submission.objects.exists()
    assert not Entry.objects.exists()
    assert roster("rem").status == ExtensionStatus.STOPPED


def test_the_same_request_id_with_different_text_is_a_conflict(install, conversation):
    install(sender())
    conversation("c1")
    assert in_frame("rem", send(text="first")).ok
    errors: list[AdmissionError] = []

    def again(ctx: Any) -> None:
        try:
            send(text="second")(ctx)
        except AdmissionError as exc:
            errors.append(exc)

    assert in_frame("rem", again).ok
    assert errors[0].kind == "conflict"
    assert Submission.objects.count() == 1


def test_the_same_request_id_with_the_same_text_returns_the_existing_submission(
    install, conversation
):
    install(sender())
    conversation("c1")
    first = in_frame("rem", send()).value

    second = in_frame("rem", send()).value

    assert second.submission_id == first.submission_id
    assert (first.created, second.created) == (True, False)


def test_sending_into_an_archived_conversation_is_closed(install, conversation):
    install(sender())
    conversation("c1", archived=True)
    errors: list[AdmissionError] = []

    def hook(ctx: Any) -> None:
        try:
            send()(ctx)
        except AdmissionError as exc:
            errors.append(exc)

    assert in_frame("rem", hook).ok
    assert errors[0].kind == "closed"
    assert not Submission.objects.exists()


def _send_command(ctx: Any, conversation_id: str, data: SendInput) -> dict[str, Any]:
    result = ctx.send(
        data.conversation_id,
        prompt=Prompt(request_id=data.request_id, text=data.text),
        when_busy=data.when_busy,
        require_existing_conversation=data.require_existing,
    )
    if isinstance(result, NotReady):
        return {"status": "not_ready"}
    return {"status": "accepted", "submission_id": result.submission_id}


def command_ext() -> Any:
    ext = make_ext("rem", grants={"send", "commands"})
    ext.command("send", scope="conversation", input=SendInput)(_send_command)
    return ext


def call(api: Any, owner: Any, body: dict[str, Any]) -> Any:
    return api(owner).post("/v1/conversations/c1/extensions/rem/commands/send", body, format="json")


def test_through_the_api_a_reused_request_id_is_409_conflict_and_archived_is_409_closed(
    install, conversation, api, owner
):
    install(command_ext())
    conversation("c1")
    conversation("gone", archived=True)
    body = {"conversation_id": "c1", "request_id": "r1", "text": "one"}
    assert call(api, owner, body).status_code == 200

    conflict = call(api, owner, body | {"text": "two"})
    closed = call(api, owner, body | {"conversation_id": "gone"})

    assert conflict.status_code == 409
    assert conflict.json()["error"]["cause"] == "conflict"
    assert closed.status_code == 409
    assert closed.json()["error"]["cause"] == "closed"
    assert roster("rem").status == ExtensionStatus.RUNNING  # typed failures do not stop


def test_a_missing_conversation_is_created_owned_by_the_extension_service_user(
    install, conversation
):
    install(sender())

    outcome = in_frame("rem", send(cid="fresh"))

    assert outcome.ok
    created = Conversation.objects.get(pk="fresh")
    assert created.owner.username == "ext:rem"
    assert created.source == "ext:rem"
    assert not get_user_model().objects.get(username="ext:rem").has_usable_password()


def test_an_extension_with_the_longest_id_creates_a_conversation_on_demand(install, conversation):
    longest = "r" * 63  # extension ids run to 63 characters; `ext:<id>` is then 67
    install(make_ext(longest, grants={"send"}))

    outcome = in_frame(longest, send(cid="fresh"))

    assert outcome.ok, outcome
    created = Conversation.objects.get(pk="fresh")
    assert created.owner.username == f"ext:{longest}"
    assert created.source == f"ext:{longest}"[:64]  # a source holds 64 characters (spec 01)


def test_require_existing_conversation_refuses_a_missing_one_as_invalid(
    install, conversation, api, owner
):
    install(command_ext())
    conversation("c1")

    response = call(
        api,
        owner,
        {"conversation_id": "nope", "request_id": "r1", "text": "x", "require_existing": True},
    )

    assert response.status_code == 400
    assert response.json()["error"]["category"] == "contract"
    assert not Conversation.objects.filter(pk="nope").exists()


def _busy(cid: str, owner: Any) -> None:
    submission_admit(
        conversation_id=cid,
        parts=[{"type": "text", "text": "user"}],
        origin=Origin.of_user(owner),
    )
    Run.objects.create(
        conversation_id=cid, status="claimed", claimed_at=clock.now(), lease_expires_at=clock.now()
    )


def test_when_busy_reject_on_a_busy_conversation_is_not_ready(install, conversation, owner):
    install(sender())
    conversation("c1")
    _busy("c1", owner)

    outcome = in_frame("rem", send(when_busy="reject"))

    assert isinstance(outcome.value, NotReady)
    assert Submission.objects.filter(origin_kind="extension").count() == 0


def test_when_busy_steer_admits_it_for_the_live_run(install, conversation, owner):
    install(sender())
    conversation("c1")
    _busy("c1", owner)

    outcome = in_frame("rem", send(when_busy="steer"))

    assert outcome.value.delivery == "steer"


def test_when_becomes_the_submissions_not_before(install, conversation, fake_clock):
    install(sender())
    conversation("c1")
    due = clock.now_ms() + 60_000

    outcome = in_frame("rem", send(when=due))

    assert clock.to_ms(Submission.objects.get(pk=outcome.value.submission_id).not_before) == due


def test_the_last_instant_a_datetime_holds_is_a_valid_when(install, conversation):
    install(sender())
    conversation("c1")

    outcome = in_frame("rem", send(when=clock.MAX_MS))

    assert isinstance(outcome.value, Accepted)
    not_before = Submission.objects.get(pk=outcome.value.submission_id).not_before
    assert not_before.year == 9999


def test_without_the_send_grant_the_send_is_closed(install, conversation):
    install(make_ext("rem", grants={"timers"}))
    conversation("c1")
    errors: list[AdmissionError] = []

    def hook(ctx: Any) -> None:
        try:
            send()(ctx)
        except AdmissionError as exc:
            errors.append(exc)

    assert in_frame("rem", hook).ok
    assert (errors[0].kind, errors[0].message) == ("closed", "Extension is not granted send")


def test_over_the_per_extension_rate_a_send_is_throttled(install, conversation, settings):
    settings.HOST_SEND_RATE = "2/min"
    install(sender())
    conversation("c1")
    assert in_frame("rem", send(request_id="a")).ok
    assert in_frame("rem", send(request_id="b")).ok
    errors: list[AdmissionError] = []

    def third(ctx: Any) -> None:
        try:
            send(request_id="c")(ctx)
        except AdmissionError as exc:
            errors.append(exc)

    assert in_frame("rem", third).ok
    assert errors[0].kind == "throttled"
    assert Submission.objects.count() == 2


def test_the_rate_limit_is_per_extension(install, conversation, settings):
    settings.HOST_SEND_RATE = "1/min"
    install(sender(), make_ext("other", grants={"send"}))
    conversation("c1")

    assert in_frame("rem", send(request_id="a")).ok
    assert isinstance(in_frame("other", send(request_id="b")).value, Accepted)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"when": -1}, "Send instant must be epoch milliseconds"),
        ({"when": True}, "Send instant must be epoch milliseconds"),
        # past 9999-12-31T23:59:59.999Z no datetime holds the instant: invalid, never a defect
        ({"when": clock.MAX_MS + 1}, "Send instant must be epoch milliseconds"),
        ({"when": 2**53 - 1}, "Send instant must be epoch milliseconds"),
        ({"when_busy": "later"}, "Send when_busy must be queue, steer or reject"),
        ({"correlation": 5}, "Send correlation must be a string of at most 256 characters"),
        ({"cid": "bad id!"}, "Conversation id is invalid"),
    ],
)
def test_bad_send_arguments_are_invalid_and_write_nothing(install, conversation, kwargs, message):
    install(sender())
    conversation("c1")
    errors: list[AdmissionError] = []

    def hook(ctx: Any) -> None:
        try:
            send(**kwargs)(ctx)
        except AdmissionError as exc:
            errors.append(exc)

    assert in_frame("rem", hook).ok
    assert (errors[0].kind, errors[0].message) == ("invalid", message)
    assert not Submission.objects.exists()


def test_a_prompt_given_as_a_dict_with_unknown_fields_is_invalid(install, conversation):
    install(sender())
    conversation("c1")
    errors: list[AdmissionError] = []

    def hook(ctx: Any) -> None:
        try:
            ctx.send("c1", prompt={"request_id": "r", "text": "x", "urgent": True})
        except AdmissionError as exc:
            errors.append(exc)

    assert in_frame("rem", hook).ok
    assert errors[0].kind == "invalid"


def test_a_send_after_the_hook_returned_stops_the_extension(install, conversation):
    install(sender())
    conversation("c1")
    kept: list[Any] = []
    assert in_frame("rem", kept.append).ok

    with pytest.raises(ExtensionStop):
        send()(kept[0])

    assert roster("rem").status == ExtensionStatus.STOPPED
    assert not Submission.objects.exists()
