"""`shutdown` (spec 03): no cause to record, so it is a direct, best-effort, deadline-bounded
call made by a worker process as it shuts down (Celery's `worker_shutdown`, after its pool
stopped); a failure is logged, never a stop. Its deadline is every hook's (`hook_deadline`),
at most the worker default: the process is exiting, and a supervisor's grace period does not
wait minutes for it."""

from __future__ import annotations

import logging
import time
from typing import Any

from extensions_host import registry
from extensions_host.registry import LoadedExtension
from extensions_host.runtime import deadlines as runtime_deadlines
from extensions_host.runtime import detached_context
from extensions_host.runtime.current import PROCESS_EXIT
from extensions_host.runtime.frames import hook_deadline
from extensions_host.runtime.outside import bounded, outside_reason
from extensions_host.runtime.stops import bounded_reason, deadline_reason
from extensions_host.services.roster import eligible_deadlines

shutdown_logger = logging.getLogger("extensions_host.background.shutdown")
HOOK = "shutdown"


def lifecycle_shutdown_all() -> dict[str, str]:
    """Celery's `worker_shutdown`: call every running, lifecycle-granted extension's `shutdown`
    directly, best-effort and deadline-bounded (after the worker's pool stopped). A failure is
    logged, never a stop. Returns extension id → outcome (`ok`, `failed`, `timeout`)."""
    outcomes: dict[str, str] = {}
    try:
        overrides = eligible_deadlines("lifecycle")
    except Exception:  # the database may already be gone at shutdown
        shutdown_logger.exception("shutdown hooks skipped: roster unavailable")
        return outcomes
    for extension_id, override in overrides.items():
        loaded = registry.get(extension_id)
        fn = loaded.definition.hooks.single.get("shutdown") if loaded is not None else None
        if loaded is None or fn is None:
            continue
        limit = min(
            hook_deadline(None, loaded, override, boundary="worker"),
            runtime_deadlines.default_deadline("worker"),
        )
        outcomes[extension_id] = _shutdown_one(loaded, fn, limit)
    return outcomes


def _shutdown_one(loaded: LoadedExtension, fn: Any, limit: float) -> str:
    ctx = detached_context(extension_id=loaded.id, hook=HOOK)
    if ctx is None:
        return "skipped"
    started = time.monotonic()
    try:
        # off the main thread no alarm can interrupt it: a daemon thread is given up at the
        # deadline (the process is exiting anyway)
        bounded(loaded, HOOK, limit, lambda: fn(ctx), abandon=True)
    except PROCESS_EXIT:
        raise  # the process is told to exit now: the other hooks are not waited for
    except BaseException as exc:
        reason = outside_reason(HOOK, exc, started=started, limit=limit)
        shutdown_logger.error(
            "extension_shutdown_failed",
            extra={"extension_id": loaded.id, "reason": bounded_reason(reason, loaded.id)},
        )
        return "timeout" if reason == deadline_reason(HOOK) else "failed"
    return "ok"
