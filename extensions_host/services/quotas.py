"""Per-extension quotas and usage figures (spec 02 §7).

Usage is kept in a few counter rows per extension (`UsageSlot`); a frame adds its delta to the
slot of its own process/thread at commit, so concurrent writers of one extension do not
serialise on one hot row. A write is checked against the committed sum (read once per frame,
or once per page and extension in a group commit) plus the deltas not committed yet, so the
overshoot is bounded by what frames running at the same time write — at most a page of writes
each. In a page, a frame's delta joins the page's on success and the page adds them to the
slots in one statement per extension just before it commits (`PageUsage`).

`max_bytes` counts record values only. Documents belong to conversations: a conversation's
deletion (retention, staff) removes them and a fork copies them, outside any frame of the
extension, so per-extension deltas would drift; each document is bounded by its own declared
`max_bytes` (≤ 1 MiB) instead.
"""

from __future__ import annotations

import os
import threading
import zlib
from typing import TYPE_CHECKING, TypeGuard

from django.conf import settings
from django.db import connection
from django.db.models import Count, Sum

from extensions_host.models import ExtensionRecord, UsageSlot
from extensions_host.sdk import StateError

if TYPE_CHECKING:
    from extensions_host.runtime.current import Frame

SLOTS = 8
QUOTA_NAMES = ("max_records", "max_bytes", "max_timers", "max_attention")

MSG_QUOTAS_NOT_OBJECT = (
    'Quotas must be a JSON object of quota names to limits, e.g. {"max_records": 1000}.'
)
MSG_QUOTA_UNKNOWN = "{name} is not a quota; the quotas are " + ", ".join(QUOTA_NAMES) + "."
MSG_QUOTA_NOT_COUNT = "Quota {name} must be a non-negative integer."
QUOTA_NAME_SHOWN = 64  # an unknown name is cut to this in its message


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def quotas_problems(raw: object) -> list[str]:
    """What is wrong with per-extension quota overrides as staff entered them (one message per
    bad key; empty when valid). None or an empty value means no overrides."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        return [MSG_QUOTAS_NOT_OBJECT]
    problems = []
    for name, value in raw.items():
        if name not in QUOTA_NAMES:
            problems.append(MSG_QUOTA_UNKNOWN.format(name=repr(str(name)[:QUOTA_NAME_SHOWN])))
        elif not _is_count(value):
            problems.append(MSG_QUOTA_NOT_COUNT.format(name=name))
    return problems


def quotas_parsed(raw: object) -> dict[str, int]:
    """The valid overrides of whatever is stored in `RosterEntry.quotas`: a dict of known quota
    names to non-negative integers; anything else (not an object, unknown names, bad values) is
    ignored, so a bad stored value never breaks a frame (`quotas_problems` reports it)."""
    if not isinstance(raw, dict):
        return {}
    return {name: value for name, value in raw.items() if name in QUOTA_NAMES and _is_count(value)}


def quota_limit(*, overrides: dict[str, int], name: str) -> int:
    """The per-extension override when staff set one, else the global `HOST_QUOTAS` value."""
    value = overrides.get(name) if isinstance(overrides, dict) else None
    if _is_count(value):
        return value
    return int(settings.HOST_QUOTAS[name])


def usage_totals(*, extension_id: str) -> tuple[int, int]:
    """(records, bytes) as committed."""
    totals = UsageSlot.objects.filter(extension_id=extension_id).aggregate(
        records=Sum("records"), bytes=Sum("bytes")
    )
    return int(totals["records"] or 0), int(totals["bytes"] or 0)


class PageUsage:
    """The usage of the frames of one page (group commit): the committed totals, read once per
    extension, and the deltas of the page's frames that succeeded, flushed at the page's end."""

    def __init__(self) -> None:
        self._base: dict[str, tuple[int, int]] = {}
        self._delta: dict[str, list[int]] = {}

    def seed(self, extension_id: str, totals: tuple[int, int] | None) -> None:
        """The committed totals, read with the roster row (None: read at the first write)."""
        if totals is not None:
            self._base.setdefault(extension_id, totals)

    def base(self, extension_id: str) -> tuple[int, int]:
        """Committed totals plus the deltas of this page's earlier frames."""
        if extension_id not in self._base:
            self._base[extension_id] = usage_totals(extension_id=extension_id)
        records, size = self._base[extension_id]
        delta = self._delta.get(extension_id, [0, 0])
        return records + delta[0], size + delta[1]

    def add(self, frame: Frame) -> None:
        """A frame of the page succeeded: its delta joins the page's."""
        if frame.delta_records or frame.delta_bytes:
            delta = self._delta.setdefault(frame.extension_id, [0, 0])
            delta[0] += frame.delta_records
            delta[1] += frame.delta_bytes
        frame.delta_records = frame.delta_bytes = 0

    def flush(self) -> None:
        for extension_id, (records, size) in self._delta.items():
            usage_add(extension_id=extension_id, records=records, size=size)
        self._delta.clear()


def usage_charge(*, frame: Frame, records: int, size: int) -> None:
    """Check a write against the quotas, then add it to the frame's delta."""
    if frame.usage_base is None:
        page = frame.page
        frame.usage_base = (
            page.usage.base(frame.extension_id)
            if page is not None
            else usage_totals(extension_id=frame.extension_id)
        )
    base_records, base_bytes = frame.usage_base
    if records > 0:
        limit = quota_limit(overrides=frame.quotas, name="max_records")
        if base_records + frame.delta_records + records > limit:
            raise StateError("bound", f"Extension quota max_records ({limit}) is exceeded")
    if size > 0:
        limit = quota_limit(overrides=frame.quotas, name="max_bytes")
        if base_bytes + frame.delta_bytes + size > limit:
            raise StateError("bound", f"Extension quota max_bytes ({limit}) is exceeded")
    frame.delta_records += records
    frame.delta_bytes += size


def usage_flush(*, frame: Frame) -> None:
    """Add the frame's delta to its slot, inside the frame's transaction (in a page: to the
    page's delta, added at the page's end)."""
    if frame.page is not None:
        frame.page.usage.add(frame)
        return
    usage_add(extension_id=frame.extension_id, records=frame.delta_records, size=frame.delta_bytes)
    frame.delta_records = frame.delta_bytes = 0


def usage_add(*, extension_id: str, records: int, size: int) -> None:
    """Add a delta to this process/thread's slot (created on first use)."""
    if not records and not size:
        return
    slot = _slot()
    table = connection.ops.quote_name(UsageSlot._meta.db_table)
    sql = (
        f"UPDATE {table} SET records = records + %s, bytes = bytes + %s "  # noqa: S608
        "WHERE extension_id = %s AND slot = %s"
    )
    params: list[int | str] = [records, size, extension_id, slot]
    with connection.cursor() as cursor:  # a plain statement: most writing frames end with it
        cursor.execute(sql, params)
        if cursor.rowcount:
            return
    UsageSlot.objects.bulk_create(
        [UsageSlot(extension_id=extension_id, slot=slot)], ignore_conflicts=True
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def usage_slots_ensure(*, extension_id: str) -> None:
    UsageSlot.objects.bulk_create(
        [UsageSlot(extension_id=extension_id, slot=slot) for slot in range(SLOTS)],
        ignore_conflicts=True,
    )


def usage_recount(*, extension_id: str) -> tuple[int, int]:
    """Recompute the usage exactly from the records (after a migration; an admin repair)."""
    totals = ExtensionRecord.objects.filter(extension_id=extension_id).aggregate(
        records=Count("id"), bytes=Sum("size_bytes")
    )
    records, size = int(totals["records"] or 0), int(totals["bytes"] or 0)
    UsageSlot.objects.filter(extension_id=extension_id).delete()
    UsageSlot.objects.bulk_create(
        [
            UsageSlot(
                extension_id=extension_id,
                slot=slot,
                records=records if slot == 0 else 0,
                bytes=size if slot == 0 else 0,
            )
            for slot in range(SLOTS)
        ]
    )
    return records, size


def _slot() -> int:
    # one slot per process and thread: frames of one worker never contend with each other
    return zlib.crc32(f"{os.getpid()}:{threading.get_ident()}".encode()) % SLOTS
