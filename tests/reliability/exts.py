"""Extensions the reliability tests install here and in real worker processes
(`HOST_EXTENSIONS=tests.reliability.exts:<id>`), and one probe task. `chaos` is the bundled
faulty example (`examples/chaos`, spec 08), configured by its settings (`fault`).

Run-time switches and observations go through files named by environment variables, so the
test process and the workers see the same ones:

- `REL_DELIVERIES`: `crasher` and `napper` append `<pid> <key>` when a hook (or a worker run)
  starts; `faulty` appends `<pid> <ms>:<hook item>`.
- `REL_PROBES`: the `probe` task appends the id it loaded.

Every effect is a record written in the hook's frame; its `n` counts how often the hook for
that item committed (a duplicate shows as `n == 2`, a lost one as a missing record).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import shared_task
from pydantic import BaseModel

from extensions_host.sdk import Collection, Extension, Worker, WorkerWake, add_worker

HEALTHY_IDS = [f"fine{n}" for n in range(9)]
FAULTY_ID = "faulty"


class Effect(BaseModel):
    key: str
    n: int = 1
    data: Any = None


class Poke(BaseModel):
    key: str


@dataclass(frozen=True)
class Files:
    deliveries: Path
    probes: Path

    @classmethod
    def under(cls, folder: Path) -> Files:
        return cls(deliveries=folder / "deliveries.log", probes=folder / "probes.log")

    def env(self) -> dict[str, str]:
        return {"REL_DELIVERIES": str(self.deliveries), "REL_PROBES": str(self.probes)}

    def delivered(self) -> list[str]:
        if not self.deliveries.exists():
            return []
        return [line.split(" ", 1)[1] for line in self.deliveries.read_text().splitlines()]

    def probed(self) -> list[str]:
        return self.probes.read_text().split() if self.probes.exists() else []


def _append(variable: str, line: str) -> None:
    path = os.environ.get(variable, "")
    if path:
        # one short O_APPEND write per line: lines of concurrent processes never interleave
        with open(path, "a") as out:
            out.write(line + "\n")


def count(ctx: Any, key: str, data: Any = None) -> None:
    effects = ctx.collection("effect")
    current = effects.get(key)
    effects.put(Effect(key=key, n=(current.n + 1) if current else 1, data=data))


def _ext(ext_id: str, grants: set[str], **options: Any) -> Extension:
    return Extension(
        id=ext_id,
        version="1.0.0",
        grants=grants | {"state"},
        collections={"effect": Collection(Effect, key=lambda e: e.key)},
        **options,
    )


# --- crash quarantine ------------------------------------------------------------------------


def on_timer_count(ctx: Any, timer: Any) -> None:
    count(ctx, timer.key, [timer.due_at, os.getpid()])


def on_timer_crash(ctx: Any, timer: Any) -> None:
    _append("REL_DELIVERIES", f"{os.getpid()} {timer.key}")
    if timer.key.startswith("boom"):
        os._exit(1)  # the process dies mid-frame: no rollback handler, no finally, no ack
    count(ctx, timer.key)


steady = _ext("steady", {"timers"})
steady.on_timer(on_timer_count)

crasher = _ext("crasher", {"timers"})
crasher.on_timer(on_timer_crash)


# an idle worker whose every run kills its process (woken by each new conversation)
NAPPER_WORKER = "nap"


def run_nap(ctx: Any, wake: WorkerWake) -> None:
    _append("REL_DELIVERIES", f"{os.getpid()} {wake.conversation_id}")
    os._exit(1)


napper = _ext("napper", {"lifecycle"})
add_worker(napper, Worker(NAPPER_WORKER, wake_on=["conversation_created"], run=run_nap))


# --- the bundled chaos example -----------------------------------------------------------------

# its package folder: on this process's path and the workers' `PYTHONPATH` (`chaos_importable`)
CHAOS_DIR = Path(__file__).resolve().parents[2] / "examples" / "chaos"
CHAOS_PATH = "hyphae_chaos.extension:chaos"


def chaos_extension() -> Extension:
    """The example's definition (importable once `chaos_importable` put it on the path)."""
    from hyphae_chaos.extension import chaos

    return chaos


# --- faulty among healthy ----------------------------------------------------------------------


def _mixed(ext_id: str, *, faulty: bool) -> Extension:
    """Timers, settled runs, lifecycle events and a command; the faulty one writes first and
    then raises in every hook (its writes must all roll back). Each effect's `data` is the
    wall-clock time (ms) of the hook that committed it."""
    ext = _ext(ext_id, {"timers", "settled", "lifecycle", "commands"}, auto_resume=False)

    def fail(ctx: Any, key: str) -> None:
        if faulty:
            _append("REL_DELIVERIES", f"{os.getpid()} {_now_ms()}:{key}")
            count(ctx, f"doomed-{key}")
            raise RuntimeError(f"{ext_id} fails in every hook")

    @ext.on_timer
    def _timer(ctx: Any, timer: Any) -> None:
        fail(ctx, f"timer-{timer.key}")
        count(ctx, f"timer-{timer.key}", _now_ms())

    @ext.on_settled
    def _settled(ctx: Any, runs: list[Any]) -> None:
        fail(ctx, f"settled-{runs[0].sequence:06}")
        for run in runs:
            count(ctx, f"settled-{run.sequence:06}", _now_ms())

    @ext.on_lifecycle("conversation_created")
    def _created(ctx: Any, event: Any) -> None:
        fail(ctx, f"created-{event.conversation_id}")
        count(ctx, f"created-{event.conversation_id}", _now_ms())

    @ext.command("poke", scope="global", input=Poke, output=None)
    def _poke(ctx: Any, data: Poke) -> None:
        fail(ctx, f"poke-{data.key}")
        count(ctx, f"poke-{data.key}", _now_ms())

    return ext


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


fine0, fine1, fine2, fine3, fine4, fine5, fine6, fine7, fine8 = (
    _mixed(ext_id, faulty=False) for ext_id in HEALTHY_IDS
)
faulty = _mixed(FAULTY_ID, faulty=True)


# --- enqueue after commit ----------------------------------------------------------------------

outbox = _ext("outbox", {"lifecycle"})


@outbox.on_lifecycle("conversation_created")
def _outbox_created(ctx: Any, event: Any) -> None:
    count(ctx, event.conversation_id)


@shared_task(name="tests.reliability.probe", acks_late=True, ignore_result=True)
def probe(conversation_id: str) -> None:
    """A task enqueued after a write commits: it loads the written row (a task for a
    rolled-back write would raise `DoesNotExist` here)."""
    from conversations.models import Conversation

    Conversation.objects.get(pk=conversation_id)
    _append("REL_PROBES", conversation_id)


# --- helpers -----------------------------------------------------------------------------------

MODULE = __name__


def paths(*ids: str) -> list[str]:
    return [CHAOS_PATH if ext_id == "chaos" else f"{MODULE}:{ext_id}" for ext_id in ids]


def definitions(*ids: str) -> list[Extension]:
    return [chaos_extension() if ext_id == "chaos" else globals()[ext_id] for ext_id in ids]
