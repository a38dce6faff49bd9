"""Precise timer wakes: one coalesced "next wake" instant shared by every process.

Beat sweeps timers every tick; on top of that, when a committed change moves the earliest due
timer earlier and it lies within the horizon (`HOST_WAKE_HORIZON_SECONDS`, always below the
broker's visibility timeout), exactly one `fire_timers` task is scheduled for that instant with
Celery `eta`. The instant lives in one database row (`Mark "timer_wake"`), claimed by
compare-and-set, so many processes setting timers at once schedule one task, not one each.

A wake task clears the mark when it starts (so changes from then on may claim it again), runs
the sweep, then claims the wake for the next earliest timer. Duplicate or stale wakes are
harmless: the sweep is idempotent. A mark whose instant passed long ago without being cleared
belongs to a lost task and may be replaced.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.db.models import Q

from core import clock
from extensions_host.background.models import Mark, Timer
from extensions_host.background.services.common import eligible_ids, enqueue

WAKE = "timer_wake"
PUMP = "timer_pump"  # the lease of the one sweep that waits for timers to fall due
HELP = "timer_help"  # the lease of the one helper sweep sent when timers fall behind
# a wake instant this far in the past that was never cleared: its task was lost
LOST_WAKE_MS = 10_000


def horizon_ms() -> int:
    return int(settings.HOST_WAKE_HORIZON_SECONDS * 1000)


def timer_next_fire_at(*, ids: list[str] | None = None) -> int | None:
    """The earliest `fire_at` among timers of extensions whose timers may fire (running,
    granted, loaded here): stopped or ungranted extensions do not count for the wake."""
    ids = eligible_ids("timers") if ids is None else ids
    if not ids:
        return None
    table = connection.ops.quote_name(Timer._meta.db_table)
    with connection.cursor() as cursor:  # a plain statement: the pump runs it after each page
        cursor.execute(
            f"SELECT MIN(fire_at) FROM {table} "  # noqa: S608 (our table name)
            f"WHERE extension_id IN ({', '.join(['%s'] * len(ids))})",
            ids,
        )
        return cursor.fetchone()[0]


def timer_wake_request(*, at_ms: int) -> bool:
    """Schedule the one wake task for `at_ms` if it is within the horizon and earlier than the
    wake already scheduled (or none is). Returns True when this call scheduled it."""
    now = clock.now_ms()
    if at_ms - now > horizon_ms():
        return False  # far timers rely on the beat sweep
    target = max(at_ms, now)
    if not _mark_set(WAKE, target, when=Q(value__gt=target) | Q(value__lt=now - LOST_WAKE_MS)):
        return False
    from extensions_host.background import tasks

    enqueue(
        lambda: tasks.fire_timers.apply_async(kwargs={"wake_at": target}, eta=clock.from_ms(target))
    )
    return True


def timer_wake_clear(*, instant: int) -> None:
    """A wake task started: the slot is free again (only if nobody replaced it)."""
    Mark.objects.filter(name=WAKE, value=instant).update(value=None)


def timer_wake_next(*, ids: list[str] | None = None) -> bool:
    """After a sweep: claim the wake for the next earliest timer (of `ids`, the extensions
    whose timers may fire, when the sweep read them)."""
    next_at = timer_next_fire_at(ids=ids)
    return next_at is not None and timer_wake_request(at_ms=next_at)


def timer_wake_for_extension(extension_id: str) -> bool:
    """After a resume (or an admission): the extension's timers count again; wake for the
    earliest of them if it is within the horizon."""
    next_at = timer_next_fire_at(ids=eligible_ids("timers", ids=[extension_id]))
    return next_at is not None and timer_wake_request(at_ms=next_at)


def timer_wake_mark() -> int | None:
    """The instant the coalesced wake is scheduled for (None: no wake pending)."""
    return Mark.objects.filter(name=WAKE).values_list("value", flat=True).first()


def lease_claim(name: str, *, until_ms: int) -> bool:
    """Take the named lease until `until_ms` if it is free or ran out (compare-and-set on one
    `Mark` row): the timer pump (`timer_pump`) and its helper (`timer_help`)."""
    return _mark_set(name, until_ms, when=Q(value__lt=clock.now_ms()))


def _mark_set(name: str, value: int, *, when: Q) -> bool:
    """Compare-and-set of one `Mark` row: set `value` if the row is empty or matches `when`.
    The row is created on first use (or after a flushed database)."""
    claimable = Mark.objects.filter(name=name).filter(Q(value__isnull=True) | when)
    claimed = claimable.update(value=value)
    if not claimed and not Mark.objects.filter(name=name).exists():
        Mark.objects.bulk_create([Mark(name=name, value=None)], ignore_conflicts=True)
        claimed = claimable.update(value=value)
    return bool(claimed)


def lease_release(name: str, *, until_ms: int) -> None:
    """Give the lease back (only if it is still the one taken until `until_ms`)."""
    Mark.objects.filter(name=name, value=until_ms).update(value=None)


def timer_help_request(*, until_ms: int) -> bool:
    """The timers fall behind: send one helper sweep, unless one is already on its way or
    running (the `timer_help` lease, which the helper gives back when it ends)."""
    if not lease_claim(HELP, until_ms=until_ms):
        return False
    from extensions_host.background import tasks

    enqueue(lambda: tasks.fire_timers.delay(help_until=until_ms))
    return True
