"""Text the database cannot store (a NUL character, a lone surrogate) handed to the host by an
extension: every call answers with a typed SDK error or "not found", never a driver error or a
stop, and the same on SQLite and PostgreSQL (spec 02 §3, docs/extending.md §2.6–§2.11).

PostgreSQL refuses a NUL in text and jsonb (`DataError`); a lone surrogate has no UTF-8
encoding on either database. What the host writes down rather than refuses (a stop reason, a
worker's or a notifier's error quoting such text) is stored with U+FFFD in its place."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from conversations.models import Conversation
from core.errors import HostError
from extensions_host.models import ExtensionStatus
from extensions_host.runtime import FrameOutcome, run_frame
from extensions_host.sdk import (
    Collection,
    Document,
    Extension,
    ExtensionStop,
    Notifier,
    SdkError,
    Worker,
)

from .conftest import roster

NUL = "\x00"
SURROGATE = "\ud800"
UNSTORABLE = [pytest.param(NUL, id="nul"), pytest.param(SURROGATE, id="surrogate")]
# only PostgreSQL refuses a NUL; a lone surrogate fails on both databases
NUL_ON_POSTGRES = pytest.param(NUL, id="nul", marks=pytest.mark.postgres)


class Item(BaseModel):
    key: str
    tag: str | None = None


class Pad(BaseModel):
    text: str = ""


class Knobs(BaseModel):
    label: str = ""


class Empty(BaseModel):
    pass


def everything(ext_id: str = "probe", **extra: Any) -> Extension:
    """An extension granted every capability a hook can call with text."""
    return Extension(
        id=ext_id,
        version="1.0.0",
        grants={"state", "timers", "send", "attention", "host", "run_tools"},
        collections={"item": Collection(Item, key=lambda i: i.key, index=lambda i: i.tag)},
        documents={"pad": Document(Pad)},
        interaction_kinds=("approval",),
        ambient_kinds=("progress",),
        settings_model=Knobs,
        **extra,
    )


def in_frame(fn: Callable[[Any], Any], ext_id: str = "probe") -> FrameOutcome:
    """`fn(ctx)` in a background (worker) frame, as a timer runs it."""
    return run_frame(extension_id=ext_id, hook="on_timer", call=fn, boundary="worker")


def answer_of(call: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A hook that makes the call and answers ("ok", value) or (error type, kind)."""

    def hook(ctx: Any) -> Any:
        try:
            return ("ok", call(ctx))
        except SdkError as exc:
            return (type(exc).__name__, exc.kind)

    return hook


@pytest.fixture
def setup(install, conversation) -> None:
    install(everything())
    conversation("c1")


@pytest.fixture
def hyphae_host(db: None, tmp_path: Path) -> Iterator[Any]:
    from extensions_host.testing.host import running_host

    with running_host(data_dir=tmp_path / "hyphae-data") as host:
        yield host


def item(**fields: Any) -> dict[str, Any]:
    return {"id": "i1", "level": "info", "title": "Look", **fields}


def question(**fields: Any) -> dict[str, Any]:
    return {"call_id": "q1", "kind": "approval", "prompt": "Deploy?", **fields}


def prompt(**fields: Any) -> dict[str, Any]:
    return {"request_id": "r1", "text": "hello", **fields}


# --- what already answers alike on both databases (kept so) -----------------------------------

BOUND = ("StateError", "bound")
INVALID = ("AdmissionError", "invalid")

ANSWERED: list[tuple[str, Callable[[Any, str], Any], Any]] = [
    (
        "collection.put key",
        lambda c, x: c.collection("item").put(Item(key="a" + x)),
        {NUL: BOUND, SURROGATE: ("StateError", "encode")},
    ),
    ("document.update cid", lambda c, x: c.document("pad").update("c" + x, lambda p: p), BOUND),
    ("observe cid", lambda c, x: c.observe("c" + x), BOUND),
    ("timers.set", lambda c, x: c.timers.set("k" + x, c.now_ms() + 1000), BOUND),
    ("timers.read", lambda c, x: c.timers.read("k" + x), BOUND),
    ("send cid", lambda c, x: c.send("c" + x, prompt=prompt()), INVALID),
    ("send correlation", lambda c, x: c.send("c1", prompt=prompt(), correlation=x), INVALID),
    ("attention.set cid", lambda c, x: c.attention.set("c" + x, item()), BOUND),
    ("attention.clear id", lambda c, x: c.attention.clear("c1", "i" + x), BOUND),
    (
        "interactions.seed call_id",
        lambda c, x: c.interactions.seed("c1", question(call_id=x)),
        BOUND,
    ),
    (
        "interactions.answer cid",
        lambda c, x: c.interactions.answer("c" + x, "q1", 1),
        ("ok", False),
    ),
    ("interactions.settle call_id", lambda c, x: c.interactions.settle("c1", x, "expired"), BOUND),
    ("interactions.snapshot call_id", lambda c, x: c.interactions.snapshot("c1", x), ("ok", None)),
    ("ambient.set key", lambda c, x: c.ambient.set("c1", {"key": x, "place": "header"}), BOUND),
    ("has_successful_tool_result", lambda c, x: c.has_successful_tool_result(1, x), ("ok", False)),
    ("secrets.get", lambda c, x: c.stores.secrets.get("k" + x), BOUND),
    ("settings.set value", lambda c, x: c.stores.settings.set({"label": x}), BOUND),
    ("host.conversations.create id", lambda c, x: c.host.conversations.create(id=x), INVALID),
    ("host.conversations.submit cid", lambda c, x: c.host.conversations.submit(x, "hi"), INVALID),
    ("host.conversations.meta", lambda c, x: c.host.conversations.meta("c" + x), INVALID),
]


@pytest.mark.parametrize(
    ("call", "expected"),
    [pytest.param(call, expected, id=name) for name, call, expected in ANSWERED],
)
@pytest.mark.parametrize("unstorable", UNSTORABLE)
def test_unstorable_text_in_an_argument_is_a_typed_error_or_not_found(
    setup, call, expected, unstorable
):
    outcome = in_frame(answer_of(lambda ctx: call(ctx, unstorable)))

    assert outcome.ok, outcome.reason
    assert outcome.value == (expected[unstorable] if isinstance(expected, dict) else expected)
    assert roster("probe").status == ExtensionStatus.RUNNING


# --- host.conversations.create(name=, source=) --------------------------------------------


@pytest.mark.parametrize("field", ["name", "source"])
@pytest.mark.parametrize("unstorable", UNSTORABLE)
def test_a_conversation_name_or_source_the_database_cannot_store_is_invalid(
    setup, field, unstorable
):
    create = answer_of(lambda ctx: ctx.host.conversations.create(**{field: "n" + unstorable}))

    outcome = in_frame(create)

    assert (outcome.status, outcome.value) == ("ok", INVALID)
    assert Conversation.objects.count() == 1
    assert roster("probe").status == ExtensionStatus.RUNNING


def test_a_route_relaying_a_name_with_a_nul_to_create_answers_400_and_keeps_running(
    hyphae_host,
):
    from extensions_host.sdk import Route

    def new(ctx: Any, request: Any) -> Any:
        return {"id": ctx.host.conversations.create(name=request.GET.get("name", ""))}

    hyphae_host.install(
        Extension(
            id="web",
            version="1.0.0",
            grants={"routes", "send"},
            routes=[Route("GET", "new", handler=new, auth="user")],
        )
    )

    response = hyphae_host.route("GET", "web", "new?name=a%00b")

    assert response.status_code == 400
    assert hyphae_host.status("web").running


# --- a secret value with a lone surrogate -------------------------------------------------


def test_a_secret_value_with_a_lone_surrogate_is_refused_like_one_with_a_nul(setup):
    def both(ctx: Any) -> list[Any]:
        return [
            answer_of(lambda c, bad=bad: c.stores.secrets.set("k", "before" + bad + "after"))(ctx)
            for bad in (NUL, SURROGATE)
        ]

    outcome = in_frame(both)

    assert (outcome.status, outcome.value) == ("ok", [BOUND, BOUND])


# --- stop reasons quoting such text ---------------------------------------------------------

STOPPING = {
    "ExtensionStop": lambda ctx, x: (_ for _ in ()).throw(ExtensionStop("gave up on " + x)),
    "defect": lambda ctx, x: (_ for _ in ()).throw(ValueError("cannot parse " + x)),
    # the host's own message quotes the undeclared name
    "undeclared collection": lambda ctx, x: ctx.collection("item" + x).get("k"),
}


@pytest.mark.parametrize("unstorable", [NUL_ON_POSTGRES, pytest.param(SURROGATE, id="surrogate")])
@pytest.mark.parametrize("cause", list(STOPPING))
def test_a_stop_whose_reason_quotes_unstorable_text_still_stops_the_extension(
    setup, cause, unstorable
):
    outcome = in_frame(lambda ctx: STOPPING[cause](ctx, unstorable))

    assert outcome.status == "stopped"
    assert roster("probe").status == ExtensionStatus.STOPPED
    assert unstorable not in roster("probe").reason


# --- a command's replayable output ----------------------------------------------------------


@pytest.mark.parametrize("unstorable", UNSTORABLE)
def test_a_command_output_kept_for_an_idempotency_key_must_be_storable(hyphae_host, unstorable):
    """Sent once, the output needs no storing and is answered as it is; kept for a key's
    replay, it must be storable, like a tool call's result: else a defect, alike on both
    databases (on PostgreSQL it was a 500 from the jsonb write)."""
    from extensions_host.runtime.hooks import MSG_RESULT_NOT_KEPT

    ext = Extension(id="cmd", version="1.0.0", grants={"commands"})
    ext.command("echo", scope="global", input=Empty)(lambda ctx, data: {"v": "a" + unstorable})
    hyphae_host.install(ext)

    assert hyphae_host.command("cmd", "echo", {}) == {"v": "a" + unstorable}
    with pytest.raises(HostError) as refused:
        hyphae_host.command("cmd", "echo", {}, idempotency_key="k1")

    assert refused.value.status == 503
    assert roster("cmd").reason == f"command echo defect: {MSG_RESULT_NOT_KEPT}"


# --- worker and notifier failures quoting such text ----------------------------------------


@pytest.mark.parametrize("unstorable", [NUL_ON_POSTGRES, pytest.param(SURROGATE, id="surrogate")])
def test_a_worker_failing_with_unstorable_text_in_its_error_is_recorded_as_failed(
    hyphae_host, unstorable
):
    def run(ctx: Any, wake: Any) -> None:
        raise ValueError("upstream said " + unstorable)

    hyphae_host.install(
        Extension(
            id="wk",
            version="1.0.0",
            grants={"lifecycle"},
            workers=[Worker("w", wake_on=["conversation_created"], run=run)],
        )
    )
    hyphae_host.conversation("c1")

    hyphae_host.emit_lifecycle("conversation_created", "c1")

    assert hyphae_host.workers()["ext:wk:worker:w"]["last_outcome"] == "failed"


@pytest.mark.parametrize("unstorable", [NUL_ON_POSTGRES, pytest.param(SURROGATE, id="surrogate")])
def test_a_notifier_failing_with_unstorable_text_is_retried(hyphae_host, unstorable):
    def notify(ctx: Any, event: Any) -> None:
        raise ValueError("push service said " + unstorable)

    hyphae_host.install(
        Extension(
            id="nt", version="1.0.0", grants={"notify"}, notifiers=[Notifier("n", notify=notify)]
        )
    )
    hyphae_host.notify("job.failed", "Something failed")

    assert hyphae_host.deliver_notifications() == ["retry"]
