"""Conversation lifecycle: create (idempotent on the client id), update, fork, retention."""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from conversations.models import Conversation, Entry, Sharing, conversation_id_valid
from conversations.selectors import conversation_get
from conversations.services.common import (
    MSG_FORK_POINT,
    MSG_ID_INVALID,
    MSG_ID_TAKEN,
    conversation_touch,
)
from core import clock
from core.auth import Principal
from core.errors import HostError
from core.services import lifecycle_record
from core.validation import text_problem
from extensions_host.background.services.idle import idle_watermark_lower
from extensions_host.services.documents import documents_fork

FORK_COPY_BATCH = 500
RETENTION_PAGE = 100
NAME_MAX = 200  # spec 01: a conversation's name, as the HTTP API's serializers bound it
SOURCE_MAX = 64
MSG_NAME_TOO_LONG = "Name is too long"
MSG_SOURCE_TOO_LONG = "Source is too long"
MSG_NAME_NOT_TEXT = "Name must be text"
MSG_SOURCE_NOT_TEXT = "Source must be text"


def _text_check(value: Any, *, field: str, limit: int, not_text: str, too_long: str) -> None:
    """A refusal like the HTTP API's serializers give (400 `contract/invalid`), not a cut."""
    if not isinstance(value, str):
        raise HostError("contract", "invalid", not_text, details={field: [not_text]})
    if len(value) > limit:
        raise HostError(
            "contract", "invalid", too_long, details={field: [f"At most {limit} characters."]}
        )
    if (problem := text_problem(value)) is not None:
        raise HostError("contract", "invalid", not_text, details={field: [problem]})


def _name_check(name: Any) -> None:
    _text_check(
        name, field="name", limit=NAME_MAX, not_text=MSG_NAME_NOT_TEXT, too_long=MSG_NAME_TOO_LONG
    )


def _source_check(source: Any) -> None:
    _text_check(
        source,
        field="source",
        limit=SOURCE_MAX,
        not_text=MSG_SOURCE_NOT_TEXT,
        too_long=MSG_SOURCE_TOO_LONG,
    )


@dataclass(frozen=True)
class Created:
    conversation: Conversation
    created: bool  # False: an idempotent re-create returned the existing conversation


def conversation_id_new() -> str:
    """An unguessable id (128 bits, URL-safe: within `^[A-Za-z0-9_-]{1,64}$`)."""
    return secrets.token_urlsafe(16)


def conversation_ensure(
    *,
    owner: Any,
    conversation_id: str | None = None,
    name: str = "",
    sharing: str = Sharing.PRIVATE,
    source: str = "",
) -> Created:
    """Create a conversation in the caller's transaction, idempotent on a client-chosen id.

    Same owner → the existing one (`created=False`); an id taken by another owner → 409
    `contract/conflict` "Conversation id is taken" (client-chosen ids are a namespace: the one
    deliberate existence signal; generated ids are unguessable). Records `conversation_created`
    only when it really creates. Every bound is checked before anything is written (callers
    besides the HTTP API, like the host API, reach it without the API's serializers).
    """
    _name_check(name)
    _source_check(source)
    if conversation_id is None:
        conversation_id = conversation_id_new()
    elif not conversation_id_valid(conversation_id):
        raise HostError("contract", "invalid", MSG_ID_INVALID, details={"id": [MSG_ID_INVALID]})
    if sharing not in Sharing.values:
        raise HostError(
            "contract",
            "invalid",
            "Sharing is invalid",
            details={"sharing": ["Must be private, users or public."]},
        )
    existing = Conversation.objects.filter(pk=conversation_id).first()
    if existing is None:
        try:
            # a savepoint: a concurrent create of the same id must not poison the caller's
            # transaction; we re-read and answer as if we had come second
            with transaction.atomic():
                conversation = Conversation.objects.create(
                    id=conversation_id,
                    owner=owner,
                    name=name,
                    sharing=sharing,
                    source=source,
                    last_activity_at=clock.now(),
                )
                lifecycle_record(
                    kind="conversation_created",
                    conversation_id=conversation.pk,
                    payload={"conversation_id": conversation.pk},
                )
            return Created(conversation, True)
        except IntegrityError:
            existing = Conversation.objects.filter(pk=conversation_id).first()
            if existing is None:
                raise
    if existing.owner_id != getattr(owner, "pk", None):
        raise HostError("contract", "conflict", MSG_ID_TAKEN)
    return Created(existing, False)


def conversation_create(
    *,
    principal: Principal,
    conversation_id: str | None = None,
    name: str = "",
    sharing: str = Sharing.PRIVATE,
    source: str = "",
) -> Created:
    """API entry point: the principal's user owns the new conversation."""
    with transaction.atomic(durable=True):
        return conversation_ensure(
            owner=principal.user,
            conversation_id=conversation_id,
            name=name,
            sharing=sharing,
            source=source,
        )


def conversation_update(
    *,
    principal: Principal,
    conversation_id: str,
    name: str | None = None,
    sharing: str | None = None,
    archived: bool | None = None,
) -> Conversation:
    """Rename, share, archive or unarchive (owner access). Archiving records
    `conversation_archived {conversation_id, archived}` when the flag really changes."""
    conversation_get(principal=principal, conversation_id=conversation_id, write=True)
    if sharing is not None and sharing not in Sharing.values:
        raise HostError(
            "contract",
            "invalid",
            "Sharing is invalid",
            details={"sharing": ["Must be private, users or public."]},
        )
    if name is not None:
        _name_check(name)
    with transaction.atomic(durable=True):
        conversation = Conversation.objects.select_for_update(no_key=True).get(pk=conversation_id)
        fields: list[str] = []
        if name is not None and name != conversation.name:
            conversation.name = name
            fields.append("name")
        if sharing is not None and sharing != conversation.sharing:
            conversation.sharing = sharing
            fields.append("sharing")
        if archived is not None and archived != conversation.archived:
            conversation.archived = archived
            conversation.archived_at = clock.now() if archived else None
            fields += ["archived", "archived_at"]
            lifecycle_record(
                kind="conversation_archived",
                conversation_id=conversation.pk,
                payload={"conversation_id": conversation.pk, "archived": archived},
            )
            if not archived:
                # unarchiving is not activity (spec 01), but its idle period may be owed
                idle_watermark_lower(activity_at=conversation.last_activity_at)
        if not fields:
            return conversation
        conversation.save(update_fields=[*fields, "updated_at"])
        conversation_touch(conversation_id=conversation.pk, changed="conversation")
    conversation.refresh_from_db(fields=["version"])
    return conversation


def conversation_fork(
    *,
    principal: Principal,
    conversation_id: str,
    at: int,
    child_id: str | None = None,
    name: str | None = None,
) -> Created:
    """A new conversation whose transcript is a copy of the parent's entries up to and
    including `at` (new entry ids). Owner access on the parent; the forking principal owns the
    child. Idempotent on a client-chosen `child_id` (same owner, parent and fork point → the
    existing fork). Records `conversation_forked {child_id, parent_id, at}`."""
    parent = conversation_get(principal=principal, conversation_id=conversation_id, write=True)
    if name is not None:
        _name_check(name)
    if not Entry.objects.filter(conversation_id=parent.pk, pk=at).exists():
        raise HostError("contract", "invalid", MSG_FORK_POINT, details={"at": [MSG_FORK_POINT]})
    if child_id is not None and not conversation_id_valid(child_id):
        raise HostError("contract", "invalid", MSG_ID_INVALID, details={"id": [MSG_ID_INVALID]})

    def replay() -> Created | None:
        """The fork already made under `child_id`: the same one → it, another → 409."""
        existing = Conversation.objects.filter(pk=child_id).first() if child_id else None
        if existing is None:
            return None
        same = (
            existing.owner_id == principal.user_id
            and existing.parent_id == parent.pk
            and existing.forked_at_entry == at
        )
        if not same:
            raise HostError("contract", "conflict", MSG_ID_TAKEN)
        return Created(existing, False)

    with transaction.atomic(durable=True):
        if (earlier := replay()) is not None:
            return earlier
        try:
            with transaction.atomic():
                child = Conversation.objects.create(
                    id=child_id or conversation_id_new(),
                    owner=principal.user,
                    name=parent.name if name is None else name,
                    sharing=Sharing.PRIVATE,
                    source=parent.source,
                    parent=parent,
                    forked_at_entry=at,
                    last_activity_at=clock.now(),
                )
        except IntegrityError as exc:
            # a concurrent request took the id first (its commit is what the insert waited
            # for): the same fork is a replay, as if it had come second
            if (earlier := replay()) is not None:
                return earlier
            raise HostError("contract", "conflict", MSG_ID_TAKEN) from exc
        _entries_copy(parent_id=parent.pk, child_id=child.pk, up_to=at)
        # Extension documents are copied or reset per their `fork` policy (spec 02), in this
        # transaction, before the event is recorded.
        documents_fork(parent_id=parent.pk, child_id=child.pk)
        lifecycle_record(
            kind="conversation_forked",
            conversation_id=child.pk,
            payload={"child_id": child.pk, "parent_id": parent.pk, "at": at},
        )
    return Created(child, True)


def _entries_copy(*, parent_id: str, child_id: str, up_to: int) -> None:
    """Copy the parent's transcript up to and including `up_to`, in batches, in order.

    Copies are plain transcript rows: the parent's runs, submissions and entry keys stay with
    the parent (the child has no runs yet).
    """
    batch: list[Entry] = []
    rows = (
        Entry.objects.filter(conversation_id=parent_id, pk__lte=up_to)
        .order_by("pk")
        .values_list("role", "content", "withdrawn")
    )
    for role, content, withdrawn in rows.iterator(chunk_size=FORK_COPY_BATCH):
        batch.append(
            Entry(conversation_id=child_id, role=role, content=content, withdrawn=withdrawn)
        )
        if len(batch) >= FORK_COPY_BATCH:
            Entry.objects.bulk_create(batch)
            batch = []
    if batch:
        Entry.objects.bulk_create(batch)


def conversations_retention_sweep(*, limit: int = RETENTION_PAGE) -> tuple[int, bool]:
    """Delete archived conversations archived more than `RETENTION_DAYS` ago, with everything
    hanging off them. Returns (deleted conversations, more may remain). No-op when unset."""
    days = settings.RETENTION_DAYS
    if days is None:
        return 0, False
    cutoff = clock.now() - dt.timedelta(days=days)
    ids = list(
        Conversation.objects.filter(archived=True, archived_at__lt=cutoff)
        .order_by("archived_at")
        .values_list("pk", flat=True)[:limit]
    )
    if not ids:
        return 0, False
    with transaction.atomic(durable=True):
        # re-check under the delete itself: an unarchive that committed meanwhile wins
        Conversation.objects.filter(pk__in=ids, archived=True, archived_at__lt=cutoff).delete()
    return len(ids), len(ids) == limit
