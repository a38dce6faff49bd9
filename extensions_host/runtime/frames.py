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
statement (`_lock_roster_rows`).
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from django.db import DatabaseError, connection, transaction
from django.db.models import F

from conversations.models import Conversation
from extensions_host import registry
from extensions_host.models import ExtensionStatus, RosterEntry, UsageSlot
from extensions_host.registry import LoadedExtension
from extensions_host.runtime import deadlines
from extensions_host.runtime.context import HookContext
from extensions_host.runtime.crashes import clear_deferred, crashed_reason, delivery_counted
from extensions_host.runtime.current import (
    PROCESS_EXIT,
    Frame,
    FrameDefect,
    FrameMode,
    HookDeadline,
    HostTransient,
    InvalidResult,
    TransientDatabaseError,
    _current,
    current_frame,
)
from extensions_host.runtime.stops import (
    async_reason,
    deadline_reason,
    exception_message,
    extension_stop,
    reason_for,
)
from extensions_host.runtime.transient import (
    is_statement_timeout,
    is_transient,
    with_transient_retries,
)
from extensions_host.sdk import Caller, ExtensionStop, Retry, SdkError, StateError
from extensions_host.services.quotas import PageUsage, quotas_parsed, usage_flush
from extensions_host.services.recovery import retry_limit

T = TypeVar("T")
logger = logging.getLogger("extensions_host.runtime")
Failures = Literal["stop", "return"]
Boundary = Literal["request", "worker"]
Status = Literal["ok", "skipped", "stopped", "failed", "retry"]
Skip = Literal["", "missing", "uninstalled", "stopped", "revision", "prepare", "page"]

MSG_UPDATE_UNAVAILABLE = "Extension state update is unavailable"
MSG_TRANSACT_UNAVAILABLE = "Extension transaction is unavailable"

# Called after a frame commits with the conversations it touched (live updates subscribe).
observation_listeners: list[Callable[[frozenset[str]], None]] = []
# Called with (extension id, outcome) for every frame whose hook ran (metrics subscribe).
outcome_listeners: list[Callable[[str, FrameOutcome], None]] = []


@dataclass(frozen=True)
class FrameOutcome:
    """What happened to one frame.

    - `ok`: committed; `value` is the hook's (validated) result.
    - `skipped`: the hook did not run (`skip` says why; `reason` is the stored stop reason).
    - `stopped`: rolled back and the extension stopped with `reason`.
    - `failed`: rolled back; `error` is the typed SDK error for the caller (commands, …).
    - `retry`: rolled back on `Retry`; offer the item again after `retry_after` seconds.
    """

    status: Status
    value: Any = None
    error: SdkError | None = None
    reason: str = ""
    skip: Skip = ""
    retry_after: float | None = None
    elapsed_s: float = 0.0
    hook: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class FramePage:
    """One outer transaction shared by several frames (group commit, spec 03).

    Isolated: each frame runs in a savepoint; a failing frame rolls back only its savepoint and
    its stop is written into the page's transaction; later frames of a stopped extension in the
    page are skipped. Optimistic (`isolated=False`): no savepoints; a failing frame aborts the
    page (`PageAbort`). The roster rows its frames use are held `FOR SHARE` until the page
    commits, so its time is bounded: a frame starts only when its whole deadline ends within the
    page's time limit (`admits`), the page's first frame whatever its deadline when
    `first_always`. A frame's own deadline is never cut by the page.
    """

    def __init__(
        self,
        *,
        boundary: Boundary,
        time_limit_s: float,
        db_limit_s: float | None = None,
        isolated: bool = True,
        first_always: bool = True,
    ) -> None:
        self.boundary = boundary
        self.deadline_at = time.monotonic() + time_limit_s
        # the database limits set for the whole page (a frame sets its own when its deadline
        # is another)
        self.db_limit_s = time_limit_s if db_limit_s is None else min(db_limit_s, time_limit_s)
        self.isolated = isolated
        self.first_always = first_always
        self.started = 0  # frames admitted so far
        self.stopped: set[str] = set()
        self.rows: dict[str, RosterView] = {}  # roster rows this page holds FOR SHARE
        self.usage = PageUsage()
        self.reports: list[tuple[str, FrameOutcome]] = []  # optimistic: heard after the page
        # failures of an aborted optimistic run, by (extension, hook, item): not run again
        self.known: dict[tuple[str, str, str], _Failure] = {}

    def remaining(self) -> float:
        return max(self.deadline_at - time.monotonic(), deadlines.MIN_DEADLINE_SECONDS)

    def admits(self, deadline_s: float) -> bool:
        """Whether a frame with this whole deadline may start now: it ends within the page's
        time limit, or it is the page's first frame (`first_always`)."""
        if self.remaining() < deadline_s and not (self.first_always and not self.started):
            return False
        self.started += 1
        return True

    def lock(self, extension_ids: Iterable[str]) -> None:
        """Take the roster rows of these extensions `FOR SHARE` in one statement, in the page's
        own transaction (outside any frame's savepoint), for every frame of the page to use."""
        wanted = sorted(set(extension_ids) - set(self.rows))
        for row in _lock_roster_rows(wanted) if wanted else ():
            self.rows[row.id] = row
            self.usage.seed(row.id, row.usage)


class PageAbort(Exception):
    """A frame of an optimistic page failed: the page is rolled back whole and run again."""

    def __init__(self, culprit: tuple[str, str, str], failure: _Failure) -> None:
        super().__init__(f"{culprit[0]}: {failure.reason}")
        self.culprit = culprit
        self.failure = failure


@contextmanager
def frame_page(
    *,
    boundary: Boundary = "worker",
    time_limit_s: float | None = None,
    db_limit_s: float | None = None,
    isolated: bool = True,
    first_always: bool = True,
) -> Iterator[FramePage]:
    """Open a page: one durable transaction for several frames."""
    limit = time_limit_s if time_limit_s is not None else deadlines.default_deadline(boundary)
    try:
        with transaction.atomic(durable=True):
            page = FramePage(
                boundary=boundary,
                time_limit_s=limit,
                db_limit_s=db_limit_s,
                isolated=isolated,
                first_always=first_always,
            )
            deadlines.database_limits(page.db_limit_s)
            yield page
            page.usage.flush()
    finally:
        clear_deferred()  # the delivery counts of the page's frames that finished


def run_page(
    fn: Callable[[FramePage], T],
    *,
    boundary: Boundary = "worker",
    time_limit_s: float | None = None,
    db_limit_s: float | None = None,
    optimistic: bool = False,
    first_always: bool = True,
) -> T:
    """Run `fn(page)` in a page, again from the start after a host-transient database error.
    Optimistic: without savepoints first, and isolated again after a frame failed."""
    known: dict[tuple[str, str, str], _Failure] = {}

    def attempt() -> T:
        with frame_page(
            boundary=boundary,
            time_limit_s=time_limit_s,
            db_limit_s=db_limit_s,
            isolated=not optimistic or bool(known),
            first_always=first_always,
        ) as page:
            page.known.update(known)
            result = fn(page)
        for extension_id, outcome in page.reports:
            _reported(extension_id, outcome)
        return result

    try:
        return with_transient_retries(attempt)
    except PageAbort as abort:
        logger.info("optimistic page aborted (%s): running it again isolated", abort)
        known[abort.culprit] = abort.failure
        return with_transient_retries(attempt)


@dataclass(frozen=True)
class _Failure:
    # "enclosing": the deadline of the call the frame runs in (a route, a worker run) ran out:
    # rolled back, no stop here; `HookDeadline` goes on to that call, whose rule applies (a
    # route's overrun stops the extension, a worker run's is a failed run, spec 03)
    kind: Literal["stop", "typed", "retry", "transient", "enclosing"]
    hook: str
    reason: str = ""
    cause: BaseException | None = None
    error: SdkError | None = None
    retry_after: float | None = None


class _Rollback(Exception):
    def __init__(self, failure: _Failure) -> None:
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
                row = _lock_roster_row(loaded.id, limit_s=provisional)  # sets the limits too
            else:
                provisional = page.db_limit_s  # set when the page began
                row = page.rows.get(loaded.id) or _lock_roster_row(loaded.id)
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
                raise _Rollback(_Failure("stop", hook, crashed_reason(hook)))
            nested = deadlines.seconds_left_nested()
            enclosed = nested is not None and own >= nested
            own_limits = own != provisional
            if own_limits:
                # the row's staff override, or a deadline other than the page's (a longer one
                # needs a longer `statement_timeout` too)
                deadlines.database_limits(own)
            grants = frozenset(row.admitted_grants)
            failure = _ensure_activated(loaded, row, grants, own, page)
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
            result, failure = _invoke(frame, ctx, call, validate, failures, retry_attempt)
            if failure is not None:
                raise _Rollback(failure)
            _commit_bookkeeping(frame)
            if finish is not None:
                finish(result)
            if deadlines.seconds_left() == 0:
                # the enclosing call's deadline passed meanwhile (its alarm is held): too late
                raise _Rollback(_Failure("enclosing", hook, deadline_reason(hook)))
            if page is not None and own_limits:
                deadlines.database_limits(page.db_limit_s)
            return _reported(
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
    return _reported(
        loaded.id, _after_rollback(loaded, failure, page, time.monotonic() - started), page
    )


def _reported(
    extension_id: str, outcome: FrameOutcome, page: FramePage | None = None
) -> FrameOutcome:
    if page is not None and not page.isolated:
        page.reports.append((extension_id, outcome))  # heard if the page is not aborted
        return outcome
    for listener in outcome_listeners:
        try:
            listener(extension_id, outcome)
        except Exception:  # observing must never change what the frame did
            logger.exception("frame outcome listener failed")
    return outcome


def _after_rollback(
    loaded: LoadedExtension, failure: _Failure, page: FramePage | None, elapsed: float
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


@dataclass(frozen=True)
class RosterView:
    """What a frame reads of its extension's roster row (taken `FOR SHARE`), and the
    extension's committed usage when it came with the row."""

    id: str
    status: str
    revision: str
    reason: str
    deadline_seconds: float | None
    admitted_grants: list[str]
    quotas: dict[str, int]
    activation_epoch: int
    usage: tuple[int, int] | None


_ROSTER_COLUMNS = (
    "id",
    "status",
    "revision",
    "reason",
    "deadline_seconds",
    "admitted_grants",
    "quotas",
    "activation_epoch",
)


def roster_view(extension_id: str) -> RosterView | None:
    """The extension's roster row as frames see it, read without a lock and without its usage
    (the pre-checks of commands, routes and slash commands: one plain statement)."""
    return next(iter(_lock_roster_rows([extension_id], lock=False, usage=False)), None)


def _lock_roster_row(extension_id: str, *, limit_s: float | None = None) -> RosterView | None:
    return next(iter(_lock_roster_rows([extension_id], limit_s=limit_s)), None)


def _lock_roster_rows(
    extension_ids: list[str], *, limit_s: float | None = None, lock: bool = True, usage: bool = True
) -> list[RosterView]:
    """Roster rows `FOR SHARE`, in id order, each with its committed usage; on PostgreSQL
    `limit_s` also sets the database limits — one plain statement for all three (a frame's
    first round trip). SQLite's IMMEDIATE transactions already exclude every other writer.

    `set_config(…, true)` is `SET LOCAL`. It runs before the row lock is waited for, so the
    new `lock_timeout` bounds that wait, and `statement_timeout` applies from the next
    statement on."""
    postgres = connection.vendor == "postgresql"
    roster = connection.ops.quote_name(RosterEntry._meta.db_table)
    slots = connection.ops.quote_name(UsageSlot._meta.db_table)
    limits, params = "", []
    if postgres and limit_s is not None:
        statement_ms, lock_ms = deadlines.database_timeouts_ms(limit_s)
        limits = "set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true), "
        params = [str(statement_ms), str(lock_ms)]
    summed = "SELECT COALESCE(SUM(u.{0}), 0) FROM " + slots + " u WHERE u.extension_id = r.id"  # noqa: S608
    columns = ", ".join(f"r.{connection.ops.quote_name(c)}" for c in _ROSTER_COLUMNS)
    if usage:
        columns += f", ({summed.format('records')}), ({summed.format('bytes')})"
    sql = (
        f"SELECT {limits}{columns} FROM {roster} r "  # noqa: S608
        f"WHERE r.id IN ({', '.join(['%s'] * len(extension_ids))}) ORDER BY r.id"
        + (" FOR SHARE OF r" if postgres and lock else "")
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *extension_ids])
        found = cursor.fetchall()
    skip = 2 if limits else 0
    return [
        RosterView(
            id=values[skip],
            status=values[skip + 1],
            revision=values[skip + 2],
            reason=values[skip + 3],
            deadline_seconds=values[skip + 4],
            admitted_grants=decode_json(values[skip + 5]) or [],
            quotas=decode_json(values[skip + 6]) or {},
            activation_epoch=values[skip + 7],
            usage=(int(values[skip + 8]), int(values[skip + 9])) if usage else None,
        )
        for values in found
    ]


def decode_json(value: Any) -> Any:
    """A JSON column read by a plain statement (SQLite returns its text)."""
    return json.loads(value) if isinstance(value, str) else value


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


def _invoke(
    frame: Frame,
    ctx: HookContext,
    call: Callable[[HookContext], Any],
    validate: Callable[[Any], Any] | None,
    failures: Failures,
    retry_attempt: int,
) -> tuple[Any, _Failure | None]:
    """Call the hook with the frame current and the deadline armed; classify what happened."""
    token = _current.set(frame)
    try:
        with deadlines.alarm(frame, frame.deadline_s):
            result = call(ctx)
            if inspect.isawaitable(result):
                _discard(result)
                return None, _Failure("stop", frame.hook, async_reason(frame.hook))
            if validate is not None:
                result = validate(result)
    except BaseException as exc:
        return None, _classify(frame, exc, failures, retry_attempt)
    finally:
        frame.open = False
        _current.reset(token)
    # The hook returned: a swallowed defect or store error, or a late return, still count.
    if frame.defect is not None:
        return None, _Failure("stop", frame.hook, f"{frame.hook} defect: {frame.defect}")
    if frame.poisoned is not None:
        poisoned = frame.poisoned
        if isinstance(poisoned, DatabaseError) and not (
            is_transient(poisoned) or is_statement_timeout(poisoned)
        ):
            # the hook swallowed a store failure; the transaction cannot commit
            poisoned = StateError("unavailable", "Extension state is unavailable")
        return None, _classify(frame, poisoned, "stop", retry_attempt)
    if frame.elapsed() > frame.deadline_s:
        return None, _deadline_failure(frame)
    return result, None


def _deadline_failure(frame: Frame, cause: BaseException | None = None) -> _Failure:
    """The frame ran out of time: its own deadline stops the extension; an enclosing call's
    (`Frame.enclosed`) is that call's to judge."""
    kind: Literal["enclosing", "stop"] = "enclosing" if frame.enclosed else "stop"
    return _Failure(kind, frame.hook, deadline_reason(frame.hook), cause=cause)


def _classify(frame: Frame, exc: BaseException, failures: Failures, retry_attempt: int) -> _Failure:
    hook = frame.hook
    if isinstance(exc, PROCESS_EXIT):
        # the host process is told to exit (gunicorn's worker timeout or a shutdown signal
        # raise SystemExit mid-hook; Ctrl-C): not the extension's failure, never a stop. The
        # frame rolls back as the exception leaves its transaction.
        raise exc
    if frame.defect is not None:
        return _Failure("stop", hook, f"{hook} defect: {frame.defect}", cause=exc)
    if deadlines.past_deadline(exc) or is_statement_timeout(exc):
        return _deadline_failure(frame, exc)
    # host trouble (a lock timeout, a deadlock, …) is retried, never a stop, even when it took
    # the hook past its deadline (spec 02 §1): checked before the elapsed time
    if isinstance(exc, HostTransient) or is_transient(exc):
        return _Failure("transient", hook, exception_message(exc), cause=exc)
    if frame.elapsed() > frame.deadline_s:
        return _deadline_failure(frame, exc)
    if isinstance(exc, FrameDefect | InvalidResult):
        return _Failure("stop", hook, f"{hook} defect: {exception_message(exc)}", cause=exc)
    if isinstance(exc, ExtensionStop):
        return _Failure("stop", hook, exc.reason, cause=exc)
    if isinstance(exc, Retry):
        limit = retry_limit()
        if retry_attempt >= limit:
            return _Failure(
                "stop", hook, f"{hook} defect: retried {limit} times: {exc.reason}", cause=exc
            )
        return _Failure("retry", hook, exc.reason, cause=exc, retry_after=exc.after_seconds)
    if isinstance(exc, SdkError):
        if failures == "return":
            return _Failure("typed", hook, exc.message, cause=exc, error=exc)
        return _Failure("stop", hook, reason_for(hook, exc), cause=exc)
    return _Failure("stop", hook, reason_for(hook, exc), cause=exc)


def _discard(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()  # never awaited: no "coroutine was never awaited" warning, no side effects


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


# --- per-process activation ------------------------------------------------------------------

_activation_lock = threading.Lock()
_activated: dict[str, tuple[str, int]] = {}


def _ensure_activated(
    loaded: LoadedExtension,
    row: RosterView,
    grants: frozenset[str],
    limit: float,
    page: FramePage | None,
) -> _Failure | None:
    """Run the read-only `activate(ctx)` when this process first uses the extension, and again
    after it sees a resume or a new revision (the roster's activation epoch moved)."""
    key = (loaded.revision, row.activation_epoch)
    with _activation_lock:
        if _activated.get(loaded.id) == key:
            return None
    fn = loaded.definition.hooks.single.get("activate")
    if fn is not None:
        frame = Frame(
            extension_id=loaded.id,
            revision=loaded.revision,
            hook="activation",
            mode="read",
            grants=grants,
            quotas={},
            deadline_s=limit,
            page=page,
        )
        ctx = HookContext(loaded=loaded, hook="activation", grants=grants, frame=frame)
        _, failure = _invoke(frame, ctx, fn, None, "stop", 0)
        if failure is not None:
            return failure
    with _activation_lock:
        _activated[loaded.id] = key
    return None


def activate_outside(
    loaded: LoadedExtension, *, boundary: Boundary = "request", epoch: int | None = None
) -> FrameOutcome | None:
    """Run `activate` before the extension's code that runs outside any frame (routes, slash
    commands, workers, notifiers) when this process has not run it at the roster's revision and
    activation epoch yet (spec 02 §1). It runs as `run_frame` runs it (read-only, deadline-bound,
    in a frame of its own that calls no hook), so a failing `activate` stops the extension with
    hook `activation`, exactly as in a frame. `epoch`: the roster's activation epoch when the
    caller has read it (else it is read here).

    None when the extension is activated here; otherwise the frame's outcome: `stopped` (the
    activation failed), or `skipped` (not runnable here now: stopped, another revision, …)."""
    if "activate" not in loaded.definition.hooks.single:
        return None  # nothing to run: no frame, no query
    if epoch is None:
        epoch = (
            RosterEntry.objects.filter(pk=loaded.id)
            .values_list("activation_epoch", flat=True)
            .first()
        )
    if epoch is not None:
        with _activation_lock:
            if _activated.get(loaded.id) == (loaded.revision, epoch):
                return None
    outcome = run_frame(
        extension_id=loaded.id,
        hook="activation",
        call=_no_hook,
        mode="read",
        boundary=boundary,
    )
    return None if outcome.ok else outcome


def _no_hook(ctx: HookContext) -> None:
    """The frame of `activate_outside` calls no hook: its work is the activation."""


def forget_activations() -> None:
    """A process restart, as far as activation goes (tests, the author harness)."""
    with _activation_lock:
        _activated.clear()


# --- ctx.update / ctx.transact ----------------------------------------------------------------


def context_update(ctx: HookContext, fn: Callable[[HookContext], T]) -> T:
    """`ctx.update(fn)`: a state-only frame from outside a hook. Refused (StateError
    unavailable) while the extension is stopped or this thread is already in a frame (updating,
    transacting, projecting). Typed failures are raised as they are; a defect stops the
    extension and raises `ExtensionStop`."""
    if current_frame() is not None:
        raise StateError("unavailable", MSG_UPDATE_UNAVAILABLE)
    outcome = run_frame(
        extension_id=ctx.extension_id,
        hook="update",
        call=fn,
        mode="state",
        failures="return",
        boundary=ctx._boundary,
        caller=ctx.caller,
    )
    if outcome.status == "skipped":
        raise StateError("unavailable", MSG_UPDATE_UNAVAILABLE)
    return _raise_or_value(outcome)


def context_transact(ctx: HookContext, fn: Callable[[HookContext], T]) -> T:
    """`ctx.transact(fn)`: a full frame from the extension's own code (route, worker, job).
    A stopped extension's transact raises `ExtensionStop(reason)` at once. Its deadline is the
    one of the boundary `ctx` was handed to (a route's: the request's), never past the deadline
    of the call it runs in (`hook_deadline`); the same goes for `update`."""
    if current_frame() is not None:
        raise StateError("unavailable", MSG_TRANSACT_UNAVAILABLE)
    outcome = run_frame(
        extension_id=ctx.extension_id,
        hook="transact",
        call=fn,
        mode="write",
        failures="return",
        boundary=ctx._boundary,
        caller=ctx.caller,
    )
    if outcome.status == "skipped":
        if outcome.skip == "stopped":
            raise ExtensionStop(outcome.reason or "Extension is stopped")
        raise StateError("unavailable", MSG_TRANSACT_UNAVAILABLE)
    return _raise_or_value(outcome)


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
