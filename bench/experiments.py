"""Proposed fixes, measured in the bench only: `BENCH_PATCH=<name>[,<name>]` makes the bench
processes (gunicorn workers) replace one host function by its proposed version at start, so the
runner can measure a finding's fix beside the code as it is. Nothing outside `bench/` changes;
the lead applies a fix to the real module after reading the figures (bench/README.md)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def _record_put_of_self() -> None:
    """Finding 1: lock only the record row (no join to the roster, so no roster `FOR UPDATE`)."""
    from extensions_host.models import ExtensionRecord
    from extensions_host.services import records

    def record_put(*, frame: Any, collection: str, spec: Any, value: Any) -> None:
        key, index, encoded, size = records.encode_record(spec, collection, value)
        found = list(
            ExtensionRecord.objects.select_for_update(of=("self",))
            .filter(extension_id=frame.extension_id, collection=collection, key=key)
            .order_by()
            .values_list("pk", "size_bytes")[:1]
        )
        if not found:
            records.usage_charge(frame=frame, records=1, size=size)
            ExtensionRecord.objects.create(
                extension_id=frame.extension_id,
                collection=collection,
                key=key,
                index=index,
                value=encoded,
                size_bytes=size,
            )
            return
        pk, old_size = found[0]
        records.usage_charge(frame=frame, records=0, size=size - old_size)
        ExtensionRecord.objects.filter(pk=pk).update(index=index, value=encoded, size_bytes=size)

    records.record_put = record_put


PATCHES: dict[str, Callable[[], None]] = {"record-put-of-self": _record_put_of_self}


def apply_from_env() -> list[str]:
    """Apply the patches named in `BENCH_PATCH` (unknown names are an error)."""
    names = [n.strip() for n in os.environ.get("BENCH_PATCH", "").split(",") if n.strip()]
    for name in names:
        if name not in PATCHES:
            raise RuntimeError(f"BENCH_PATCH: unknown patch {name!r} (known: {sorted(PATCHES)})")
        PATCHES[name]()
    return names
