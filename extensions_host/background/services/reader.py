"""The read API lifecycle and settled handlers get over the event's conversation: `entry(id)`,
`entries(query, limit ≤ 64, after)` (fork-aware), `document(name)`."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from typing import Any

from conversations.models import Conversation, Entry
from conversations.selectors import ENTRIES_PAGE_MAX, ConversationReads, fork_copy_of
from extensions_host.runtime import HookContext
from extensions_host.sdk import StateError

ENTRY_ROLES = frozenset({"user", "assistant", "tool", "system", "extension"})


@dataclasses.dataclass(frozen=True)
class EntryRecord:
    """One transcript entry as handlers see it."""

    id: int
    role: str
    content: Any
    run_id: int | None
    withdrawn: bool
    created_at: dt.datetime

    @classmethod
    def of(cls, entry: Entry) -> EntryRecord:
        return cls(
            id=entry.pk,
            role=entry.role,
            content=entry.content,
            run_id=entry.run_id,
            withdrawn=entry.withdrawn,
            created_at=entry.created_at,
        )


@dataclasses.dataclass(frozen=True)
class EntryPage:
    entries: list[EntryRecord]
    next: int | None  # pass as `after` for the next page; None at the end


class ConversationReader:
    """`entry(id)`, `entries(query, limit, after)`, `document(name)` over one conversation.
    Binding one runs no statement: only the reads do.

    Fork-aware: a fork's transcript starts with copies of its parent's entries up to the fork
    point (conversations copy them at fork time, with new ids), so a fork's pages include them,
    in order, and never the parent's later entries. An entry id of the parent up to the fork
    point (the `at` of `conversation_forked`, an id kept from before the fork) stands for its
    copy wherever an entry id is taken: `entry(at)` is the fork's copy of the fork point, and
    `entries(after=at)` starts after it.
    """

    def __init__(self, ctx: HookContext, conversation_id: str) -> None:
        self._ctx = ctx
        self.conversation_id = conversation_id

    def entry(self, entry_id: int) -> EntryRecord | None:
        if isinstance(entry_id, bool) or not isinstance(entry_id, int) or entry_id < 1:
            raise StateError("bound", "An entry id must be a positive integer")
        entry = Entry.objects.filter(conversation_id=self.conversation_id, pk=entry_id).first()
        if entry is None and (copy := self._copy_of(entry_id)) is not None:
            entry = Entry.objects.filter(pk=copy).first()
        return EntryRecord.of(entry) if entry is not None else None

    def entries(
        self,
        query: dict[str, Any] | None = None,
        limit: int = ENTRIES_PAGE_MAX,
        after: int | None = None,
    ) -> EntryPage:
        """Entries in transcript order, `limit` 1..64, after the entry id `after`; `query` may
        filter on `role` (a role or a list of roles) and `withdrawn` (bool)."""
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= ENTRIES_PAGE_MAX
        ):
            raise StateError("bound", f"Page limit must be 1..{ENTRIES_PAGE_MAX}")
        rows = Entry.objects.filter(conversation_id=self.conversation_id)
        if after is not None:
            if isinstance(after, bool) or not isinstance(after, int) or after < 0:
                raise StateError("bound", "A page cursor must be an entry id")
            rows = rows.filter(pk__gt=self._copy_of(after) or after)
        rows = _entry_query(rows, query)
        found = [EntryRecord.of(e) for e in rows.order_by("pk")[: limit + 1]]
        more = len(found) > limit
        found = found[:limit]
        return EntryPage(entries=found, next=found[-1].id if more and found else None)

    def document(self, name: str) -> Any:
        """This extension's document `name` of the conversation (its initial value when none
        is stored)."""
        return self._ctx.document(name).read(self.conversation_id)

    @functools.cached_property
    def _fork_point(self) -> int | None:
        """The parent's entry the conversation was forked at (None: no fork), read once, on the
        first entry id that needs it."""
        return (
            Conversation.objects.filter(pk=self.conversation_id)
            .values_list("forked_at_entry", flat=True)
            .first()
        )

    def _copy_of(self, entry_id: int) -> int | None:
        """The fork's copy of its parent's entry `entry_id`, or None. The conversation's own
        entries come after its fork point, so only an id at or below it is looked up."""
        if entry_id < 1 or self._fork_point is None or entry_id > self._fork_point:
            return None
        return fork_copy_of(conversation_id=self.conversation_id, entry_id=entry_id)


def _entry_query(rows: Any, query: dict[str, Any] | None) -> Any:
    if query is None:
        return rows
    if not isinstance(query, dict) or set(query) - {"role", "withdrawn"}:
        raise StateError("bound", "An entry query may filter on role and withdrawn only")
    role = query.get("role")
    if role is not None:
        roles = [role] if isinstance(role, str) else role
        if not isinstance(roles, list | tuple) or not set(roles) <= ENTRY_ROLES:
            raise StateError("bound", "An entry query role is invalid")
        rows = rows.filter(role__in=list(roles))
    withdrawn = query.get("withdrawn")
    if withdrawn is not None:
        if not isinstance(withdrawn, bool):
            raise StateError("bound", "An entry query withdrawn filter must be a boolean")
        rows = rows.filter(withdrawn=withdrawn)
    return rows


@dataclasses.dataclass(frozen=True)
class LifecycleEventView(ConversationReads):
    """What a lifecycle handler receives: `handler(ctx, event)`.

    `event.kind`, `event.data` (the payload: `{conversation_id}`, `{child_id, parent_id, at}`,
    `{conversation_id, archived}`, `{conversation_id, idle_ms}`, `{user, transfer_to}`),
    `event.conversation_id`, and the read API over that conversation: `event.entry(id)`,
    `event.entries(query, limit, after)`, `event.document(name)`.
    """

    event_id: int
    kind: str
    conversation_id: str
    data: dict[str, Any]
    reader: ConversationReader | None = dataclasses.field(repr=False, compare=False)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]
