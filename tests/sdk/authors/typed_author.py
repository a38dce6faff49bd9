"""An author's extension typed with `ctx: Context`, using every member docs/extending.md §2.5
documents and every hook of §2.2: mypy (the project's configuration) finds no error in it.

Type-checked by `tests/sdk/test_context_types.py`, never imported or run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, reveal_type

from pydantic import BaseModel

from extensions_host.sdk import (
    Accepted,
    AmbientRecord,
    AttentionItem,
    CatalogEntry,
    Collection,
    Context,
    Document,
    EmptyInput,
    Extension,
    FileRef,
    Health,
    InteractionRecord,
    Job,
    JobRun,
    NotificationEvent,
    NotReady,
    Prompt,
    PromptAction,
    RunInfo,
    SlashInvocation,
    TimerEvent,
    ToolModule,
    Worker,
    WorkerWake,
)

if TYPE_CHECKING:
    from django.http import HttpRequest

    from extensions_host.sdk import (
        EntryPage,
        EntryRecord,
        LifecycleEvent,
        Principal,
        RunSettledEvent,
    )


class Note(BaseModel):
    id: str
    text: str = ""


class Board(BaseModel):
    notes: int = 0


def tidy(ctx: Context, wake: WorkerWake) -> None:
    if wake.conversation_id:  # "" when woken by `user_deleted`
        ctx.transact(lambda tx: tx.observe(wake.conversation_id))


def nightly(ctx: Context, run: JobRun) -> dict[str, int]:
    return {"missed": run.missed_runs}


typed = Extension(
    id="typed",
    version="1.0.0",
    grants={
        "state",
        "timers",
        "send",
        "attention",
        "settled",
        "projection",
        "commands",
        "prompt",
        "run_tools",
        "files",
        "compaction_handoff",
        "lifecycle",
        "routes",
        "notify",
        "host",
    },
    collections={"note": Collection(Note, key=lambda n: n.id)},
    documents={"pad": Document(Note, initial=Note(id="pad"))},
    projection_schema=Board,
    interaction_kinds=["approval"],
    ambient_kinds=["status"],
    workers=[Worker("tidy", wake_on=["conversation_idle", "user_deleted"], run=tidy)],
    jobs=[
        Job("nightly", schedule="0 3 * * *", action=nightly),
        Job("nudge", every_seconds=60, action=PromptAction("inbox", "Anything new?")),
    ],
)
reveal_type(typed.workers)
reveal_type(typed.jobs)


# --- the context, member by member --------------------------------------------------------------


def state(ctx: Context, cid: str) -> int:
    who: str = ctx.extension_id + ctx.revision + ctx.hook
    granted: bool = "state" in ctx.grants
    name = ctx.caller.username if ctx.caller is not None else ""
    notes = ctx.collection("note")
    note = notes.get("n1")
    page = notes.page(limit=10, after=None, index=None)
    notes.put(Note(id=ctx.new_id(), text=who + name))
    removed: bool = notes.remove("n1")
    pad = ctx.document("pad").read(cid)
    ctx.document("pad").update(cid, lambda current: current)
    ctx.documents["pad"].read(cid)
    ctx.observe(cid)
    left: float | None = ctx.seconds_left()
    if left is not None and left < 1:
        return 0
    return len(page) + int(granted) + int(removed) + int(note is None) + int(pad is None)


def timers(ctx: Context) -> int | None:
    ctx.timers.set("t", ctx.now_ms() + 1000)
    cancelled: bool = ctx.timers.cancel("t")
    return ctx.timers.read("t") if cancelled else None


def capabilities(ctx: Context, cid: str, run: RunInfo) -> bool:
    sent = ctx.send(
        cid,
        prompt=Prompt(request_id="r1", text="hello"),
        when=ctx.now_ms(),
        when_busy="reject",
        correlation="c",
        require_existing_conversation=True,
    )
    if isinstance(sent, NotReady):
        return False
    accepted: Accepted = sent
    ctx.send(cid, prompt={"request_id": "r2", "text": "hi"})
    ctx.attention.set(cid, AttentionItem(id="a", level="info", title="look"))
    ctx.attention.clear(cid, "a")
    record = InteractionRecord(call_id="q1", kind="approval", prompt="ok?", options=["y", "n"])
    ctx.interactions.seed(cid, record)
    ctx.interactions.answer(cid, "q1", "y")
    ctx.interactions.settle(cid, "q1", "cancelled")
    snapshot = ctx.interactions.snapshot(cid, "q1")
    if snapshot is not None:
        InteractionRecord.model_validate(snapshot)
    ctx.seed_interaction(cid, record)
    ctx.answer_interaction(cid, "q1", {"any": "json"})
    ctx.settle_interaction(cid, "q1", "skipped")
    ctx.snapshot_interaction(cid, "q1")
    ctx.ambient.set(cid, AmbientRecord(key="status", place="header", body="ok"))
    ctx.ambient.clear(cid, "status")
    ctx.set_ambient(cid, {"key": "status", "place": "footer"})
    ctx.clear_ambient(cid, "status")
    steer: bool = ctx.has_pending_steer(run) or ctx.has_pending_steer(run.id)
    return steer or ctx.has_successful_tool_result(run, "call-1") or accepted.created


def stores(ctx: Context) -> str:
    secret: str | None = ctx.stores.secrets.get("token")
    ctx.stores.secrets.set("token", "s3cret")
    ctx.stores.secrets.delete("token")
    keys: list[str] = ctx.stores.secrets.keys()
    settings: dict[str, Any] = ctx.stores.settings.get()
    ctx.stores.settings.set(settings)
    paths = ctx.stores.paths
    return (secret or "") + paths.data + paths.cache + paths.state + ",".join(keys)


def host(ctx: Context, principal: Principal) -> Iterator[dict[str, Any]]:
    api = ctx.host
    cid: str = api.conversations.create(owner="alice", sharing="users", name="n", id="c9")
    submitted = api.conversations.submit(cid, "hello", user="alice", when_busy="reject")
    if not isinstance(submitted, NotReady):
        submitted.get("id")
    api.conversations.submit(cid, [{"type": "text", "text": "hi"}], request_id="r1")
    summaries: list[dict[str, Any]] = api.conversations.list(owner="alice", limit=10)
    meta: dict[str, Any] = api.conversations.meta(cid)
    users: list[dict[str, Any]] = api.users.list()
    api.users.get("alice")
    access: str = api.access.access_of(principal, {"owner": "alice", "sharing": "private"})
    api.access.access_of(ctx.caller, {"owner": "alice"})
    api.access.access_of("alice", {"owner": "alice"})
    acting: str | None = api.identity.acting_user(cid)
    api.interactions.snapshot(cid, "q1")
    api.ambient.clear(cid, "status")
    del summaries, meta, users, access, acting
    return api.conversations.watch(cid, 0, timeout_s=5.0)


def frames(ctx: Context) -> int:
    count: int = ctx.transact(lambda tx: len(tx.collection("note").page()))
    ctx.update(lambda tx: tx.collection("note").put(Note(id="n2")))
    return count


# --- every hook, with the signature the host calls it with --------------------------------------


@typed.activate
def activate(ctx: Context) -> None:
    ctx.now_ms()


@typed.on_timer
def on_timer(ctx: Context, timer: TimerEvent) -> None:
    ctx.timers.set(timer.key, timer.due_at + 1000)


reveal_type(on_timer)


@typed.on_settled
def on_settled(ctx: Context, runs: list[RunSettledEvent]) -> None:
    for run in runs:
        ctx.observe(run.conversation_id)


@typed.on_lifecycle("conversation_forked")
def forked(ctx: Context, event: LifecycleEvent) -> None:
    page: EntryPage = event.entries({"role": "user"}, limit=10)
    first: EntryRecord | None = event.entry(page.next or 1)
    del first


@typed.project
def project(ctx: Context, conversation_id: str) -> Board | None:
    return Board(notes=len(ctx.collection("note").page()))


@typed.project_catalog
def catalog(value: Board, entries: list[CatalogEntry]) -> list[CatalogEntry]:
    return entries if value.notes else []


@typed.prompt
def prompt(ctx: Context, run: RunInfo) -> list[dict[str, str]]:
    return [{"name": "notes", "text": run.conversation_id}]


@typed.module_for_run
def module_for_run(ctx: Context, run: RunInfo) -> ToolModule:
    return ToolModule(tools=["lookup"])


@typed.files_for_run
def files_for_run(ctx: Context, run: RunInfo) -> list[FileRef]:
    return [FileRef(url="https://example.com/a.txt")]


@typed.compaction_handoff
def handoff(ctx: Context, run: RunInfo) -> dict[str, Any]:
    return {"run": run.id}


@typed.health
def health(ctx: Context) -> Health:
    return Health(status="ok")


@typed.shutdown
def shutdown(ctx: Context) -> None:
    return None


@typed.tool("lookup", input=Note)
def lookup(ctx: Context, run: RunInfo, arguments: Note) -> dict[str, str]:
    return {"text": arguments.text}


@typed.command("add", scope="conversation", input=Note)
def add(ctx: Context, conversation_id: str, data: Note) -> dict[str, str]:
    ctx.collection("note").put(data)
    return {"id": data.id}


@typed.command("count", scope="global", input=EmptyInput)
def count(ctx: Context, data: EmptyInput) -> int:
    return len(ctx.collection("note").page())


reveal_type(add)


@typed.route("GET", "notes", auth="public")
def notes_route(ctx: Context, request: HttpRequest) -> dict[str, Any]:
    anonymous = ctx.caller is None or ctx.caller.username == ""
    return {"anonymous": anonymous, "method": request.method}


@typed.slash("note", description="Add a note")
def note_slash(ctx: Context, invocation: SlashInvocation) -> str:
    return invocation.args


@typed.notifier("log")
def notify(ctx: Context, event: NotificationEvent) -> None:
    print(event.title)
