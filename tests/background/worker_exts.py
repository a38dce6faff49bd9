"""Extensions the integration tests install in real worker processes (`HOST_EXTENSIONS`).

Behaviour that a test switches at run time goes through files named by environment
variables, so the test process and the workers see the same switch:

- `BG_FAIL_FLAG`: while this file exists, `tickbad`'s `on_timer`, `life`'s
  `conversation_forked` handler fail.
- `BG_HOOK_LOG`: `tickbad` appends the wall-clock start time (ms) of every hook call.
- `BG_HOOK_SLEEP_MS`: every `on_timer` sleeps this long (to keep workers busy).
- `BG_SHUTDOWN_FILE`: `life`'s `shutdown` appends a line here.

Every effect is a record written in the hook's frame; its `n` counts how often the hook for
that item committed, so a duplicate shows as `n == 2` (and a lost one as a missing record).
"""

from __future__ import annotations

import os
import time
from typing import Any

from pydantic import BaseModel

from extensions_host.background.declarations import Job, JobRun, add_job
from extensions_host.sdk import Collection, Extension

TICK_IDS = [f"tick{n:02}" for n in range(9)]
CONSUMER_IDS = [f"cons{n}" for n in range(10)]


class Effect(BaseModel):
    key: str
    n: int = 1
    data: Any = None


def _flag() -> bool:
    path = os.environ.get("BG_FAIL_FLAG", "")
    return bool(path) and os.path.exists(path)


def _count(ctx: Any, key: str, data: Any) -> None:
    effects = ctx.collection("effect")
    current = effects.get(key)
    effects.put(Effect(key=key, n=(current.n + 1) if current else 1, data=data))


def on_timer(ctx: Any, timer: Any) -> None:
    sleep_ms = int(os.environ.get("BG_HOOK_SLEEP_MS", "0") or 0)
    if sleep_ms:
        time.sleep(sleep_ms / 1000)
    _count(ctx, timer.key, [timer.due_at, timer.fired_at, os.getpid()])


def on_timer_bad(ctx: Any, timer: Any) -> None:
    log = os.environ.get("BG_HOOK_LOG", "")
    if log:
        with open(log, "a") as out:
            out.write(f"{time.time_ns() // 1_000_000}\n")
    if _flag():
        raise RuntimeError("tickbad is failing on purpose")
    on_timer(ctx, timer)


def on_settled(ctx: Any, runs: list[Any]) -> None:
    sequences = [run.sequence for run in runs]
    _count(ctx, f"{sequences[0]:012}", sequences)


def on_lifecycle(ctx: Any, event: Any) -> None:
    if event.kind == "conversation_forked" and _flag():
        raise RuntimeError("life is failing on purpose")
    _count(ctx, f"{event.event_id:012}", [event.kind, event.conversation_id])


def job_tick(ctx: Any, run: JobRun) -> None:
    _count(ctx, f"job-{run.scheduled_for}", [run.scheduled_for, run.fired_at])


def _ext(ext_id: str, grants: set[str]) -> Extension:
    return Extension(
        id=ext_id,
        version="1.0.0",
        grants=grants | {"state"},
        collections={"effect": Collection(Effect, key=lambda e: e.key)},
    )


def _tick(ext_id: str) -> Extension:
    ext = _ext(ext_id, {"timers"})
    ext.on_timer(on_timer)
    return ext


tick00, tick01, tick02, tick03, tick04, tick05, tick06, tick07, tick08 = (
    _tick(ext_id) for ext_id in TICK_IDS
)

tickbad = _ext("tickbad", {"timers"})
tickbad.on_timer(on_timer_bad)


def _consumer(ext_id: str) -> Extension:
    ext = _ext(ext_id, {"settled"})
    ext.on_settled(on_settled)
    return ext


cons0, cons1, cons2, cons3, cons4, cons5, cons6, cons7, cons8, cons9 = (
    _consumer(ext_id) for ext_id in CONSUMER_IDS
)


def on_shutdown(ctx: Any) -> None:
    path = os.environ.get("BG_SHUTDOWN_FILE", "")
    if path:
        with open(path, "a") as out:
            out.write(f"{ctx.extension_id} {os.getpid()}\n")


life = _ext("life", {"lifecycle"})
for _kind in ("conversation_created", "conversation_forked", "conversation_archived"):
    life.on_lifecycle(_kind)(on_lifecycle)
life.shutdown(on_shutdown)

jobber = _ext("jobber", {"timers"})
jobber.on_timer(on_timer)
add_job(jobber, Job("every2", every_seconds=2, action=job_tick))

MODULE = __name__
TIMER_EXTENSIONS = [*TICK_IDS, "tickbad"]


def paths(*ids: str) -> list[str]:
    """`HOST_EXTENSIONS` entries for these extension ids."""
    return [f"{MODULE}:{ext_id}" for ext_id in ids]


def definitions(*ids: str) -> list[Extension]:
    return [globals()[ext_id] for ext_id in ids]
