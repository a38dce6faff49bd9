"""Per-extension quotas and usage figures (spec 02 §7).

Usage is kept in a few counter rows per extension (`UsageSlot`); a frame adds its delta to the
slot of its own process/thread at commit, so concurrent writers of one extension do not
serialise on one hot row. A write is checked against the committed sum (read once per frame)
plus the frame's own delta, so the overshoot is bounded by what frames running at the same time
write — at most a page of writes each.
"""

from __future__ import annotations

import os
import threading
import zlib
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Count, F, Sum

from extensions_host.models import ExtensionRecord, UsageSlot
from extensions_host.sdk import StateError

if TYPE_CHECKING:
    from extensions_host.runtime.current import Frame

SLOTS = 8
QUOTA_NAMES = ("max_records", "max_bytes", "max_timers", "max_attention")


def quota_limit(*, overrides: dict[str, int], name: str) -> int:
    """The per-extension override when staff set one, else the global `HOST_QUOTAS` value."""
    value = overrides.get(name) if isinstance(overrides, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return int(settings.HOST_QUOTAS[name])


def usage_totals(*, extension_id: str) -> tuple[int, int]:
    """(records, bytes) as committed."""
    totals = UsageSlot.objects.filter(extension_id=extension_id).aggregate(
        records=Sum("records"), bytes=Sum("bytes")
    )
    return int(totals["records"] or 0), int(totals["bytes"] or 0)


def usage_charge(*, frame: Frame, records: int, size: int) -> None:
    """Check a write against the quotas, then add it to the frame's delta."""
    if frame.usage_base is None:
        frame.usage_base = usage_totals(extension_id=frame.extension_id)
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
    """Add the frame's delta to its slot, inside the frame's transaction."""
    if not frame.delta_records and not frame.delta_bytes:
        return
    slot = _slot()
    updated = UsageSlot.objects.filter(extension_id=frame.extension_id, slot=slot).update(
        records=F("records") + frame.delta_records, bytes=F("bytes") + frame.delta_bytes
    )
    if not updated:
        UsageSlot.objects.bulk_create(
            [UsageSlot(extension_id=frame.extension_id, slot=slot)], ignore_conflicts=True
        )
        UsageSlot.objects.filter(extension_id=frame.extension_id, slot=slot).update(
            records=F("records") + frame.delta_records, bytes=F("bytes") + frame.delta_bytes
        )
    frame.delta_records = frame.delta_bytes = 0


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
