"""Reads of conversations with access checks (spec 01, access)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import connection
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery

from conversations.models import (
    Conversation,
    Delivery,
    Entry,
    Outcome,
    Run,
    RunStatus,
    Sharing,
    Submission,
    SubmissionStatus,
    conversation_id_valid,
)
from core import clock
from core.access import Access, access_of
from core.auth import Principal, username_valid
from core.db import BIGINT_MAX
from core.errors import MSG_FORBIDDEN, HostError
from core.validation import decimal_number

if TYPE_CHECKING:
    from extensions_host.background.services.reader import (
        ConversationReader,
        EntryPage,
        EntryRecord,
    )

MSG_CONVERSATION_NOT_FOUND = "Conversation not found"
MSG_RUN_NOT_FOUND = "Run not found"
MSG_NOTHING_TO_READ = "This event has no conversation to read"
SETTLED_BATCH_MAX = 1000
ENTRIES_PAGE_MAX = 64  # a handler's page of transcript entries (spec 03: limit ≤ 64)


def conversation_access(*, principal: Principal, conversation: Conversation) -> Access:
    return access_of(principal, owner_id=conversation.owner_id, sharing=conversation.sharing)


def conversation_get(
    *, principal: Principal, conversation_id: str, write: bool = False
) -> Conversation:
    """The conversation if the principal may read it (and write it, with `write=True`).

    Order of checks: a conversation the principal cannot read answers 404 (no existence leak),
    before any other check; then a readable one the principal may not write answers 403.
    Unauthenticated writes are refused by the view's permission before this runs.
    """
    # an id that cannot exist is simply not found (and never reaches the database: a NUL in it
    # would be a driver error, not an answer)
    valid = conversation_id_valid(conversation_id)
    conversation = Conversation.objects.filter(pk=conversation_id).first() if valid else None
    if conversation is None:
        raise HostError("store", "not_found", MSG_CONVERSATION_NOT_FOUND)
    access = conversation_access(principal=principal, conversation=conversation)
    if access == "none":
        raise HostError("store", "not_found", MSG_CONVERSATION_NOT_FOUND)
    if write and (access != "owner" or not principal.can_write):
        raise HostError("auth", "forbidden", MSG_FORBIDDEN)
    return conversation


def conversation_contents_readable(*, principal: Principal, conversation_id: str) -> bool:
    """Whether the principal may read what belongs to a conversation (its runs, its artifact
    operations) outside the runtime endpoints: read access to the conversation, as for the
    conversation itself. Admins and the service principal (an admin) read everything; a
    `runtime` token does not: only the runtime endpoints of spec 07 (claim, heartbeat, steers,
    tool calls, settle, entry appends, artifact writes, skill files) ignore sharing, and
    these reads are not among them. The caller answers its own 404 otherwise: an unreadable
    conversation hides its contents entirely."""
    try:
        conversation_get(principal=principal, conversation_id=conversation_id)
    except HostError:
        return False
    return True


def conversations_visible(*, principal: Principal) -> QuerySet[Conversation]:
    """Every conversation the principal can read; lists never contain anything else."""
    qs = Conversation.objects.all()
    if principal.is_authenticated and principal.admin:
        return qs
    if principal.is_authenticated:
        return qs.filter(
            Q(owner_id=principal.user_id) | Q(sharing__in=[Sharing.USERS, Sharing.PUBLIC])
        )
    return qs.filter(sharing=Sharing.PUBLIC)


def conversation_head(*, conversation_id: str) -> int | None:
    """The conversation's head: its newest entry id (None while the transcript is empty)."""
    return (
        Entry.objects.filter(conversation_id=conversation_id)
        .order_by("-pk")
        .values_list("pk", flat=True)
        .first()
    )


def _with_head_and_busy(qs: QuerySet[Conversation]) -> QuerySet[Conversation]:
    # served by entry_conv_idx and the one_unsettled_run_per_conversation partial index
    head = Entry.objects.filter(conversation_id=OuterRef("pk")).order_by("-pk").values("pk")[:1]
    busy = Run.objects.filter(conversation_id=OuterRef("pk"), status=RunStatus.CLAIMED)
    return qs.select_related("owner").annotate(head=Subquery(head), busy=Exists(busy))


def conversation_view(*, principal: Principal, conversation_id: str) -> Conversation:
    """A readable conversation with `head`, `busy` and `access` for the conversation view."""
    conversation = conversation_get(principal=principal, conversation_id=conversation_id)
    viewed = _with_head_and_busy(Conversation.objects.filter(pk=conversation.pk)).get()
    viewed.access = conversation_access(principal=principal, conversation=viewed)
    return viewed


def conversations_list(
    *, principal: Principal, owner: str | None = None, archived: bool | None = None
) -> QuerySet[Conversation]:
    """The principal's visible conversations, newest activity first (the caller paginates).

    `owner`: "me", a user id, or a username.
    """
    qs = conversations_visible(principal=principal)
    if owner == "me":
        qs = qs.filter(owner_id=principal.user_id)
    elif owner is not None and (owner_id := decimal_number(owner, maximum=BIGINT_MAX)) is not None:
        qs = qs.filter(owner_id=owner_id)
    elif owner is not None:
        qs = qs.filter(owner__username=owner) if username_valid(owner) else qs.none()
    if archived is not None:
        qs = qs.filter(archived=archived)
    return _with_head_and_busy(qs)


def entries_of(*, conversation_id: str) -> QuerySet[Entry]:
    """A conversation's transcript in order (the caller paginates)."""
    return Entry.objects.filter(conversation_id=conversation_id)


def fork_copy_of(*, conversation_id: str, entry_id: int) -> int | None:
    """In a fork, the id of its copy of an ancestor's entry `entry_id` up to the fork point
    (spec 03: a fork sees its parent's entries up to the fork point); None when the conversation
    is no fork, or `entry_id` is no entry of an ancestor it sees.

    A fork's transcript starts with copies of its parent's entries up to and including
    `forked_at_entry`, in order, with new ids (`conversation_fork`): the copy of the parent's
    n-th entry is the fork's n-th. A fork of a fork resolves through each level. Entry ids are
    global and a fork's own entries come after its fork point, so an id above the fork point is
    never an ancestor's entry the fork sees. A few statements per level, only when called."""
    levels: list[tuple[str, str, int]] = []  # (fork, its parent, fork point), from here up
    current = conversation_id
    while True:
        fork = (
            Conversation.objects.filter(pk=current)
            .values_list("parent_id", "forked_at_entry")
            .first()
        )
        if fork is None or fork[0] is None or fork[1] is None or entry_id > fork[1]:
            return None
        levels.append((current, fork[0], fork[1]))
        current = fork[0]
        if Entry.objects.filter(conversation_id=current, pk=entry_id).exists():
            break
    found = entry_id
    for child, parent, at in reversed(levels):
        if found > at:
            return None  # the parent's entry came after this fork's point
        position = Entry.objects.filter(conversation_id=parent, pk__lte=found).count()
        copies = Entry.objects.filter(conversation_id=child).order_by("pk")
        copy = copies.values_list("pk", flat=True)[position - 1 : position].first()
        if copy is None:
            return None
        found = copy
    return found


def run_get(*, principal: Principal, run_id: int) -> Run:
    """A run for a reader of its conversation (admins and the service principal read any);
    404 otherwise, as for a missing run."""
    run = Run.objects.filter(pk=run_id).first() if 0 < run_id <= BIGINT_MAX else None
    if run is None:
        raise HostError("store", "not_found", MSG_RUN_NOT_FOUND)
    if not conversation_contents_readable(principal=principal, conversation_id=run.conversation_id):
        raise HostError("store", "not_found", MSG_RUN_NOT_FOUND)
    return run


def run_inputs(*, run_id: int) -> list[Submission]:
    """A run's input submissions in admission order (steers taken into it included)."""
    return list(Submission.objects.select_related("entry").filter(run_id=run_id).order_by("pk"))


def run_has_pending_steer(*, run: Run) -> bool:
    """A steer submission is waiting for the live run to take it (`POST /v1/runs/{id}/steers`)."""
    now = clock.now()
    return (
        Submission.objects.filter(
            conversation_id=run.conversation_id,
            status=SubmissionStatus.QUEUED,
            delivery=Delivery.STEER,
        )
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
        .exists()
    )


def entry_text(content: Any) -> str:
    """The text blocks of an entry's content, concatenated."""
    if not isinstance(content, list):
        return ""
    return "".join(
        part["text"]
        for part in content
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    )


class ConversationReads:
    """The read API a handler gets over the conversation an event is about (spec 03):
    `entry(id)`, `entries(query, limit, after)` (fork-aware), `document(name)`, through the
    `reader` the host binds when it delivers the event to a handler (an
    `extensions_host.background.services.reader.ConversationReader`: no statement until a
    read is called)."""

    reader: ConversationReader | None

    def _read(self) -> ConversationReader:
        if self.reader is None:
            from extensions_host.sdk import StateError

            raise StateError("unavailable", MSG_NOTHING_TO_READ)
        return self.reader

    def entry(self, entry_id: int) -> EntryRecord | None:
        return self._read().entry(entry_id)

    def entries(
        self,
        query: dict[str, Any] | None = None,
        limit: int = ENTRIES_PAGE_MAX,
        after: int | None = None,
    ) -> EntryPage:
        return self._read().entries(query, limit, after)

    def document(self, name: str) -> Any:
        return self._read().document(name)


@dataclass(frozen=True)
class RunSettledEvent(ConversationReads):
    """What settled-run consumers receive (spec 01). `input_texts` is position-paired with
    `inputs`: a withdrawn or unresolvable input contributes "". Delivered to `on_settled`, it
    reads its conversation too (`run.entry(id)`, `run.entries(…)`, `run.document(name)`,
    `ConversationReads`)."""

    sequence: int
    conversation_id: str
    run_id: int
    inputs: tuple[int, ...]
    input_texts: tuple[str, ...]
    outcome: dict[str, Any]
    reader: ConversationReader | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sequence": self.sequence,
            "conversation_id": self.conversation_id,
            "run_id": self.run_id,
            "inputs": list(self.inputs),
            "input_texts": list(self.input_texts),
            "outcome": self.outcome,
        }


def run_settled_events(*, after: int, limit: int = 64) -> list[RunSettledEvent]:
    """Settled runs with sequence > `after`, in sequence order, at most `limit` of them.

    Two queries whatever the batch size: the runs (with answer entries), then their inputs
    (with entries). Served by the unique index on settled_sequence. Plain rows, no model
    instances: this is every settled consumer's hot path.
    """
    limit = max(1, min(limit, SETTLED_BATCH_MAX))
    where = "r.settled_sequence > %s ORDER BY r.settled_sequence LIMIT %s"
    return _settled_events(where, [after, limit])


def run_settled_event(*, run_id: int) -> RunSettledEvent | None:
    found = _settled_events("r.id = %s AND r.status = %s", [run_id, RunStatus.SETTLED.value])
    return found[0] if found else None


def _settled_events(where: str, params: list[Any]) -> list[RunSettledEvent]:
    """Two plain statements (every settled consumer's hot path): the runs with their answer
    entries, then their inputs with their entries."""
    qn = connection.ops.quote_name
    runs_t, entries_t = qn(Run._meta.db_table), qn(Entry._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT r.id, r.settled_sequence, r.conversation_id, r.outcome, r.reason, "  # noqa: S608
            f"r.answer_entry_id, e.content FROM {runs_t} r "
            f"LEFT JOIN {entries_t} e ON e.id = r.answer_entry_id WHERE {where}",
            params,
        )
        runs = cursor.fetchall()
        if not runs:
            return []
        inputs: dict[int, list[tuple[int, str]]] = {run[0]: [] for run in runs}
        cursor.execute(
            "SELECT s.run_id, s.id, s.status, e.withdrawn, e.content "  # noqa: S608
            f"FROM {qn(Submission._meta.db_table)} s "
            f"LEFT JOIN {entries_t} e ON e.submission_id = s.id "
            f"WHERE s.run_id IN ({', '.join(['%s'] * len(inputs))}) ORDER BY s.id",
            list(inputs),
        )
        rows = cursor.fetchall()
    for run_id, submission_id, status, withdrawn, content in rows:
        resolvable = status != SubmissionStatus.WITHDRAWN and withdrawn in (False, 0)
        text = entry_text(_json(content)) if resolvable else ""
        inputs[run_id].append((submission_id, text))
    events = []
    for run_id, sequence, conversation_id, outcome_kind, reason, answer_id, answer in runs:
        if outcome_kind == Outcome.ANSWERED:
            outcome: dict[str, Any] = {
                "status": Outcome.ANSWERED.value,
                "answer_entry_id": answer_id,
                "answer": {"content": _json(answer) if answer_id is not None else []},
            }
        else:
            outcome = {"status": Outcome.UNANSWERED.value, "reason": reason}
        pairs = inputs[run_id]
        events.append(
            RunSettledEvent(
                sequence=sequence or 0,
                conversation_id=conversation_id,
                run_id=run_id,
                inputs=tuple(p[0] for p in pairs),
                input_texts=tuple(p[1] for p in pairs),
                outcome=outcome,
            )
        )
    return events


def _json(value: Any) -> Any:
    """A JSON column read by a plain statement: text on SQLite and through Django's psycopg
    loader."""
    return json.loads(value) if isinstance(value, str) else value
