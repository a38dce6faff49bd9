"""Wrong calls an author typing `ctx: Context` is told about: every line marked `# E: <code>`
is a mypy error of that code, and no other line is one.

Type-checked by `tests/sdk/test_context_types.py`, never imported or run.
"""

from __future__ import annotations

from pydantic import BaseModel

from extensions_host.sdk import (
    Context,
    Extension,
    Job,
    Prompt,
    RunInfo,
    TimerEvent,
    Worker,
    WorkerWake,
)


class Board(BaseModel):
    notes: int = 0


mistyped = Extension(
    id="mistyped",
    version="1.0.0",
    grants={"state", "timers", "send", "attention", "lifecycle", "routes", "commands"},
    projection_schema=Board,
)


def context_calls(ctx: Context, run: RunInfo) -> None:
    ctx.timers.set("t", "soon")  # E: arg-type
    ctx.timer.set("t", 1)  # E: attr-defined
    ctx.send("c1", Prompt(request_id="r", text="hi"))  # E: misc
    ctx.send("c1", prompt=Prompt(request_id="r", text="hi"), when_busy="later")  # E: arg-type
    ctx.attention.set("c1", "look")  # E: arg-type
    ctx.interactions.settle("c1", "q1", "answered")  # E: arg-type
    ctx.stores.secrets.set("token")  # E: call-arg
    ctx.stores.paths.data = "elsewhere"  # E: misc
    ctx.host.conversations.create(owner=1)  # E: arg-type
    ctx.host.users.get()  # E: call-arg
    ctx.has_pending_steer("run-1")  # E: arg-type
    print(ctx.caller.username)  # E: union-attr
    print(ctx.seconds_left() * 2)  # E: operator
    print(ctx.now_ms().upper())  # E: attr-defined
    ctx.transact(lambda tx: tx.timers.set("t"))  # E: call-arg


@mistyped.on_timer  # E: type-var
def one_argument(ctx: Context) -> None:
    return None


@mistyped.on_timer  # E: type-var
def wrong_event(ctx: Context, timer: WorkerWake) -> None:
    return None


@mistyped.route("GET", "r")  # E: type-var
def no_request(ctx: Context) -> None:
    return None


@mistyped.prompt  # E: type-var
def no_run(ctx: Context) -> list[dict[str, str]]:
    return []


def worker(ctx: Context, wake: WorkerWake, extra: int) -> None:
    return None


def job(ctx: Context) -> None:
    return None


def timer_hook(ctx: Context, timer: TimerEvent) -> None:
    return None


Worker("w", wake_on=["conversation_idle"], run=worker)  # E: arg-type
Job("j", every_seconds=60, action=job)  # E: arg-type
# decorated, the hook keeps its own signature
mistyped.on_timer(timer_hook)("ctx", TimerEvent(key="t", due_at=0, fired_at=0))  # E: arg-type
