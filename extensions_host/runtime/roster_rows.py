"""The roster rows frames read: one plain statement per frame (or per page) that takes the rows
`FOR SHARE`, sums each extension's committed usage and, on PostgreSQL, sets the database limits."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import connection

from extensions_host.models import RosterEntry, UsageSlot
from extensions_host.runtime import deadlines


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
    return next(iter(lock_roster_rows([extension_id], lock=False, usage=False)), None)


def lock_roster_row(extension_id: str, *, limit_s: float | None = None) -> RosterView | None:
    return next(iter(lock_roster_rows([extension_id], limit_s=limit_s)), None)


def lock_roster_rows(
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
