"""`ctx.update` and `ctx.transact`: frames started by the extension's own code outside a hook
(routes, workers, jobs, commands), and the detached context that code is handed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from extensions_host import registry
from extensions_host.models import RosterEntry
from extensions_host.runtime.context import HookContext, require_grant
from extensions_host.runtime.current import Boundary, FrameMode, current_frame
from extensions_host.runtime.frames import run_frame
from extensions_host.runtime.outcomes import FrameOutcome
from extensions_host.sdk import Caller, ExtensionStop, Retry, StateError

T = TypeVar("T")

MSG_UPDATE_UNAVAILABLE = "Extension state update is unavailable"
MSG_TRANSACT_UNAVAILABLE = "Extension transaction is unavailable"


def context_update(ctx: HookContext, fn: Callable[[HookContext], T]) -> T:
    """`ctx.update(fn)`: a state-only frame from outside a hook. Refused (StateError
    unavailable) while the extension is stopped or this thread is already in a frame (updating,
    transacting, projecting), and without the `state` grant (`AdmissionError(closed)`, as every
    grant-gated call). Typed failures are raised as they are; a defect stops the extension and
    raises `ExtensionStop`."""
    if current_frame() is not None:
        raise StateError("unavailable", MSG_UPDATE_UNAVAILABLE)
    require_grant(ctx, "state")
    outcome = _own_frame(ctx, fn, hook="update", mode="state")
    if outcome.status == "skipped":
        raise StateError("unavailable", MSG_UPDATE_UNAVAILABLE)
    return _raise_or_value(outcome)


def context_transact(ctx: HookContext, fn: Callable[[HookContext], T]) -> T:
    """`ctx.transact(fn)`: a full frame from the extension's own code (route, worker, job).
    It needs no grant of its own: each capability used in it checks its own (records and
    documents `state`, timers `timers`, …). A stopped extension's transact raises
    `ExtensionStop(reason)` at once. Its deadline is the one of the boundary `ctx` was handed
    to (a route's: the request's), never past the deadline of the call it runs in
    (`hook_deadline`); the same goes for `update`."""
    if current_frame() is not None:
        raise StateError("unavailable", MSG_TRANSACT_UNAVAILABLE)
    outcome = _own_frame(ctx, fn, hook="transact", mode="write")
    if outcome.status == "skipped":
        if outcome.skip == "stopped":
            raise ExtensionStop(outcome.reason or "Extension is stopped")
        raise StateError("unavailable", MSG_TRANSACT_UNAVAILABLE)
    return _raise_or_value(outcome)


def _own_frame(
    ctx: HookContext, fn: Callable[[HookContext], Any], *, hook: str, mode: FrameMode
) -> FrameOutcome:
    """A frame the extension's own code starts: typed failures come back to it (`return`),
    with the deadline of the boundary `ctx` was handed to."""
    return run_frame(
        extension_id=ctx.extension_id,
        hook=hook,
        call=fn,
        mode=mode,
        failures="return",
        boundary=ctx._boundary,
        caller=ctx.caller,
    )


def _raise_or_value(outcome: FrameOutcome) -> Any:
    if outcome.status == "ok":
        return outcome.value
    if outcome.status == "failed" and outcome.error is not None:
        raise outcome.error
    if outcome.status == "retry":
        raise Retry(outcome.retry_after or 1, outcome.reason)
    raise ExtensionStop(outcome.reason)


def detached_context(
    *, extension_id: str, hook: str, caller: Caller | None = None, boundary: Boundary = "worker"
) -> HookContext | None:
    """A context for the extension's own code outside any hook (routes, workers, jobs): reads
    work; writes go through `ctx.transact`/`ctx.update`, frames with the deadline of `boundary`
    (a route or slash command passes "request"). None when not installed here."""
    loaded = registry.get(extension_id)
    grants = (
        RosterEntry.objects.filter(pk=extension_id)
        .values_list("admitted_grants", flat=True)
        .first()
    )
    if loaded is None or grants is None:
        return None
    return HookContext(
        loaded=loaded, hook=hook, grants=frozenset(grants), caller=caller, boundary=boundary
    )
