"""`shutdown` (spec 03): no cause to record, so it is a direct, best-effort, deadline-bounded
call made by a worker process as it shuts down (Celery's `worker_shutdown`, after its pool
stopped); a failure is logged, never a stop."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from extensions_host import registry
from extensions_host.background.services.common import eligible_ids
from extensions_host.registry import LoadedExtension
from extensions_host.runtime import HookContext, detached_context
from extensions_host.runtime import deadlines as runtime_deadlines
from extensions_host.runtime.current import Frame, HookDeadline

shutdown_logger = logging.getLogger("extensions_host.background.shutdown")


def lifecycle_shutdown_all() -> dict[str, str]:
    """Celery's `worker_shutdown`: call every running, lifecycle-granted extension's `shutdown`
    directly, best-effort and deadline-bounded (after the worker's pool stopped). A failure is
    logged, never a stop. Returns extension id → outcome (`ok`, `failed`, `timeout`)."""
    outcomes: dict[str, str] = {}
    try:
        ids = eligible_ids("lifecycle")
    except Exception:  # the database may already be gone at shutdown
        shutdown_logger.exception("shutdown hooks skipped: roster unavailable")
        return outcomes
    for extension_id in ids:
        loaded = registry.get(extension_id)
        fn = loaded.definition.hooks.single.get("shutdown") if loaded is not None else None
        if loaded is None or fn is None:
            continue
        outcomes[extension_id] = _shutdown_one(loaded, fn)
    return outcomes


def _shutdown_one(loaded: LoadedExtension, fn: Any) -> str:
    limit = min(runtime_deadlines.default_deadline("worker"), loaded.definition.deadline_s or 30)
    ctx = detached_context(extension_id=loaded.id, hook="shutdown")
    if ctx is None:
        return "skipped"
    grants = ctx.grants
    # the frame object only arms the deadline alarm; it is never made current, so writes go
    # through ctx.transact like any code outside a hook
    alarm_frame = Frame(
        extension_id=loaded.id,
        revision=loaded.revision,
        hook="shutdown",
        mode="read",
        grants=grants,
        quotas={},
        deadline_s=limit,
    )
    started = time.monotonic()
    try:
        if runtime_deadlines.alarm_usable():
            with runtime_deadlines.alarm(alarm_frame, limit):
                fn(ctx)
        else:
            _call_bounded(fn, ctx, limit)
    except HookDeadline:
        shutdown_logger.error(
            "extension_shutdown_failed",
            extra={"extension_id": loaded.id, "reason": "shutdown exceeded its deadline"},
        )
        return "timeout"
    except Exception as exc:
        shutdown_logger.error(
            "extension_shutdown_failed",
            extra={"extension_id": loaded.id, "reason": f"shutdown defect: {exc}"},
        )
        return "failed"
    finally:
        alarm_frame.open = False
    if time.monotonic() - started > limit:
        shutdown_logger.error(
            "extension_shutdown_failed",
            extra={"extension_id": loaded.id, "reason": "shutdown exceeded its deadline"},
        )
        return "timeout"
    return "ok"


def _call_bounded(fn: Any, ctx: HookContext, limit: float) -> None:
    """Off the main thread no alarm can interrupt the hook: run it in a daemon thread and stop
    waiting at the deadline (the process is exiting anyway)."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            fn(ctx)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target, name=f"shutdown-{ctx.extension_id}", daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        raise HookDeadline("shutdown exceeded its deadline")
    if failure:
        raise failure[0]
