"""Timer benchmarks' extensions.

- `bench_timers`: each fire writes one record (spec 08: "each fire = delete + a record write").
  Keys starting with `lat-` (the lateness row) also report their commit time.
- `bench_pending`: holds the stored volume (10k → 1M far-future timers) of B-scale and the
  lateness-at-1M case; its hook never runs during a bench.
"""

from __future__ import annotations

from pydantic import BaseModel

from bench.extensions import probe
from extensions_host.sdk import Collection, Extension, TimerEvent

LATENESS_PREFIX = "lat-"
LATENESS_CHANNEL = "bench:lateness"


class Fired(BaseModel):
    key: str
    due_at: int
    fired_at: int


timers_ext = Extension(
    id="bench_timers",
    version="1.0.0",
    grants={"state", "timers"},
    collections={"fired": Collection(Fired, key=lambda f: f.key)},
    description="Benchmark: one record write per fired timer.",
)


@timers_ext.on_timer
def fire(ctx, timer: TimerEvent) -> None:
    ctx.collection("fired").put(Fired(key=timer.key, due_at=timer.due_at, fired_at=timer.fired_at))
    if timer.key.startswith(LATENESS_PREFIX):
        probe.push_on_commit(LATENESS_CHANNEL, {"key": timer.key, "due": timer.due_at})


pending_ext = Extension(
    id="bench_pending",
    version="1.0.0",
    grants={"timers"},
    description="Benchmark: stored timer volume (far in the future).",
)


@pending_ext.on_timer
def pending_fire(ctx, timer: TimerEvent) -> None:
    return None


def arm(ctx, *, keys_and_due: list[tuple[str, int]]) -> None:
    """Set timers through the SDK (inside `ctx.transact`): the path that requests wakes."""
    for key, due_at in keys_and_due:
        ctx.timers.set(key, due_at)
