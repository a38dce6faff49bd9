"""The per-world mutation: the row lock, the gap-free sequence and the event log writer.

Every mutation of a world runs inside `transaction.atomic()` holding its `World` row locked
(`SELECT … FOR UPDATE`, `sql.lock_world`), so mutations of one world are serialised across
every process while other worlds proceed in parallel. Once locked, the world's highest
sequence (over records and events) is read and the call numbers its new rows from there: no
two rows of a world share a number and none is skipped (a rolled-back transaction takes its
numbers with it).

Events are buffered and written at the end in one statement (`sql.rows_write`), together with
a new record, if the call makes one, the conversation's version bump and the world's
`state_version` bump (below); the record columns that mirror earlier records' events follow.
So one call costs a handful of queries however many events it appends.

What the projection shows depends on the operations' state as well as on the event log (a
superseded operation hides its records, a transient record shows while its operation is live,
a `save=operation` one until it completes), and several calls change only that state. So a
flush bumps the conversation's version when it writes events *or* when the call wrote an
operation (`save_operation`), and in the second case also the world's `state_version`: what
watches the artifacts alone (`selectors.artifacts_version`, the inspector's poll; the event
stream's artifacts digest) counts it with the sequence. Every call that writes ends with
`flush`.
"""

from __future__ import annotations

from collections import defaultdict
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Subquery
from django.db.models.functions import Coalesce

from artifacts.ephemeral import ephemeral_forget_on_commit
from artifacts.models import Event, EventKind, Operation, Record, Save, World
from artifacts.selectors import WorldView, world_view
from artifacts.services.sql import lock_world, rows_write
from artifacts.types import invalid
from conversations.models import Conversation, Entry
from conversations.services.common import conversation_changed
from core.errors import HostError

MSG_WORLD_NOT_FOUND = "Conversation not found"
MSG_HEAD_NOT_AN_ENTRY = "Artifact head is not an entry of the conversation"
HEAD_PROBLEM = "Must be the id of an entry of this conversation."
_ENTRY_ID_MAX = 2**63 - 1  # BigAutoField
MSG_OPERATION_STATE_INVALID = "Artifact operation state is invalid"


def invariant(message: str, **details: Any) -> HostError:
    """An artifact invariant error (spec 07): `store/conflict`, 409."""
    return HostError("store", "conflict", message, details=details or None)


def last_sequence_annotations(world_id: str) -> dict[str, Coalesce]:
    """The world's highest record and event sequences, as annotations (each an index probe on
    `(world, sequence)`); `sql.lock_and_read_for_call` reads the same two in the tool-call path."""
    newest = {
        "last_record_sequence": Record.objects.filter(world_id=world_id),
        "last_event_sequence": Event.objects.filter(world_id=world_id),
    }
    return {
        name: Coalesce(Subquery(query.order_by("-sequence").values("sequence")[:1]), 0)
        for name, query in newest.items()
    }


def head_check(world_id: str, head: str, *, field_name: str) -> None:
    """A head names an entry of the world's conversation (spec 01: the conversation's newest
    entry id when it was taken): its id in decimal, as `Entry.id`. Any entry of the
    conversation, not only today's newest: the transcript moves on while an operation runs
    (queued submissions add entries at admission) and retries repeat the head they were
    given. A head of another conversation (the parent's, for a fork: the fork's entries have
    new ids) or of none → 400, before anything is written. One indexed read."""
    entry_id = int(head) if head.isascii() and head.isdigit() and head == str(int(head)) else 0
    if not (
        0 < entry_id <= _ENTRY_ID_MAX
        and Entry.objects.filter(conversation_id=world_id, pk=entry_id).exists()
    ):
        raise invalid(MSG_HEAD_NOT_AN_ENTRY, field_name, HEAD_PROBLEM)


class WorldMutation:
    """One locked world for the length of the caller's transaction."""

    def __init__(self, world_id: str) -> None:
        self.world_id = world_id
        self._sequence: int | None = None  # read lazily, under the lock
        self._events: list[Event] = []
        self._superseded: set[int] = set()
        self._activated: set[int] = set()
        self._bound: dict[int, str] = {}
        self._forget: list[int] = []
        self._view: WorldView | None = None
        self._operations_written = False

    # --- locking ---------------------------------------------------------------------------

    @classmethod
    def lock(cls, world_id: str) -> WorldMutation | None:
        """Lock the world's row; None when it has none (so no operations either)."""
        return cls(world_id) if lock_world(world_id) else None

    @classmethod
    def lock_or_create(cls, world_id: str) -> WorldMutation:
        """Lock the world's row, creating it first for an existing conversation (else 404)."""
        mutation = cls.lock(world_id)
        if mutation is not None:
            return mutation
        if not Conversation.objects.filter(pk=world_id).exists():
            raise HostError("store", "not_found", MSG_WORLD_NOT_FOUND)
        # ON CONFLICT DO NOTHING: a concurrent first call creates it too, and both then queue
        # on the row lock below.
        World.objects.bulk_create([World(conversation_id=world_id)], ignore_conflicts=True)
        mutation = cls.lock(world_id)
        if mutation is None:  # the conversation was deleted in between
            raise HostError("store", "not_found", MSG_WORLD_NOT_FOUND)
        return mutation

    @classmethod
    def locked(cls, world_id: str, *, last_sequence: int) -> WorldMutation:
        """A world the caller has just locked itself (`sql.lock_and_read_for_call`), with its
        highest sequence read under that lock."""
        mutation = cls(world_id)
        mutation._sequence = last_sequence
        return mutation

    # --- reads under the lock --------------------------------------------------------------

    def view(self) -> WorldView:
        """The world's live records, clears and open operations (loaded once per call)."""
        if self._view is None:
            self._view = world_view(self.world_id, with_open_operations=True)
        return self._view

    def adopt(self, operation: Operation) -> Operation:
        """The view's instance of `operation` (so every step of a call sees one object)."""
        view = self.view()
        return view.operations.setdefault(operation.pk, operation)

    # --- writes ----------------------------------------------------------------------------

    def next_sequence(self) -> int:
        current = self._sequence if self._sequence is not None else self._last_sequence()
        self._sequence = current + 1
        return self._sequence

    def _last_sequence(self) -> int:
        last_record, last_event = (
            World.objects.filter(pk=self.world_id)
            .annotate(**last_sequence_annotations(self.world_id))
            # annotated from a dict: the plugin cannot see the names
            .values_list("last_record_sequence", "last_event_sequence")  # type: ignore[misc]
            .get()
        )
        return max(last_record, last_event)

    def save_operation(self, operation: Operation, *, create: bool = False) -> None:
        """Write an operation after checking it is in a valid state (the one write path)."""
        problem = operation.state_problem()
        if problem is not None:
            raise invariant(MSG_OPERATION_STATE_INVALID, operation_id=operation.pk, problem=problem)
        if create:
            operation.save(force_insert=True)
        else:
            operation.save()
        self._operations_written = True  # the projection may have changed: `flush` tells

    def event(self, kind: str, operation_id: str, **fields: Any) -> Event:
        event = Event(
            world_id=self.world_id,
            sequence=self.next_sequence(),
            kind=kind,
            operation_id=operation_id,
            **fields,
        )
        self._events.append(event)
        if kind == EventKind.CLEAR and self._view is not None:
            self._view.add_clear(event)
        return event

    def _request_fields(self, record: Record) -> dict[str, Any]:
        return {"request_id": record.request_id, "request_attempt": record.request_attempt}

    def supersede(self, record: Record, reason: str, *, with_request: bool = False) -> bool:
        """Append a supersede event for `record` unless it already has one. Final."""
        if record.superseded:
            return False
        extra = self._request_fields(record) if with_request else {}
        self.event(
            EventKind.SUPERSEDE,
            record.operation_id,
            record_id=record.record_id,
            reason=reason,
            **extra,
        )
        record.superseded = True
        if record.pk is not None:
            self._superseded.add(record.pk)
            if record.save_mode == Save.NONE:
                self._forget.append(record.pk)
        return True

    def activate(self, record: Record) -> bool:
        if record.activated:
            return False
        self.event(EventKind.ACTIVATE, record.operation_id, record_id=record.record_id)
        record.activated = True
        if record.pk is not None:
            self._activated.add(record.pk)
        return True

    def bind_head(self, record: Record, head: str) -> bool:
        if record.bound_head == head:
            return False
        self.event(EventKind.BIND_HEAD, record.operation_id, record_id=record.record_id, head=head)
        record.bound_head = head
        if record.pk is not None:
            self._bound[record.pk] = head
        return True

    def flush(self, *, insert: Record | None = None) -> None:
        """Write `insert` (a new record, numbered by `next_sequence`), the buffered events and
        the mirrored record columns; with events or an operation written, bump the
        conversation's version so live views (the event stream) see the artifact change.

        The bump is `conversation_touch`'s (version + 1 under the row lock, watchers told after
        the commit), written in the same statement as the rows (`sql.rows_write`), and so is
        the world's `state_version` + 1 when an operation was written (no event need have
        moved the world's sequence). An emit writes no operation: its cost is unchanged."""
        changed = bool(self._events) or self._operations_written
        touched = rows_write(
            record=insert,
            events=self._events,
            touch=self.world_id if changed else None,
            state_version=self.world_id if self._operations_written else None,
        )
        self._events = []
        self._operations_written = False
        if touched:
            transaction.on_commit(
                partial(conversation_changed, conversation_id=self.world_id, changed="artifacts"),
                robust=True,
            )
        if self._superseded:
            Record.objects.filter(pk__in=self._superseded).update(superseded=True)
            self._superseded = set()
        if self._activated:
            Record.objects.filter(pk__in=self._activated).update(activated=True)
            self._activated = set()
        by_head: dict[str, list[int]] = defaultdict(list)
        for pk, head in self._bound.items():
            by_head[head].append(pk)
        for head, pks in by_head.items():
            Record.objects.filter(pk__in=pks).update(bound_head=head)
        self._bound = {}
        ephemeral_forget_on_commit(self._forget)
        self._forget = []
