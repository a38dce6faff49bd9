"""Pieces every background service shares: the coalesced delivery kicks, enqueueing after
commit, pages retried after a stop that could not be written. Which extensions may run a
capability here is the roster's one rule (`services.roster.eligible_ids`, re-exported, and
`eligible_deadlines`, the same with each row's staff deadline override)."""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import Any, ParamSpec, TypeVar

from django.db import connection, transaction

from core import clock
from core.errors import HostError
from extensions_host.background.models import (
    JobTrigger,
    Kick,
    LifecycleDelivery,
    SettledCursor,
    Timer,
)
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import FramePage, run_page
from extensions_host.runtime.deadlines import MAX_DEADLINE_SECONDS, default_deadline
from extensions_host.services.roster import eligible_deadlines as eligible_deadlines
from extensions_host.services.roster import eligible_ids as eligible_ids  # the one rule

T = TypeVar("T")
P = ParamSpec("P")

logger = logging.getLogger("extensions_host.background")

# A kick whose task has not cleared it within this time is treated as lost (the task was
# dropped or its worker died before it started): the next trigger enqueues again.
KICK_STALE_MS = 30_000

CHANNEL_SETTLED = "settled"
CHANNEL_LIFECYCLE = "lifecycle"
CHANNEL_FANOUT = "fanout"
FANOUT_KEY = "*"


def enqueue(send: Callable[[], Any]) -> None:
    """Send a task after the current transaction commits (at once outside one). A broker
    failure is logged, never raised into the committed operation: beat is the safety net."""
    transaction.on_commit(send, robust=True)


def enqueue_call(send: Callable[P, object], /, *args: P.args, **kwargs: P.kwargs) -> None:
    """`enqueue` of `send(*args, **kwargs)` with the arguments bound now: a loop enqueues each
    item, not the one its variable holds when the transaction commits. (Not a
    `functools.partial`: Django's robust on-commit logs a failed callback's `__qualname__`,
    which a partial lacks.)"""
    enqueue(lambda: send(*args, **kwargs))


def kick_ensure(channel: str, extension_ids: Iterable[str]) -> None:
    Kick.objects.bulk_create(
        [Kick(channel=channel, extension_id=ext_id) for ext_id in extension_ids],
        ignore_conflicts=True,
    )


def kick(
    channel: str, extension_ids: Iterable[str] | None = None, *, running_with: str | None = None
) -> list[str]:
    """Flip the kick flag of these consumers (all of the channel's when None; only those of
    running extensions with the grant `running_with` admitted, when given); returns the ones
    whose flag this call flipped — exactly those need a task enqueued."""
    now = clock.now_ms()
    table = connection.ops.quote_name(Kick._meta.db_table)
    params: list[Any] = [True, now, channel, False, now - KICK_STALE_MS]
    where = ""
    if extension_ids is not None:
        ids = list(extension_ids)
        if not ids:
            return []
        where += f" AND extension_id IN ({', '.join(['%s'] * len(ids))})"
        params.extend(ids)
    if running_with is not None:
        # grants gate everything (spec 02 §2): a consumer whose grant was withdrawn is not kicked
        roster = connection.ops.quote_name(RosterEntry._meta.db_table)
        if connection.vendor == "postgresql":
            granted = f"SELECT id FROM {roster} WHERE status = %s AND admitted_grants @> %s::jsonb"  # noqa: S608
            params.extend([ExtensionStatus.RUNNING.value, json.dumps([running_with])])
        else:  # SQLite keeps JSON as text: match the list's elements with json_each
            granted = (
                f"SELECT r.id FROM {roster} r, json_each(r.admitted_grants) g "  # noqa: S608
                "WHERE r.status = %s AND g.value = %s"
            )
            params.extend([ExtensionStatus.RUNNING.value, running_with])
        where += f" AND extension_id IN ({granted})"
    # One statement: rows already pending are not touched (and not locked), so a burst of
    # triggers (one per settle) costs one cheap UPDATE each and enqueues one task per consumer.
    sql = (
        f"UPDATE {table} SET pending = %s, kicked_at = %s "  # noqa: S608 (our table names)
        f"WHERE channel = %s AND (pending = %s OR kicked_at < %s){where} "
        "RETURNING extension_id"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return sorted(row[0] for row in cursor.fetchall())


def kick_clear(channel: str, extension_id: str) -> None:
    """Called by a delivery task before it reads: a change after this point kicks again."""
    table = connection.ops.quote_name(Kick._meta.db_table)
    with connection.cursor() as cursor:  # a plain statement: every delivery task runs it
        cursor.execute(
            f"UPDATE {table} SET pending = %s "  # noqa: S608 (our table name)
            "WHERE channel = %s AND extension_id = %s AND pending = %s",
            [False, channel, extension_id, True],
        )


PAGE_ATTEMPTS = 3
# A background page starts frames while their whole deadline ends within this many worker
# default deadlines: a page of default-deadline frames takes frames for its first half
PAGE_BUDGET_DEADLINES = 2


def retries_forgotten(extension_id: str) -> None:
    """A fresh start (a resume or a new revision, inside its transaction): every pending item
    of the extension gets its whole `Retry` budget again. An item that used it up stopped the
    extension; kept, it would stop it again at its first `Retry` after the resume (spec 02 §7:
    auto-resume exists for upstreams that come back)."""
    for items in (
        Timer.objects.filter(extension_id=extension_id),
        SettledCursor.objects.filter(extension_id=extension_id),
        LifecycleDelivery.objects.filter(extension_id=extension_id),
        JobTrigger.objects.filter(job__extension_id=extension_id),
    ):
        items.filter(retry_attempt__gt=0).update(retry_attempt=0)


def page_budget() -> float:
    """The time limit of a background page (timers, settled, lifecycle, jobs): twice the worker
    default deadline, at most 300 s. It bounds when frames start, never what they may take:
    every frame has its own whole deadline (`hook_deadline`), one that would not end within the
    budget is left for the next page, and the first frame of a page starts whatever its
    deadline, so a page runs at most 300 s (the longest deadline). Such a frame holds nobody
    else's work: a timer whose deadline is past the budget fires in a page of its own
    (`timers.TimerGroups`), and settled, lifecycle and job pages are one extension's each."""
    return min(PAGE_BUDGET_DEADLINES * default_deadline("worker"), MAX_DEADLINE_SECONDS)


def page_with_retries(fn: Callable[[FramePage], T], *, optimistic: bool = False) -> T:
    """`run_page` (group commit, retried after host-transient errors), and again when a stop
    written into the page could not be written (`store/unavailable`). The page's time limit is
    `page_budget()`; its database limits are the worker default deadline's (a frame with another
    deadline sets its own).

    Two pages that both hold a failing extension's roster row `FOR SHARE` and both try to stop
    it deadlock; PostgreSQL aborts one, whose stop then reports `store/unavailable`. The page
    was rolled back whole, so running it again is safe (the other page's stop has committed by
    then, and the extension is no longer eligible).
    """
    for attempt in range(PAGE_ATTEMPTS):
        try:
            return run_page(
                fn,
                boundary="worker",
                time_limit_s=page_budget(),
                db_limit_s=default_deadline("worker"),
                optimistic=optimistic,
            )
        except HostError as exc:
            if exc.cause != "unavailable" or attempt + 1 == PAGE_ATTEMPTS:
                raise
            logger.warning("background page retried after %s", exc.message)
            time.sleep(0.05 * (attempt + 1) * (0.5 + random.random()))  # noqa: S311
    raise AssertionError("unreachable")
