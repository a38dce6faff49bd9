"""Prototype sweep variants, measured beside the host's own sweep (the issue asks which wins).

- `fire_one_per_transaction`: the plain way — one durable frame per timer (lock the timer row
  `SKIP LOCKED`, call `on_timer`, delete the row, commit). Spec 08 quotes about 11% of the
  pgbench UPDATE figure for this shape.
- The host's sweep (`timers_fire_page`): a page of 64 in one transaction, the deletes batched —
  the group commit of spec 03 — optimistic (no savepoint per timer; a failing timer aborts the
  page, which runs again with a savepoint per timer and without re-calling the culprit).
  `run_page(optimistic=False)` is the isolated variant (a savepoint per timer from the start);
  bench/README.md has both measured.

These call the runtime's public `run_frame`, never the extension directly.
"""

from __future__ import annotations

from typing import Any

from core import clock


def fire_one_per_transaction(
    *, limit: int = 64, shard: int = 0, shards: int = 1
) -> tuple[int, int]:
    """Fire up to `limit` due timers (of this worker's shard of ids), each in its own
    transaction. Returns (claimed, fired)."""
    from django.db.models.functions import Mod

    from extensions_host import registry
    from extensions_host.background.models import Timer
    from extensions_host.background.services.common import eligible_ids
    from extensions_host.runtime import run_frame
    from extensions_host.sdk import TimerEvent

    ids = eligible_ids("timers")
    candidates = list(
        Timer.objects.filter(extension_id__in=ids, fire_at__lte=clock.now_ms())
        .alias(shard=Mod("id", shards))
        .filter(shard=shard)
        .order_by("fire_at", "id")
        .values_list("id", "extension_id", "key", "due_at")[:limit]
    )
    fired = 0
    for timer_id, extension_id, key, due_at in candidates:
        loaded = registry.get(extension_id)
        hook = loaded.definition.hooks.single.get("on_timer") if loaded else None
        if hook is None:
            continue

        def prepare(timer_id: int = timer_id, due_at: int = due_at) -> bool:
            # claimed by this transaction only if nobody else holds it and it was not re-set
            return (
                Timer.objects.select_for_update(skip_locked=True)
                .filter(pk=timer_id, due_at=due_at)
                .exists()
            )

        def call(ctx: Any, hook: Any = hook, key: str = key, due_at: int = due_at) -> Any:
            return hook(ctx, TimerEvent(key=key, due_at=due_at, fired_at=clock.now_ms()))

        def finish(_: Any, timer_id: int = timer_id) -> None:
            Timer.objects.filter(pk=timer_id).delete()

        outcome = run_frame(
            extension_id=extension_id,
            hook="on_timer",
            call=call,
            boundary="worker",
            prepare=prepare,
            finish=finish,
        )
        fired += outcome.ok
    return len(candidates), fired
