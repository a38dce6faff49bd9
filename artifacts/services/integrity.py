"""Integrity check of the artifact store: `manage.py verify_artifacts` and the admin action.

Recomputes every fingerprint (a record's payload, record and call fingerprints; the call
fingerprint of each clear/ignored_call event) and running total, checks each world's sequence
(gap-free from 1, no number used twice), each record's operation identity, each event's fields
(those its kind requires and forbids, as the seed's `assertEvent`), operation and record, each
operation's state, and that the record columns mirroring the event log agree with a replay of
it. Each problem names its world and, where there is one, its sequence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from artifacts.ephemeral import ephemeral_get_many
from artifacts.fingerprints import (
    MSG_PAYLOAD_UNDECODABLE,
    UNDECODABLE,
    blank,
    clear_call_fingerprint,
    emit_call_fingerprint,
    payload_decode,
    payload_fingerprint,
    record_fingerprint,
    record_id_for,
)
from artifacts.models import (
    Event,
    EventKind,
    Operation,
    OperationStatus,
    Record,
    Save,
    World,
)

_RECORD_EVENTS = (EventKind.ACTIVATE, EventKind.SUPERSEDE, EventKind.BIND_HEAD)
_CALL_EVENTS = (EventKind.CLEAR, EventKind.IGNORED_CALL)
_CHUNK = 200


@dataclass(frozen=True)
class Problem:
    world_id: str
    sequence: int | None
    message: str

    def __str__(self) -> str:
        where = "-" if self.sequence is None else str(self.sequence)
        return f"world={self.world_id} sequence={where}: {self.message}"


def integrity_check(*, world_ids: Iterable[str] | None = None) -> list[Problem]:
    """Every problem found in the given worlds (all worlds by default)."""
    worlds = World.objects.all().order_by("pk")
    if world_ids is not None:
        worlds = worlds.filter(pk__in=list(world_ids))
    problems: list[Problem] = []
    for world in worlds.iterator():
        problems.extend(world_problems(world))
    return problems


def world_problems(world: World) -> list[Problem]:
    world_id = world.pk
    problems: list[Problem] = []

    def problem(sequence: int | None, message: str) -> None:
        problems.append(Problem(world_id, sequence, message))

    operations = {op.pk: op for op in Operation.objects.filter(world_id=world_id)}
    for operation in operations.values():
        reason = operation.state_problem()
        if reason is not None:
            problem(None, f"operation {operation.pk} is in an invalid state: {reason}")

    sequences: Counter[int] = Counter()
    records: dict[str, Record] = {}
    attempt_bytes: Counter[tuple[str, str, int]] = Counter()
    output_emits: Counter[tuple[str, str, int, str]] = Counter()
    for record in _records(world_id):
        sequences[record.sequence] += 1
        attempt = (record.operation_id, record.request_id, record.request_attempt)
        attempt_bytes[attempt] += record.payload_bytes
        output_emits[(*attempt, record.output)] += 1
        if (record.attempt_bytes, record.output_emits) != (
            attempt_bytes[attempt],
            output_emits[(*attempt, record.output)],
        ):
            problem(
                record.sequence, "the record's attempt totals do not match the records before it"
            )
        if record.record_id in records:
            problem(record.sequence, f"record id {record.record_id} is duplicated")
        records[record.record_id] = record
        for message in _record_problems(record, operations.get(record.operation_id)):
            problem(record.sequence, message)

    replay_superseded: set[str] = set()
    replay_activated: set[str] = set()
    replay_head: dict[str, str] = {}
    events = Event.objects.filter(world_id=world_id).order_by("sequence", "pk")
    for event in events.iterator(chunk_size=_CHUNK):
        sequences[event.sequence] += 1
        owner = operations.get(event.operation_id)
        if owner is None:
            problem(event.sequence, f"event names operation {event.operation_id} of another world")
            continue
        for message in _event_problems(event, owner, records):
            problem(event.sequence, message)
        if event.record_id:
            if event.kind == EventKind.SUPERSEDE:
                replay_superseded.add(event.record_id)
            elif event.kind == EventKind.ACTIVATE:
                replay_activated.add(event.record_id)
            elif event.kind == EventKind.BIND_HEAD:
                replay_head[event.record_id] = event.head

    for record_id, record in records.items():
        mirrored = (record.superseded, record.activated, record.bound_head)
        replayed = (
            record_id in replay_superseded,
            record_id in replay_activated,
            replay_head.get(record_id, ""),
        )
        if mirrored != replayed:
            problem(record.sequence, "record projection state does not match its events")

    for sequence, count in sorted(sequences.items()):
        if count > 1:
            problem(sequence, f"sequence is used {count} times")
        if sequence < 1:
            problem(sequence, "sequence is not positive")
    for sequence in range(1, max(sequences, default=0) + 1):
        if sequence not in sequences:
            problem(sequence, "sequence is missing (the world's sequence has a gap)")
    return problems


def _records(world_id: str) -> Iterator[Record]:
    """The world's records in sequence order, ephemeral payloads filled in from the cache
    where still there (an evicted one is normal and is not checked)."""
    batch: list[Record] = []
    query = Record.objects.filter(world_id=world_id).order_by("sequence", "pk")
    for record in query.iterator(chunk_size=_CHUNK):
        batch.append(record)
        if len(batch) >= _CHUNK:
            yield from _with_ephemeral(batch)
            batch = []
    yield from _with_ephemeral(batch)


def _with_ephemeral(batch: list[Record]) -> list[Record]:
    ephemeral = [r for r in batch if r.save_mode == Save.NONE and r.payload is None]
    cached = ephemeral_get_many(r.pk for r in ephemeral)
    for record in batch:
        record.cached_payload = cached.get(record.pk)  # type: ignore[attr-defined]
    return batch


def _record_problems(record: Record, operation: Operation | None) -> list[str]:
    found: list[str] = []
    if record.save_mode == Save.NONE:
        if record.payload is not None:
            found.append("an ephemeral (save=none) payload is stored in the database")
        text = getattr(record, "cached_payload", None)
    else:
        text = record.payload
        if text is None:
            found.append("the payload is missing")
    if text is not None:
        expected = payload_fingerprint(record.output, record.content_type, text)
        if expected != record.payload_fingerprint:
            found.append("the payload does not match its fingerprint")
        if len(text.encode("utf-8")) != record.payload_bytes:
            found.append("the payload size does not match payload_bytes")
        try:
            payload_decode(text, record.content_type)
        except UNDECODABLE:
            found.append(MSG_PAYLOAD_UNDECODABLE)
    call = emit_call_fingerprint(
        record.call_context,
        {"request_id": record.request_id, "request_attempt": record.request_attempt},
        output=record.output,
        payload_fingerprint=record.payload_fingerprint,
    )
    if call != record.call_fingerprint:
        found.append("the record does not match its call fingerprint")
    if record_fingerprint(record.fingerprint_fields) != record.record_fingerprint:
        found.append("the record does not match its record fingerprint")
    if record.record_id != record_id_for(record.sequence, record.payload_fingerprint):
        found.append("the record id does not match its sequence and payload fingerprint")
    if operation is None:
        found.append(f"the record's operation {record.operation_id} is not in this world")
    elif (
        operation.parent_head,
        operation.preset_id,
        operation.preset_revision,
        operation.preset_scripts_enabled,
    ) != (
        record.parent_head,
        record.preset_id,
        record.preset_revision,
        record.preset_scripts_enabled,
    ):
        found.append("the record does not match its operation's identity")
    return found


# Each kind's fields, as the seed's `assertEvent` has them: those it must carry (non-empty)
# and those it may; every other one must be empty. "request_id/request_attempt" is a pair:
# both or neither, the attempt at least 1.
_REQUEST = "request_id/request_attempt"
_CALL_FIELDS = (
    frozenset({"output", "channel", "reason", "tool_call_id", "call_fingerprint", _REQUEST}),
    frozenset({"key"}),
)
_EVENT_FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    EventKind.ACTIVATE: (frozenset({"record_id"}), frozenset({_REQUEST})),
    EventKind.BIND_HEAD: (frozenset({"record_id", "head"}), frozenset()),
    EventKind.SUPERSEDE: (frozenset({"record_id", "reason"}), frozenset({_REQUEST})),
    EventKind.CLEAR: _CALL_FIELDS,
    EventKind.IGNORED_CALL: _CALL_FIELDS,
}
_TEXT_FIELDS = (
    "record_id", "reason", "head", "output", "channel", "key", "tool_call_id", "call_fingerprint",
)  # fmt: skip


def _shape_problems(event: Event) -> list[str]:
    """The fields `event` lacks, carries but must not, or carries half (the request pair)."""
    fields = _EVENT_FIELDS.get(event.kind)
    if fields is None:
        return [f"unknown event kind {event.kind!r}"]
    required, optional = fields
    carried = {name for name in _TEXT_FIELDS if not blank(getattr(event, name))}
    stray = {name for name in _TEXT_FIELDS if getattr(event, name) != ""} - carried
    attempt = event.request_attempt
    if event.request_id != "" or attempt is not None:
        carried.add(_REQUEST)
    found = [f"the {event.kind} event lacks {name}" for name in sorted(required - carried)]
    found += [
        f"the {event.kind} event must not carry {name}"
        for name in sorted((carried | stray) - required - optional)
    ]
    if _REQUEST in carried and not (
        not blank(event.request_id) and attempt is not None and attempt >= 1
    ):
        found.append(f"the {event.kind} event carries a partial request attempt")
    return found


def _event_problems(event: Event, operation: Operation, records: dict[str, Record]) -> list[str]:
    found = _shape_problems(event)
    if event.kind in _RECORD_EVENTS and event.record_id:
        record = records.get(event.record_id)
        if record is None:
            found.append(f"the {event.kind} event names a missing record {event.record_id!r}")
        elif record.operation_id != event.operation_id:
            found.append("the event does not match its record's operation")
        if event.kind == EventKind.BIND_HEAD and (
            operation.status not in (OperationStatus.CORE_COMMITTED, OperationStatus.COMPLETED)
            or operation.head != event.head
        ):
            found.append("the bind_head event does not match its operation's core head")
    elif event.kind in _CALL_EVENTS and not found:
        if event.call_fingerprint != clear_call_fingerprint(
            operation.context,
            {"request_id": event.request_id, "request_attempt": event.request_attempt},
            output=event.output,
        ):
            # an ignored_call is a stale attempt's clear: the same call, recorded differently
            found.append(f"the {event.kind} event does not match its call fingerprint")
    return found
