"""Chaos: an extension whose hooks misbehave on request (never installed by default).

Each hook records a `hit` (so a test can see that a failed frame's writes were rolled back) and
then does what the `fault` setting says: raise, sleep past its deadline, return a coroutine
inside its transaction, write with a context that is not its own frame's, return a projection
outside its schema, or stop on purpose. `hooks` restricts the fault to some hooks. The settings
are set by staff in the admin or with the admin-only command `fault`.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from extensions_host.sdk import (
    Collection,
    Context,
    EmptyInput,
    Extension,
    ExtensionStop,
    RunInfo,
    TimerEvent,
)

if TYPE_CHECKING:  # Django-backed: imported for the annotations only
    from django.http import HttpRequest

    from extensions_host.sdk import LifecycleEvent, RunSettledEvent

Fault = Literal["off", "raise", "sleep", "async", "outside", "bad_projection", "stop"]
HOOKS = (
    "on_timer",
    "on_settled",
    "conversation_created",
    "project",
    "prompt",
    "command poke",
    "route POST poke",
)


class ChaosSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fault: Fault = "off"
    hooks: list[str] = Field(default_factory=list, description="empty: every hook")
    sleep_seconds: float = Field(default=1.5, gt=0, le=300)


class Hit(BaseModel):
    key: str
    hook: str
    at: int


class ChaosView(BaseModel):
    fault: Fault


class ArmInput(BaseModel):
    in_seconds: int = Field(default=1, ge=0, le=86_400)
    key: str = Field(default="chaos", min_length=1, max_length=64)


chaos = Extension(
    id="chaos",
    version="1.0.0",
    description="Deliberately faulty hooks (reliability tests, the stop/resume demo)",
    grants={
        "state",
        "timers",
        "settled",
        "projection",
        "commands",
        "prompt",
        "lifecycle",
        "routes",
    },
    collections={"hit": Collection(Hit, key=lambda h: h.key, index=lambda h: h.hook)},
    projection_schema=ChaosView,
    settings_model=ChaosSettings,
    deadline_s=1.0,  # short, so a `sleep` fault overruns quickly
    auto_resume=False,  # a fault stays visible until staff resume it
)

# The context of the last frame this process ran: the `outside` fault writes with it later,
# when that frame is over (a write outside the extension's own frame). A process that has not
# run a frame of chaos yet has none: its first `outside` hook only remembers its context.
_earlier: list[Context] = []


def config(ctx: Context) -> ChaosSettings:
    return ChaosSettings.model_validate(ctx.stores.settings.get())


def hit(ctx: Context, hook: str) -> None:
    ctx.collection("hit").put(Hit(key=f"{hook}:{ctx.new_id()}", hook=hook, at=ctx.now_ms()))


async def _later() -> None:
    await asyncio.sleep(0)


def remember(ctx: Context) -> None:
    _earlier[:] = [ctx]


def misbehave(ctx: Context, hook: str, *, in_frame: bool = True) -> Any:
    """Do the configured fault if it applies to `hook`; return what the hook should return."""
    cfg = config(ctx)
    applies = cfg.fault != "off" and (not cfg.hooks or hook in cfg.hooks)
    earlier = _earlier[-1] if _earlier else None
    if in_frame:
        remember(ctx)
    if not applies:
        return None
    if cfg.fault == "raise":
        raise RuntimeError(f"chaos: {hook} raised on purpose")
    if cfg.fault == "sleep":
        time.sleep(cfg.sleep_seconds)
    elif cfg.fault == "async":
        return _later()
    elif cfg.fault == "outside" and earlier is not None:
        hit(earlier, f"{hook} (outside)")  # that frame is over: a defect of this one
    elif cfg.fault == "stop":
        raise ExtensionStop("chaos: stopped on purpose")
    return None


@chaos.on_timer
def on_timer(ctx: Context, timer: TimerEvent) -> Any:
    hit(ctx, "on_timer")
    return misbehave(ctx, "on_timer")


@chaos.on_settled
def on_settled(ctx: Context, runs: list[RunSettledEvent]) -> Any:
    hit(ctx, "on_settled")
    return misbehave(ctx, "on_settled")


@chaos.on_lifecycle("conversation_created")
def on_created(ctx: Context, event: LifecycleEvent) -> Any:
    hit(ctx, "conversation_created")
    return misbehave(ctx, "conversation_created")


@chaos.project
def project(ctx: Context, conversation_id: str) -> Any:
    cfg = config(ctx)
    if cfg.fault == "bad_projection" and (not cfg.hooks or "project" in cfg.hooks):
        return {"fault": "not one of the declared values"}
    return misbehave(ctx, "project") or ChaosView(fault=cfg.fault)


@chaos.prompt
def prompt(ctx: Context, run: RunInfo) -> Any:
    return misbehave(ctx, "prompt") or []


@chaos.command("poke", scope="conversation", description="Run the fault in a command frame")
def poke(ctx: Context, conversation_id: str, data: EmptyInput) -> Any:
    hit(ctx, "command poke")
    return misbehave(ctx, "command poke") or {"poked": True}


@chaos.command("arm", scope="conversation", input=ArmInput, description="Set a timer")
def arm(ctx: Context, conversation_id: str, data: ArmInput) -> dict[str, Any]:
    due_at = ctx.now_ms() + data.in_seconds * 1000
    ctx.timers.set(data.key, due_at)
    return {"key": data.key, "due_at": due_at}


@chaos.command(
    "fault",
    scope="global",
    input=ChaosSettings,
    admin_only=True,
    description="Choose the fault (off, raise, sleep, async, outside, bad_projection, stop)",
)
def fault(ctx: Context, data: ChaosSettings) -> dict[str, Any]:
    ctx.stores.settings.set(data.model_dump(mode="json"))
    remember(ctx)  # so the next hook of this process has an earlier frame's context
    return data.model_dump(mode="json")


@chaos.route("POST", "poke")
def poke_route(ctx: Context, request: HttpRequest) -> Any:
    cfg = config(ctx)
    if cfg.fault == "outside" and (not cfg.hooks or "route POST poke" in cfg.hooks):
        hit(ctx, "route POST poke (outside)")  # no frame is open here: a defect
    ctx.transact(lambda tx: hit(tx, "route POST poke"))
    result = misbehave(ctx, "route POST poke", in_frame=False)
    return result if result is not None else {"poked": True}
