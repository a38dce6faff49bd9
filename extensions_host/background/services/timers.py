"""Timers (grant `timers`, spec 03): `ctx.timers.set/cancel/read` and the fire sweep.

- `set(key, due_at_ms)`: key 1..256 characters, `due_at_ms` a non-negative integer (epoch ms);
  upsert per `(extension, key)`; writes only inside the extension's frame, reads anywhere.
  At most `max_timers` (default 10,000) pending per extension, checked against a count taken
  once per frame plus the frame's own inserts (a bounded overshoot, no hot counter row).
- The sweep takes due timers (host clock) of running, timer-granted extensions, oldest first,
  in pages of 64 (of one timer for an extension whose hook's deadline is past a page's budget:
  `TimerGroups`), `FOR UPDATE SKIP LOCKED` on PostgreSQL, and fires them as one group commit:
  one outer transaction (`run_page`), optimistic: no savepoint per timer. The claimed rows stay
  locked until the page commits, so no other process can re-set, cancel or fire them
  meanwhile; the roster rows of the page's extensions are locked in one statement; the
  deletions of the fired timers are batched into one statement at the end of the page and
  commit together with the hooks' effects. A failing hook aborts the page, which runs again
  with a savepoint per timer: the failing one rolls back alone, its extension's stop is
  written into the page, and its timer stays (it fires after resume).
- A fired timer is deleted before its hook runs, as far as any hook can tell (spec 03: "delete
  it and call `on_timer`"): until the page's deletion statement its row is still there, so
  `ctx.timers` treats the keys fired in the page and not set again since (`_GONE`) as absent:
  `read` is None, `cancel` is False, `set` is a new timer for the quota (and takes the row
  over, so the page does not delete it). A frame that fails changes nothing of this: its timer
  is never gone, and it stays, or moves to its retry instant.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from core import clock
from extensions_host import registry
from extensions_host.background.models import Timer
from extensions_host.background.services.common import (
    eligible_deadlines,
    page_budget,
    page_with_retries,
)
from extensions_host.background.services.wake import (
    HELP,
    PUMP,
    lease_claim,
    lease_release,
    timer_help_request,
    timer_next_fire_at,
    timer_wake_clear,
    timer_wake_next,
    timer_wake_request,
)
from extensions_host.runtime import (
    FrameOutcome,
    FramePage,
    current_frame,
    missing_handler_reason,
    require_grant,
    require_read,
    require_write,
    run_frame,
)
from extensions_host.runtime.context import store_call
from extensions_host.runtime.frames import hook_deadline
from extensions_host.sdk import ExtensionStop, StateError, TimerEvent
from extensions_host.services.quotas import quota_limit
from extensions_host.services.records import check_key

if TYPE_CHECKING:
    from extensions_host.runtime import Frame, HookContext

PAGE = 64
PUMP_GATHER_MS = 5  # the pump's shortest wait: a few timers per page instead of one each
LEASE_MARGIN_MS = 60_000  # a pump or helper lease outlives its sweep's budget by the task's limit
HELP_LATE_MS = 10  # a page whose oldest timer is later than this asks for a helper sweep
REFRESH_S = 1.0  # a sweep re-reads the eligible extensions, and may ask for help, this often
MSG_INSTANT_INVALID = "A timer instant must be a non-negative integer (epoch milliseconds)"

# frame.scratch keys (per-frame bookkeeping of this capability)
_KEYS = "timers.keys"  # keys this frame set or cancelled
_COUNT = "timers.count"  # [committed count at first insert, this frame's delta]
_WAKE = "timers.wake"  # earliest due_at this frame set
_GONE = "timers.gone"  # keys fired in this page (this frame's own too) and not set again since


# --- ctx.timers -----------------------------------------------------------------------------


class TimerAccess:
    """`ctx.timers`: `set(key, due_at_ms)` and `cancel(key)` in the extension's own frame,
    `read(key)` anywhere in the extension."""

    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx

    def set(self, key: str, due_at_ms: int) -> None:
        frame = require_write(self._ctx, capability="timers")
        require_grant(self._ctx, "timers", frame)
        check_key(key, "A timer key")
        if (
            isinstance(due_at_ms, bool)
            or not isinstance(due_at_ms, int)
            or not 0 <= due_at_ms <= clock.MAX_MS
        ):
            raise StateError("bound", MSG_INSTANT_INVALID)
        with store_call(frame):
            timer_set(frame=frame, key=key, due_at=due_at_ms)

    def cancel(self, key: str) -> bool:
        frame = require_write(self._ctx, capability="timers")
        require_grant(self._ctx, "timers", frame)
        check_key(key, "A timer key")
        with store_call(frame):
            return timer_cancel(frame=frame, key=key)

    def read(self, key: str) -> int | None:
        frame = require_read(self._ctx)
        require_grant(self._ctx, "timers", frame)
        check_key(key, "A timer key")
        if frame is not None and key in frame.scratch.get(_GONE, ()):
            return None  # fired in this page: deleted, though its row goes when the page ends
        with store_call(frame):
            return timer_read(extension_id=self._ctx.extension_id, key=key)


def timer_set(*, frame: Frame, key: str, due_at: int) -> None:
    """Upsert the timer inside the frame; a new key is checked against the quota first.

    Plain statements (every hook that re-arms a timer runs them): the update, and for a new
    key the insert. A key fired in this page is a new timer whose row is still there: charged
    first, then the update takes the row over."""
    gone: set[str] | None = frame.scratch.get(_GONE)
    fired = gone is not None and key in gone
    if fired:
        _count_charge(frame, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_table()} SET due_at = %s, fire_at = %s, retry_attempt = 0 "  # noqa: S608
            "WHERE extension_id = %s AND key = %s",
            [due_at, due_at, frame.extension_id, key],
        )
        if not cursor.rowcount:
            if not fired:
                _count_charge(frame, 1)
            cursor.execute(
                f"INSERT INTO {_table()} "  # noqa: S608
                "(extension_id, key, due_at, fire_at, retry_attempt) VALUES (%s, %s, %s, %s, 0)",
                [frame.extension_id, key, due_at, due_at],
            )
    if gone is not None:
        gone.discard(key)
    frame.scratch.setdefault(_KEYS, set()).add(key)
    _wake_after_commit(frame, due_at)


def timer_cancel(*, frame: Frame, key: str) -> bool:
    if key in frame.scratch.get(_GONE, ()):
        return False  # fired in this page: already deleted (its row goes when the page ends)
    deleted, _ = Timer.objects.filter(extension_id=frame.extension_id, key=key).delete()
    frame.scratch.setdefault(_KEYS, set()).add(key)
    if deleted and frame.scratch.get(_COUNT) is not None:
        # a count the frame took before is charged the removal; one it takes later reads the
        # row gone already (charging it there too would let the frame past its quota)
        _count_charge(frame, -1)
    return bool(deleted)


def timer_read(*, extension_id: str, key: str) -> int | None:
    return (
        Timer.objects.filter(extension_id=extension_id, key=key)
        .values_list("due_at", flat=True)
        .first()
    )


def _table() -> str:
    return connection.ops.quote_name(Timer._meta.db_table)


def _count_charge(frame: Frame, delta: int) -> None:
    counted = frame.scratch.get(_COUNT)
    if counted is None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT COUNT(*) FROM {_table()} WHERE extension_id = %s",  # noqa: S608
                [frame.extension_id],
            )
            # the rows of timers fired in this page are still there: they are not pending
            pending = cursor.fetchone()[0] - len(frame.scratch.get(_GONE, ()))
            counted = frame.scratch[_COUNT] = [pending, 0]
    if delta > 0:
        limit = quota_limit(overrides=frame.quotas, name="max_timers")
        if counted[0] + counted[1] + delta > limit:
            raise StateError("bound", f"Extension quota max_timers ({limit}) is exceeded")
    counted[1] += delta


def _wake_after_commit(frame: Frame, due_at: int) -> None:
    """One wake request per frame, after commit, for the earliest instant it set (a rolled
    back frame's callbacks are discarded with its savepoint)."""
    earliest = frame.scratch.get(_WAKE)
    if earliest is not None and earliest <= due_at:
        return
    first = earliest is None
    frame.scratch[_WAKE] = due_at
    if first:
        transaction.on_commit(
            lambda: timer_wake_request(at_ms=frame.scratch[_WAKE]),
            robust=True,
        )


# --- the fire sweep --------------------------------------------------------------------------


@dataclass
class PageResult:
    claimed: int = 0
    fired: int = 0
    retried: int = 0
    stopped: int = 0
    skipped: int = 0
    stopped_ids: set[str] = field(default_factory=set)
    late_ms: int = 0  # how late the oldest claimed timer was when the page claimed it
    # extensions a shared page found (under its lock) with a deadline past the page's budget:
    # their claimed timers were not fired there, they fire in pages of their own
    alone_ids: set[str] = field(default_factory=set)

    @property
    def progressed(self) -> int:
        return self.fired + self.retried + self.stopped

    def add(self, other: PageResult) -> None:
        """Count another page's timers in with this one's (one round of a sweep)."""
        self.claimed += other.claimed
        self.fired += other.fired
        self.retried += other.retried
        self.stopped += other.stopped
        self.skipped += other.skipped
        self.stopped_ids |= other.stopped_ids
        self.late_ms = max(self.late_ms, other.late_ms)
        self.alone_ids |= other.alone_ids


@dataclass(frozen=True)
class TimerGroups:
    """The extensions whose timers may fire here, by their `on_timer` deadline (spec 03, frames
    sharing a commit). A page holds every timer it claimed `FOR UPDATE` and its extensions'
    roster rows `FOR SHARE` until it commits, and its first frame starts whatever its deadline:
    a frame whose whole deadline is past the page budget (`page_budget()`) would hold other
    extensions' timers (untouchable by other sweeps) and rows (a staff stop or resume waits)
    for up to 300 s. So those extensions' timers fire in pages of one timer (`alone`); the
    others' share pages of `PAGE` (`shared`), which thus run within their budget."""

    shared: tuple[str, ...] = ()
    alone: tuple[str, ...] = ()

    @property
    def ids(self) -> list[str]:
        return sorted((*self.shared, *self.alone))

    def moved_alone(self, ids: set[str]) -> TimerGroups:
        """These extensions' timers fire alone from now on (a page found their deadline
        raised since the groups were read)."""
        if not ids:
            return self
        return TimerGroups(
            shared=tuple(i for i in self.shared if i not in ids),
            alone=tuple(sorted({*self.alone, *(i for i in ids if i in self.shared)})),
        )


def timer_groups() -> TimerGroups:
    """The extensions whose timers may fire here (`eligible_ids("timers")`), grouped by the
    deadline their frames get (`hook_deadline`: the staff override, the extension's
    `deadline_s`, the worker default), read from the roster in one plain statement."""
    budget = page_budget()
    shared: list[str] = []
    alone: list[str] = []
    for extension_id, override in eligible_deadlines("timers").items():
        loaded = registry.get(extension_id)
        # as the frame's: `on_timer` passes no deadline of its own, so the row's override comes
        # first (passed in that argument's place: building a roster row costs ~10 µs)
        too_long = (
            loaded is not None
            and hook_deadline(None, loaded, override or None, boundary="worker") > budget
        )
        (alone if too_long else shared).append(extension_id)
    return TimerGroups(shared=tuple(shared), alone=tuple(alone))


# Which group a round of a sweep serves first, in turns in each process: a round past the
# sweep's budget leaves its second group's page out, so the next round (this sweep's, or the
# next sweep this process runs) starts with it and neither group waits behind the other.
_rounds = itertools.count()


def timers_fire_due(
    *, wake_at: int | None = None, budget_s: float | None = None, help_until: int | None = None
) -> bool:
    """Fire due timers round after round for up to `budget_s` seconds. Returns True when more
    are due (the task re-enqueues itself); when none are, claims the next precise wake.

    A round is a page of up to `PAGE` timers of the extensions whose deadline fits a page's
    budget and a page of one timer of the others (`TimerGroups`), each group first in turn, the
    second page only while the budget lasts: the task's soft time limit covers its budget and
    one page.

    The pump: one sweep at a time (the `timer_pump` lease) that fired timers waits for the
    next one when it falls due within `HOST_TIMER_PUMP_MS` (while its budget lasts), so under a
    steady stream it fires them as they fall due instead of a chain of wake tasks each paying
    the broker's round trip. Other sweeps fire what is due and end, so a light stream never
    holds more than one worker process waiting. A sweep that finds timers more than
    `HELP_LATE_MS` late sends one helper sweep (the `timer_help` lease; `help_until` is the
    helper's own), which pumps too for its budget: a stream faster than one process fires
    with two."""
    if wake_at is not None:
        timer_wake_clear(instant=wake_at)
    budget = settings.HOST_SWEEP_BUDGET_SECONDS if budget_s is None else budget_s
    ends = time.monotonic() + budget
    lease = clock.now_ms() + int(budget * 1000) + LEASE_MARGIN_MS
    pump = help_until is not None  # a helper waits like the pump, for its budget
    groups, groups_at, help_at = TimerGroups(), -math.inf, -math.inf
    fired = False  # a sweep that fired nothing never waits (beat's tick with nothing due)
    try:
        while True:
            if time.monotonic() - groups_at >= REFRESH_S:  # a resumed extension joins within 1 s
                groups, groups_at = timer_groups(), time.monotonic()
            result, behind = _fire_round(groups, ends)
            groups = groups.moved_alone(result.alone_ids)
            fired = fired or result.fired > 0
            if result.late_ms > HELP_LATE_MS and time.monotonic() - help_at >= REFRESH_S:
                timer_help_request(until_ms=lease)  # a no-op while a helper holds the lease
                help_at = time.monotonic()
            if behind and time.monotonic() >= ends:
                return True
            if behind:
                continue
            # the pump goes on after an empty page too (a helper may have taken the due ones)
            wait = _next_wait(ends, groups.ids) if fired or pump else None
            if wait is None:
                break
            if not result.claimed:
                wait = max(wait, PUMP_GATHER_MS)  # what is due is held by another sweep
            if wait:  # only the pump waits
                pump = pump or lease_claim(PUMP, until_ms=lease)
                if not pump:
                    break
                clock.sleep(wait)
    finally:
        if help_until is not None:
            lease_release(HELP, until_ms=help_until)
        elif pump:
            lease_release(PUMP, until_ms=lease)
    timer_wake_next(ids=groups.ids)
    return False


def _fire_round(groups: TimerGroups, ends: float) -> tuple[PageResult, bool]:
    """One round of a sweep (see `timers_fire_due`). Returns what its pages did and whether
    more are due already (no need to ask when the next one is)."""
    turns = [(groups.shared, PAGE), (groups.alone, 1)]
    if next(_rounds) % 2:
        turns.reverse()
    result, behind, first = PageResult(), False, True
    for ids, limit in turns:
        if not ids:
            continue
        if not first and time.monotonic() >= ends:
            return result, True  # left for the next round, which starts with it
        first = False
        page = _page(list(ids), limit)
        result.add(page)
        # a full page, or one that fired late timers, or one that left timers to pages of
        # their own: more are due
        behind = behind or bool(
            (page.claimed == limit and page.progressed > 0)
            or (page.fired > 0 and page.late_ms > 0)
            or page.alone_ids
        )
    return result, behind


def _next_wait(ends: float, ids: list[str]) -> int | None:
    """How long to wait for the next timer (0: it is already due; None: it does not fall due
    within the pump window and the budget)."""
    window = settings.HOST_TIMER_PUMP_MS
    if not window or time.monotonic() >= ends:
        return None
    next_at = timer_next_fire_at(ids=ids)
    if next_at is None:
        return None
    wait = next_at - clock.now_ms()
    if wait <= 0:
        return 0  # it fell due while this page ran: fire it at once
    # at least PUMP_GATHER_MS: under a dense stream a page fires several timers, not one
    wait = max(wait, PUMP_GATHER_MS)
    if wait > window or time.monotonic() + wait / 1000 >= ends:
        return None
    return wait


def timers_fire_page(*, limit: int = PAGE, groups: TimerGroups | None = None) -> PageResult:
    """Claim and fire due timers of `groups` (default: read now) in group commits (see the
    module docstring): one page of up to `limit` timers of the extensions that share pages,
    then one page per timer of the others, oldest first, until none of theirs is due or one
    made no progress (at most `limit` such pages). Fewer than `limit` claimed in all, with
    progress: no more were due. (The sweep task runs `timers_fire_due`; this is the author
    harness's, the tests' and the bench's.)"""
    groups = timer_groups() if groups is None else groups
    result = _page(list(groups.shared), limit) if groups.shared else PageResult()
    alone = groups.moved_alone(result.alone_ids).alone
    for _ in range(limit):
        if not alone:
            break
        page = _page(list(alone), 1)
        result.add(page)
        if not page.progressed:
            break  # none due (or its frame did not run: no progress to make now)
        alone = tuple(i for i in alone if i not in page.stopped_ids)
    return result


def _page(ids: list[str], limit: int) -> PageResult:
    """One page: up to `limit` due timers of these extensions, one group commit."""
    return page_with_retries(lambda page: _fire_page(page, ids, limit), optimistic=True)


def _fire_page(page: FramePage, ids: list[str], limit: int) -> PageResult:
    now = clock.now_ms()
    claimed = _claim(ids, now, limit)
    result = PageResult(claimed=len(claimed), late_ms=now - claimed[0][5] if claimed else 0)
    page.lock(row[1] for row in claimed)
    if len(claimed) > 1:
        # the groups were read up to a second ago: a deadline raised since past the budget
        # would hold this page's other timers for it (see `TimerGroups`)
        result.alone_ids = _past_budget(page, {row[1] for row in claimed})
    # per extension, the keys fired in this page and not set again since: their rows are
    # deleted in one statement at the end; until then `ctx.timers` treats them as absent
    gone: dict[str, set[str]] = {}
    touched: set[tuple[str, str]] = set()  # keys an earlier frame of this page set or cancelled
    previous = None  # the extension of the frame before: a run of one extension's frames
    for timer_id, extension_id, key, due_at, attempt, _ in claimed:
        if extension_id in page.stopped or extension_id in result.alone_ids:
            result.skipped += 1
            continue
        if (extension_id, key) in touched and not Timer.objects.filter(
            pk=timer_id, due_at=due_at
        ).exists():
            result.skipped += 1  # re-set or cancelled by an earlier frame of this page
            continue
        # crash counts: the first frame of each run of one extension's frames counts for the
        # run (a death anywhere in it is redelivered as the same page, oldest timers first)
        counted, previous = extension_id != previous, extension_id
        outcome, keys, left = _fire_one(
            page,
            extension_id,
            key,
            due_at,
            attempt,
            gone=gone.get(extension_id, set()),
            counted=counted,
        )
        if outcome.status == "ok":
            result.fired += 1
            touched.update((extension_id, k) for k in keys)
            gone[extension_id] = left  # a failed frame's changes were rolled back: not these
        elif outcome.status == "retry":
            result.retried += 1
            delay_ms = math.ceil((outcome.retry_after or 1) * 1000)
            Timer.objects.filter(pk=timer_id, due_at=due_at).update(
                fire_at=clock.now_ms() + delay_ms, retry_attempt=F("retry_attempt") + 1
            )
        elif outcome.status == "stopped":
            result.stopped += 1
            result.stopped_ids.add(extension_id)
        else:
            result.skipped += 1
    ids_by_key = {(row[1], row[2]): row[0] for row in claimed}
    delete_ids = [ids_by_key[ext_id, k] for ext_id, fired in gone.items() for k in fired]
    if delete_ids:
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {_table()} "  # noqa: S608
                f"WHERE id IN ({', '.join(['%s'] * len(delete_ids))})",
                delete_ids,
            )
    return result


def _past_budget(page: FramePage, extension_ids: set[str]) -> set[str]:
    """Those of these extensions whose frames' whole deadline (`hook_deadline`, from the roster
    rows the page holds, as their frames will read it) is past the page's budget."""
    budget = page_budget()
    past = set()
    for extension_id in extension_ids:
        loaded = registry.get(extension_id)
        row = page.rows.get(extension_id)
        if loaded is not None and hook_deadline(row, loaded, boundary="worker") > budget:
            past.add(extension_id)
    return past


def _claim(ids: list[str], now: int, limit: int) -> list[tuple[int, str, str, int, int, int]]:
    """Due timers of these extensions, oldest first, locked `FOR UPDATE SKIP LOCKED` (a plain
    statement: every page of the pump starts with it)."""
    lock = " FOR UPDATE SKIP LOCKED" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, extension_id, key, due_at, retry_attempt, fire_at FROM {_table()} "  # noqa: S608
            f"WHERE fire_at <= %s AND extension_id IN ({', '.join(['%s'] * len(ids))}) "
            f"ORDER BY fire_at, id LIMIT %s{lock}",
            [now, *ids, limit],
        )
        return cursor.fetchall()


def _fire_one(
    page: FramePage,
    extension_id: str,
    key: str,
    due_at: int,
    attempt: int,
    *,
    gone: set[str],
    counted: bool,
) -> tuple[FrameOutcome, set[str], set[str]]:
    """Fire one timer in its frame. Returns the outcome, the keys the hook set or cancelled,
    and the extension's keys fired in the page and not set again (`gone`, this one added)
    as the frame left them."""
    loaded = registry.get(extension_id)
    hook = loaded.definition.hooks.single.get("on_timer") if loaded is not None else None
    keys: set[str] = set()
    left = {*gone, key}

    def call(ctx: HookContext) -> Any:
        if hook is None:
            raise ExtensionStop(missing_handler_reason("timers"))
        frame = current_frame()
        if frame is not None:
            # deleted, then called: the hook sees its timer gone (the row goes with the page)
            frame.scratch[_GONE] = left
        try:
            return hook(ctx, TimerEvent(key=key, due_at=due_at, fired_at=clock.now_ms()))
        finally:
            if frame is not None:
                keys.update(frame.scratch.get(_KEYS, ()))

    outcome = run_frame(
        extension_id=extension_id,
        hook="on_timer",
        call=call,
        boundary="worker",
        page=page,
        retry_attempt=attempt,
        item=f"{key}@{due_at}",
        counted=counted,
    )
    return outcome, keys, left


# --- reads ------------------------------------------------------------------------------------


def timers_summary(*, extension_id: str) -> dict[str, Any]:
    """Pending and due timers of one extension and the age of the oldest due one (the roster
    detail and the admin)."""
    now = clock.now_ms()
    rows = Timer.objects.filter(extension_id=extension_id)
    oldest = rows.filter(fire_at__lte=now).order_by("fire_at").values_list("fire_at", flat=True)
    first_due = oldest.first()
    return {
        "pending": rows.count(),
        "due": rows.filter(fire_at__lte=now).count(),
        "oldest_due_age_ms": None if first_due is None else now - first_due,
        "max_timers": quota_limit(
            overrides=_quotas(extension_id),
            name="max_timers",
        ),
    }


def _quotas(extension_id: str) -> dict[str, int]:
    from extensions_host.models import RosterEntry

    return (
        RosterEntry.objects.filter(pk=extension_id).values_list("quotas", flat=True).first() or {}
    )
