"""Reads of the artifact store: effective record state, the active projection, debug rows and
follow-up summaries (spec 06, "Reads" and "Projection").

A record's *effective* status follows the seed's replay of the event log, computed here from
the mirrored record columns plus the two things that can change after the fact:
- a record of a stale request attempt, or of an operation whose projection is superseded, is
  superseded (both are monotonic, so this is final too);
- a `clear` hides earlier records of its output/channel(/key) only while the operation that
  issued it is not superseded and its attempt is still current: a discarded attempt's clear is
  undone with the rest of its effects.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.functions import Collate

from artifacts.ephemeral import ephemeral_get_many
from artifacts.fingerprints import UNDECODABLE, payload_decode
from artifacts.models import (
    ID_MAX,
    OPEN_FOLLOWUP,
    Event,
    EventKind,
    FollowupStatus,
    Operation,
    OperationStatus,
    ProjectionStatus,
    Record,
    Save,
    Strategy,
    World,
)
from artifacts.types import FollowupSummary
from conversations.selectors import conversation_contents_readable
from core.auth import Principal
from core.errors import HostError

logger = logging.getLogger(__name__)

MSG_OPERATION_NOT_FOUND = "Artifact operation not found"
# A stored payload its content type cannot decode (a JSON payload that does not parse: only
# corruption, which `integrity_check` reports in the same words).
# Characters of an undecodable payload's raw text a debug row carries: enough to see what went
# wrong, while the payload itself may be 4 MiB.
UNDECODABLE_TEXT_MAX = 2000

PENDING, ACTIVE, SUPERSEDED, CLEARED = "pending", "active", "superseded", "cleared"

# Operations that can still change a world's projection (running, or an open follow-up).
_OPEN_OPERATIONS = Q(status=OperationStatus.RUNNING) | Q(
    status=OperationStatus.CORE_COMMITTED, followup_status__in=sorted(OPEN_FOLLOWUP)
)


def record_superseded(record: Record, operation: Operation | None) -> bool:
    """Whether `record` is superseded, the final part of its effective status
    (`WorldView.status`): flagged so, or its operation gone or with its projection superseded,
    or a newer attempt of its request begun. An attempt its operation does not know is not a
    newer one (no record is written without its attempt registered)."""
    if record.superseded or operation is None:
        return True
    if operation.projection_status == ProjectionStatus.SUPERSEDED:
        return True
    current = operation.request_attempts.get(record.request_id)
    return current is not None and current != record.request_attempt


class WorldView:
    """A world's operations, records and clears, with the seed's effective record status.

    Mutations hold one of these while they work and change its objects in place, so later
    steps of the same call see earlier ones (the seed re-reads its files between steps).
    """

    def __init__(
        self, operations: dict[str, Operation], records: list[Record], clears: list[Event]
    ) -> None:
        self.operations = operations
        self.records = records
        self._clears: dict[tuple[str, str], list[Event]] = defaultdict(list)
        for clear in clears:
            self._clears[(clear.output, clear.channel)].append(clear)

    def add_clear(self, clear: Event) -> None:
        self._clears[(clear.output, clear.channel)].append(clear)

    def operation_of(self, record: Record) -> Operation:
        return self.operations[record.operation_id]

    def _clear_counts(self, clear: Event) -> bool:
        issuer = self.operations.get(clear.operation_id)
        if issuer is None or issuer.projection_status == ProjectionStatus.SUPERSEDED:
            return False
        current = issuer.request_attempts.get(clear.request_id)
        return current is None or current == clear.request_attempt

    def _cleared(self, record: Record) -> bool:
        return any(
            clear.sequence > record.sequence
            and (clear.key == "" or clear.key == record.key)
            and self._clear_counts(clear)
            for clear in self._clears.get((record.output, record.channel), ())
        )

    def status(self, record: Record) -> str:
        if record_superseded(record, self.operations.get(record.operation_id)):
            return SUPERSEDED
        if self._cleared(record):
            return CLEARED
        return ACTIVE if record.activated else PENDING

    @staticmethod
    def head(record: Record) -> str | None:
        return record.bound_head or None

    def active(self) -> list[Record]:
        return [record for record in self.records if self.status(record) == ACTIVE]


def world_view(
    world_id: str,
    *,
    include_superseded: bool = False,
    with_open_operations: bool = False,
    operation_id: str | None = None,
    records: Iterable[Record] | None = None,
) -> WorldView:
    """Load what the effective status of a world's records depends on.

    By default only records that can still be effective (not flagged superseded, operation
    projection active) are loaded, payloads deferred; `include_superseded` loads every record
    (debug). `with_open_operations` adds the world's open operations, which the
    begin/reconcile rules act on even when they have no records.
    """
    if records is None:
        query = Record.objects.filter(world_id=world_id).defer("payload")
        if operation_id is not None:
            query = query.filter(operation_id=operation_id)
        if not include_superseded:
            query = query.filter(
                superseded=False, operation__projection_status=ProjectionStatus.ACTIVE
            )
        records = query.order_by("sequence")
    loaded = list(records)
    clears: list[Event] = []
    if loaded:
        clears = list(
            Event.objects.filter(
                world_id=world_id, kind=EventKind.CLEAR, sequence__gt=loaded[0].sequence
            ).order_by("sequence")
        )
    wanted = {r.operation_id for r in loaded} | {c.operation_id for c in clears}
    condition = Q(pk__in=wanted)
    if with_open_operations:
        condition |= Q(world_id=world_id) & _OPEN_OPERATIONS
    operations = (
        {op.pk: op for op in Operation.objects.filter(condition)}
        if wanted or with_open_operations
        else {}
    )
    return WorldView(operations, loaded, clears)


def record_statuses(records: Iterable[Record]) -> dict[int, str]:
    """The effective status (`WorldView.status`) of records of any worlds, by pk: the admin's
    record list. Two queries however many records and worlds: the clears after each world's
    oldest listed record, and the operations of the records and of those clears."""
    by_world: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        by_world[record.world_id].append(record)
    if not by_world:
        return {}
    after = Q()
    for world_id, listed in by_world.items():
        after |= Q(world_id=world_id, sequence__gt=min(r.sequence for r in listed))
    clears: dict[str, list[Event]] = defaultdict(list)
    for clear in Event.objects.filter(after, kind=EventKind.CLEAR).order_by("sequence"):
        clears[clear.world_id].append(clear)
    wanted = {r.operation_id for listed in by_world.values() for r in listed}
    wanted |= {c.operation_id for listed in clears.values() for c in listed}
    operations = {op.pk: op for op in Operation.objects.filter(pk__in=wanted)}
    statuses: dict[int, str] = {}
    for world_id, listed in by_world.items():
        view = WorldView(operations, listed, clears[world_id])
        statuses.update((record.pk, view.status(record)) for record in listed)
    return statuses


def _select(view: WorldView, active: list[Record]) -> list[Record]:
    """Every append/transient record, the latest replace per channel, the latest upsert per
    (channel, key); in sequence order."""
    chosen: list[Record] = []
    replace: dict[str, Record] = {}
    upsert: dict[tuple[str, str], Record] = {}
    for record in sorted(active, key=lambda r: r.sequence):
        if record.strategy in (Strategy.APPEND, Strategy.TRANSIENT):
            chosen.append(record)
        elif record.strategy == Strategy.REPLACE:
            replace[record.channel] = record
        elif record.strategy == Strategy.UPSERT:
            upsert[(record.channel, record.key)] = record
    return sorted([*chosen, *replace.values(), *upsert.values()], key=lambda r: r.sequence)


def _projectable(view: WorldView, record: Record, channel: str | None) -> bool:
    if record.strategy == Strategy.HIDDEN:
        return False
    if channel is not None and record.channel != channel:
        return False
    operation = view.operation_of(record)
    if record.strategy == Strategy.TRANSIENT and not operation.is_live:
        return False
    if record.save_mode == Save.OPERATION and operation.status == OperationStatus.COMPLETED:
        return False
    return not (record.save_mode == Save.COMMIT and not record.bound_head)


@dataclass
class _Payloads:
    """A batch of payloads read for some records: the decoded ones by record pk, and the raw
    text of those that do not decode (corruption) by record pk. A record in neither has no
    payload to read (an evicted `save=none` one)."""

    decoded: dict[int, Any] = field(default_factory=dict)
    undecodable: dict[int, str] = field(default_factory=dict)


def _payloads(records: list[Record]) -> _Payloads:
    """The payloads of `records`: durable ones from the database, ephemeral ones from the
    cache (absent when evicted). A payload that does not decode is set apart, never raised:
    one corrupt row must not take down every read of its world (the projection skips it, the
    debug view shows it, `integrity_check` reports it)."""
    durable = [r.pk for r in records if r.save_mode != Save.NONE]
    texts: dict[int, str] = {}
    if durable:
        rows = Record.objects.filter(pk__in=durable).values_list("pk", "payload")
        # a durable record's payload is never null (artifact_record_ephemeral_payload_not_stored)
        texts.update(cast("Iterable[tuple[int, str]]", rows))
    texts.update(ephemeral_get_many(r.pk for r in records if r.save_mode == Save.NONE))
    by_pk = {r.pk: r for r in records}
    found = _Payloads()
    for pk, text in texts.items():
        try:
            found.decoded[pk] = payload_decode(text, by_pk[pk].content_type)
        # JSONDecodeError is a ValueError; a corrupt run of "[[[[…" nests past the decoder
        except UNDECODABLE:
            found.undecodable[pk] = text
    return found


def projection_read(*, world_id: str, channel: str | None = None) -> list[dict[str, Any]]:
    """The active projection of a world (`read_active_projection`), in sequence order.

    Selection happens before ephemeral payloads are looked up: a `save=none` panel whose
    payload is gone leaves its slot empty rather than bringing back the one it replaced.
    """
    view = world_view(world_id)
    active = [r for r in view.active() if _projectable(view, r, channel)]
    selected = _select(view, active)
    payloads = _payloads(selected)
    items = []
    for record in selected:
        if record.pk in payloads.undecodable:
            # corruption: leave its slot empty, as for an evicted payload, and say so (the
            # record stays visible, marked, in the admin's debug view)
            logger.warning(
                "artifact payload does not decode, left out of the projection: "
                "world=%s sequence=%s record=%s",
                record.world_id,
                record.sequence,
                record.record_id,
            )
            continue
        if record.pk not in payloads.decoded:
            continue
        items.append(
            {
                **_record_fields(record),
                "payload": payloads.decoded[record.pk],
                "head": record.bound_head or record.parent_head,
            }
        )
    return items


def _record_fields(record: Record) -> dict[str, Any]:
    """What a projection item and a debug row both say of a record."""
    return {
        "record_id": record.record_id,
        "world_id": record.world_id,
        "operation_id": record.operation_id,
        "preset_id": record.preset_id,
        "preset_revision": record.preset_revision,
        "preset_scripts_enabled": record.preset_scripts_enabled,
        "request_id": record.request_id,
        "request_attempt": record.request_attempt,
        "output": record.output,
        "channel": record.channel,
        "key": record.key or None,
        "content_type": record.content_type,
        "renderer": record.renderer or None,
        "renderer_revision": record.renderer_revision or None,
        "strategy": record.strategy,
        "save": record.save_mode,
        "sequence": record.sequence,
    }


def debug_records(*, world_id: str, operation_id: str | None = None) -> QuerySet[Record]:
    """A world's records (of one operation), payloads deferred: the caller orders and bounds
    them (the API by pages, the admin by its newest)."""
    query = Record.objects.filter(world_id=world_id).defer("payload")
    if operation_id is not None:
        query = query.filter(operation_id=operation_id)
    return query


def _raw_text(text: str) -> str:
    """The start of an undecodable payload's text, cut at `UNDECODABLE_TEXT_MAX` characters."""
    if len(text) > UNDECODABLE_TEXT_MAX:
        return text[:UNDECODABLE_TEXT_MAX] + "…"
    return text


def debug_rows(*, world_id: str, records: list[Record]) -> list[dict[str, Any]]:
    """`read_debug`: each record with its effective status, in the order given.

    A payload that does not decode is `payload: None` with `payload_undecodable` set and the
    start of its raw text in `payload_raw` (None otherwise): the debug read is where staff
    diagnose corruption, so it shows the corrupt record rather than failing on it.
    """
    # the view reads the clears after its first record: give it the oldest first
    view = world_view(world_id, records=sorted(records, key=lambda r: r.sequence))
    payloads = _payloads(records)
    rows = []
    for record in records:
        raw = payloads.undecodable.get(record.pk)
        rows.append(
            {
                **_record_fields(record),
                "parent_head": record.parent_head,
                "new_head": view.head(record),
                "invalidation": record.invalidation,
                "tool_call_id": record.tool_call_id,
                "payload_bytes": record.payload_bytes,
                "payload": payloads.decoded.get(record.pk),
                "payload_available": record.pk in payloads.decoded or raw is not None,
                "payload_undecodable": raw is not None,
                "payload_raw": None if raw is None else _raw_text(raw),
                "payload_fingerprint": record.payload_fingerprint,
                "status": view.status(record),
            }
        )
    return rows


def operation_states(
    *, world_id: str, operation_ids: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """`operation_state` of the world's operations (of `operation_ids` only, if given), in the
    order they began."""
    operations = Operation.objects.filter(world_id=world_id)
    if operation_ids is not None:
        operations = operations.filter(pk__in=list(operation_ids))
    return [operation_state(op) for op in operations.order_by("created_at", "pk")]


def debug_read(
    *,
    world_id: str,
    operation_id: str | None = None,
    limit: int = 200,
    operations_limit: int = 100,
) -> dict[str, Any]:
    """The admin's debug view: the newest `limit` records (ascending) with their effective
    status, and the newest `operations_limit` operations of the world (of `operation_id`
    only, if given), newest first. `truncated` and `operations_truncated` say more exist:
    the page stays the same size however long the world has lived."""
    newest = list(
        debug_records(world_id=world_id, operation_id=operation_id).order_by("-sequence")[
            : limit + 1
        ]
    )
    records = sorted(newest[:limit], key=lambda r: r.sequence)
    operations = Operation.objects.filter(world_id=world_id)
    if operation_id is not None:
        operations = operations.filter(pk=operation_id)
    # newest first: the operations a diagnosis is usually about
    listed = list(operations.order_by("-created_at", "-pk")[: operations_limit + 1])
    return {
        "world_id": world_id,
        "records": debug_rows(world_id=world_id, records=records),
        "truncated": len(newest) > limit,
        "operations": [operation_state(op) for op in listed[:operations_limit]],
        "operations_truncated": len(listed) > operations_limit,
    }


def operation_state(operation: Operation) -> dict[str, Any]:
    """The full stored state of an operation."""
    return {
        **operation.context,
        "status": operation.status,
        "followup_status": operation.followup_status,
        "projection_status": operation.projection_status,
        "head": operation.head or None,
        "message": operation.message or None,
        "completed_requests": list(operation.completed_requests),
        "request_attempts": dict(operation.request_attempts),
    }


def followup_summary(operation: Operation) -> FollowupSummary:
    return FollowupSummary(
        operation_id=operation.pk,
        status=operation.followup_status,
        completed_requests=list(operation.completed_requests),
        core_committed=operation.core_committed,
        message=operation.message or None,
        head=operation.head or None,
    )


def operation_get(*, operation_id: str) -> Operation | None:
    return Operation.objects.filter(pk=operation_id).first()


def followup_read(*, principal: Principal, operation_id: str) -> FollowupSummary:
    """`read_followup`: the follow-up summary of an operation. The runtime reads any; anyone
    else needs read access to the operation's conversation (its world): an unreadable world
    hides its operations entirely, with the 404 of a missing one."""
    # an id that cannot exist is simply not found (a NUL would be a driver error on PostgreSQL)
    usable = len(operation_id) <= ID_MAX and "\x00" not in operation_id
    operation = operation_get(operation_id=operation_id) if usable else None
    if operation is None or not conversation_contents_readable(
        principal=principal, conversation_id=operation.world_id
    ):
        raise HostError("store", "not_found", MSG_OPERATION_NOT_FOUND)
    return followup_summary(operation)


def followup_operations(*, world_id: str) -> QuerySet[Operation]:
    """`read_followup_summaries`: every operation of the world worth reporting (not failed at
    the core, not completed with nothing to show); the caller orders and pages them by
    `position`, the operation id in code-point order (not the seed's `localeCompare`) whatever
    the database's collation: PostgreSQL's "C" compares UTF-8 bytes, as SQLite's BINARY does."""
    collation = "C" if connection.vendor == "postgresql" else "BINARY"
    return (
        Operation.objects.filter(world_id=world_id)
        .annotate(position=Collate("id", collation))
        .exclude(status=OperationStatus.CORE_FAILED)
        .exclude(
            status=OperationStatus.COMPLETED,
            followup_status=FollowupStatus.COMPLETED,
            completed_requests=[],
        )
    )


def artifacts_version(*, world_id: str) -> int:
    """A counter that grows with every artifact change, so a live view (the inspector) can poll
    it cheaply to know when to re-read the projection: the world's highest sequence (records
    and events) plus its `state_version` (operation state written without an event). Both only
    grow, so their sum moves whenever either does. 0 for a world without artifacts."""
    newest = [
        Record.objects.filter(world_id=world_id)
        .order_by("-sequence")
        .values_list("sequence", flat=True)[:1],
        Event.objects.filter(world_id=world_id)
        .order_by("-sequence")
        .values_list("sequence", flat=True)[:1],
    ]
    sequence = max((value for query in newest for value in query), default=0)
    state = World.objects.filter(pk=world_id).values_list("state_version", flat=True).first()
    return sequence + (state or 0)
