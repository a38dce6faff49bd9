"""Frames: the one place a hook of an extension is invoked.

`run_frame` runs one hook of one extension inside a host-owned transaction — its own
(`atomic(durable=True)`) or a part of a shared page (`FramePage`, group commit) — with:

1. the roster row taken `FOR SHARE` and checked: `running`, and the revision this process
   loaded (a process whose code has another revision runs none of the extension's hooks);
   a stop takes the row `FOR UPDATE`, so it waits for frames in flight and none starts after;
2. host bookkeeping before (`prepare`) and after (`finish`) the hook, in the same transaction;
3. per-process, read-only `activate` when the revision or activation epoch moved (code that
   runs outside frames — routes, commands, workers, notifiers — gets it from
   `activate_outside`, in a frame of its own);
4. the deadline (SIGALRM on a main thread, `statement_timeout`, the elapsed check); inside a
   bounded call (a route's `ctx.transact`) it ends a margin before that call's deadline, whose
   alarm is held while the frame's host code runs, and nothing commits once that deadline passed;
5. the stop rules: which exceptions stop the extension (`failures="stop"` for background hooks:
   anything but `Retry`; `failures="return"` for commands, routes, `transact`, `update`: typed
   SDK errors go back to the caller), async crossings, invalid results, guard defects;
6. host-transient database errors (deadlock, serialization, lock timeout, lost connection):
   the frame is retried from the start with backoff, never a stop;
7. on success: usage deltas, version bumps of observed conversations, watchers after commit;
8. a worker delivery of an `item` is counted outside the database: one that keeps killing its
   process stops the extension instead of looping (`crashes.py`).

A failed frame is rolled back first; the stop is then recorded in its own transaction, or, in
a page, in the page's transaction (so it commits with the page).

Pages (spec 03, frames sharing a commit) come in two kinds:

- **isolated**: a savepoint per frame; a failing frame rolls back only its savepoint;
- **optimistic**: no savepoints. A frame that fails aborts the whole page (`PageAbort`), and
  `run_page` runs the page again, isolated, without the culprit: its hook is not called again,
  its failure (a stop, a `Retry`) is applied as it happened the first time, in its savepoint.
  Only for pages whose frames are told apart by (extension, hook, `item`) and whose `prepare`
  callbacks write nothing.

A page does once what a lone frame does each time: it locks the roster rows of the extensions it
will run in one statement (`page.lock`; they stay locked `FOR SHARE` until the page commits),
sets the database limits once (a frame sets its own only when its deadline is another), reads
each extension's usage once and adds the page's deltas in one statement per extension before
the commit. A frame's deadline is always its own whole deadline (`hook_deadline`), never cut by
the page: sharing a commit must not change what a hook may take (spec 03). The page's time
limit is a budget for starting frames: a frame starts only when its whole deadline ends within
it; one that does not is not started (skipped, "page") and its item is left for the next page.
The first frame of a page starts whatever its deadline (`first_always`, the default: else work
of an extension whose deadline is longer than the budget would never run), so a page runs at
most max(budget, 300 s). Outcome listeners of an optimistic page hear of its frames only after
the page ran.

A lone frame on PostgreSQL takes its roster row, its usage and its database limits in one
statement (`roster_rows.lock_roster_rows`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

from django.db import DatabaseError, transaction
from django.db.models import F

from conversations.models import Conversation
from extensions_host import registry
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.registry import LoadedExtension
from extensions_host.runtime import deadlines
from extensions_host.runtime.activation import ensure_activated
from extensions_host.runtime.context import HookContext
from extensions_host.runtime.crashes import crashed_reason, delivery_counted
from extensions_host.runtime.current import (
    Boundary,
    Failures,
    Frame,
    FrameMode,
    HookDeadline,
    TransientDatabaseError,
)
from extensions_host.runtime.invoke import invoke
from extensions_host.runtime.outcomes import FrameOutcome, HookFailure, reported
from extensions_host.runtime.pages import FramePage, PageAbort
from extensions_host.runtime.roster_rows import RosterView, lock_roster_row
from extensions_host.runtime.stops import deadline_reason, extension_stop
from extensions_host.runtime.transient import is_transient, with_transient_retries
from extensions_host.sdk import Caller
from extensions_host.services.quotas import quotas_parsed, usage_flush

T = TypeVar("T")
logger = logging.getLogger("extensions_host.runtime")

# Called after a frame commits with the conversations it touched (live updates subscribe).
observation_listeners: list[Callable[[frozenset[str]], None]] = []


class _Rollback(Exception):
    def __init__(self, failure: HookFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


def run_frame(
    *,
    extension_id: str,
    hook: str,
    call: Callable[[HookContext], Any],
    mode: FrameMode = "write",
    failures: Failures = "stop",
    boundary: Boundary = "request",
    deadline_s: float | None = None,
    page: FramePage | None = None,
    prepare: Callable[[], bool | None] | None = None,
    finish: Callable[[Any], None] | None = None,
    validate: Callable[[Any], Any] | None = None,
    observe: Iterable[str] = (),
    retry_attempt: int = 0,
    caller: Caller | None = None,
    item: str | None = None,
    counted: bool = True,
) -> FrameOutcome:
    """Run `call(ctx)` — which calls the extension's hook — in a frame (see module docstring).

    `prepare()` runs first in the frame (return False to skip the hook: e.g. a timer re-set
    meanwhile); `validate(result)` checks/encodes the result (raise `InvalidResult` → stop);
    `finish(result)` is host bookkeeping committed with the hook's effects. `retry_attempt` is
    how many times this item already asked to `Retry` (past the bound it counts as a defect).
    `item` names the work item of a worker delivery (a timer, an outbox row, …): its deliveries
    are counted outside the database, and one that keeps killing its process stops the
    extension (`crashes.py`). `counted=False`: the item is not counted on its own (a page of
    one extension's frames counts its first item for the whole page).
    """
    loaded = registry.get(extension_id)
    if loaded is None:
        return FrameOutcome(
            status="skipped", skip="missing", hook=hook, reason="Extension is not installed"
        )
    if page is not None and extension_id in page.stopped:
        return FrameOutcome(status="skipped", skip="stopped", hook=hook)

    def attempt() -> FrameOutcome:
        return _attempt(
            loaded=loaded,
            hook=hook,
            call=call,
            mode=mode,
            failures=failures,
            boundary=boundary,
            deadline_s=deadline_s,
            page=page,
            prepare=prepare,
            finish=finish,
            validate=validate,
            observe=observe,
            retry_attempt=retry_attempt,
            caller=caller,
            item=item if counted else None,
            key=item,
        )

    # an enclosing call's alarm (a route's) never interrupts the frame's database commands: the
    # connection stays usable and the frame's stop is recorded; it falls once the frame is done
    with deadlines.alarms_held():
        if page is not None:
            return attempt()  # a transient error fails the whole page; its owner retries it
        return with_transient_retries(attempt)


def _attempt(
    *,
    loaded: LoadedExtension,
    hook: str,
    call: Callable[[HookContext], Any],
    mode: FrameMode,
    failures: Failures,
    boundary: Boundary,
    deadline_s: float | None,
    page: FramePage | None,
    prepare: Callable[[], bool | None] | None,
    finish: Callable[[Any], None] | None,
    validate: Callable[[Any], Any] | None,
    observe: Iterable[str],
    retry_attempt: int,
    caller: Caller | None,
    item: str | None,
    key: str | None,
) -> FrameOutcome:
    started = time.monotonic()
    try:
        with _frame_transaction(page), ExitStack() as counted:
            if page is None:
                # bound the wait for the roster row too (a sync or a stop may hold it FOR UPDATE)
                provisional = hook_deadline(None, loaded, deadline_s, boundary=boundary)
                row = lock_roster_row(loaded.id, limit_s=provisional)  # sets the limits too
            else:
                provisional = page.db_limit_s  # set when the page began
                row = page.rows.get(loaded.id) or lock_roster_row(loaded.id)
            skipped = _skip(row, loaded, hook)
            if skipped is not None:
                return skipped
            assert row is not None
            # the frame's whole deadline, never cut by a page: a page that cannot give it
            # leaves the frame's item for its next page
            own = hook_deadline(row, loaded, deadline_s, boundary=boundary)
            if page is not None and not page.admits(own):
                return FrameOutcome(status="skipped", skip="page", hook=hook)
            if prepare is not None and prepare() is False:
                return FrameOutcome(status="skipped", skip="prepare", hook=hook)
            if item is not None and counted.enter_context(
                delivery_counted(
                    extension_id=loaded.id, hook=hook, item=item, deferred=page is not None
                )
            ):
                raise _Rollback(HookFailure("stop", hook, crashed_reason(hook)))
            nested = deadlines.seconds_left_nested()
            enclosed = nested is not None and own >= nested
            own_limits = own != provisional
            if own_limits:
                # the row's staff override, or a deadline other than the page's (a longer one
                # needs a longer `statement_timeout` too)
                deadlines.database_limits(own)
            grants = frozenset(row.admitted_grants)
            failure = ensure_activated(loaded, row, grants, own, page)
            if failure is None and page is not None:
                failure = page.known.get((loaded.id, hook, key or ""))  # failed in an abort
            if failure is not None:
                raise _Rollback(failure)
            frame = Frame(
                extension_id=loaded.id,
                revision=loaded.revision,
                hook=hook,
                mode=mode,
                grants=grants,
                quotas=quotas_parsed(row.quotas),
                deadline_s=own,
                page=page,
                enclosed=enclosed,
                observed=set(observe),
                usage_base=row.usage if page is None else None,
            )
            ctx = HookContext(
                loaded=loaded,
                hook=hook,
                grants=grants,
                frame=frame,
                caller=caller,
                boundary=boundary,
            )
            result, failure = invoke(frame, ctx, call, validate, failures, retry_attempt)
            if failure is not None:
                raise _Rollback(failure)
            _commit_bookkeeping(frame)
            if finish is not None:
                finish(result)
            if deadlines.seconds_left() == 0:
                # the enclosing call's deadline passed meanwhile (its alarm is held): too late
                raise _Rollback(HookFailure("enclosing", hook, deadline_reason(hook)))
            if page is not None and own_limits:
                deadlines.database_limits(page.db_limit_s)
            return reported(
                loaded.id,
                FrameOutcome(
                    status="ok", value=result, hook=hook, elapsed_s=time.monotonic() - started
                ),
                page,
            )
    except _Rollback as rollback:
        failure = rollback.failure
        if page is not None and not page.isolated and failure.kind != "transient":
            raise PageAbort((loaded.id, hook, key or ""), failure) from failure.cause
    except DatabaseError as exc:
        # host-side database trouble (the row lock, bookkeeping, the commit): never a stop
        if is_transient(exc):
            raise TransientDatabaseError(str(exc)) from exc
        raise
    return reported(
        loaded.id, _after_rollback(loaded, failure, page, time.monotonic() - started), page
    )


def _after_rollback(
    loaded: LoadedExtension, failure: HookFailure, page: FramePage | None, elapsed: float
) -> FrameOutcome:
    if failure.kind == "transient":
        raise TransientDatabaseError(failure.reason) from failure.cause
    if failure.kind == "typed":
        return FrameOutcome(
            status="failed",
            error=failure.error,
            hook=failure.hook,
            reason=failure.reason,
            elapsed_s=elapsed,
        )
    if failure.kind == "enclosing":
        raise HookDeadline(failure.reason) from failure.cause
    if failure.kind == "retry":
        return FrameOutcome(
            status="retry",
            retry_after=failure.retry_after,
            hook=failure.hook,
            reason=failure.reason,
            elapsed_s=elapsed,
        )
    stop = extension_stop(
        extension_id=loaded.id,
        hook=failure.hook,
        reason=failure.reason,
        cause=failure.cause,
        revision=loaded.revision,
        enclosing=page is not None,
    )
    if page is not None:
        page.stopped.add(loaded.id)
    return FrameOutcome(status="stopped", reason=stop.reason, hook=failure.hook, elapsed_s=elapsed)


@contextmanager
def _frame_transaction(page: FramePage | None) -> Iterator[None]:
    if page is None:
        with transaction.atomic(durable=True):
            yield
    elif page.isolated:
        with transaction.atomic():  # a savepoint of the page's transaction
            yield
    else:
        yield  # optimistic: a failure aborts the page


def _skip(row: RosterView | None, loaded: LoadedExtension, hook: str) -> FrameOutcome | None:
    if row is None:
        return FrameOutcome(
            status="skipped", skip="missing", hook=hook, reason="Extension is not in the roster"
        )
    if row.status == ExtensionStatus.UNINSTALLED:
        return FrameOutcome(
            status="skipped", skip="uninstalled", hook=hook, reason="Extension is uninstalled"
        )
    if row.status == ExtensionStatus.STOPPED:
        return FrameOutcome(status="skipped", skip="stopped", hook=hook, reason=row.reason)
    if row.revision != loaded.revision:
        # mixed versions during a rolling deploy: wait for the roster or this process
        return FrameOutcome(
            status="skipped",
            skip="revision",
            hook=hook,
            reason="Extension revision is not the one this process runs",
        )
    return None


def hook_deadline(
    row: RosterView | RosterEntry | None,
    loaded: LoadedExtension,
    explicit: float | None = None,
    *,
    boundary: Boundary = "request",
) -> float:
    """An extension's own deadline for one call (a hook, a route, a slash command), clamped to
    (0, 300] s: the call's own (`explicit`), else the staff override on the roster row, the
    extension's `deadline_s`, the boundary's default (5 s request, 30 s worker); never past
    the deadline of the bounded call it runs in, less a margin (a route's `ctx.transact` ends,
    and its stop is recorded, before the route's deadline; nothing it writes commits after it).
    A page never cuts it: a frame it cannot give its whole deadline is not started there.
    Every hook's deadline comes from here: frames, routes, slash commands, worker runs and
    notifiers."""
    if explicit is not None:
        limit = explicit
    elif row is not None and row.deadline_seconds:
        limit = row.deadline_seconds
    elif loaded.definition.deadline_s:
        limit = loaded.definition.deadline_s
    else:
        limit = deadlines.default_deadline(boundary)
    enclosing = deadlines.seconds_left_nested()
    if enclosing is not None:
        limit = min(limit, enclosing)
    return min(max(limit, deadlines.MIN_DEADLINE_SECONDS), deadlines.MAX_DEADLINE_SECONDS)


def _commit_bookkeeping(frame: Frame) -> None:
    usage_flush(frame=frame)
    touched = frozenset(frame.observed)
    if not touched:
        return
    Conversation.objects.filter(pk__in=touched).update(version=F("version") + 1)

    def notify() -> None:
        for listener in observation_listeners:
            listener(touched)

    transaction.on_commit(notify)
