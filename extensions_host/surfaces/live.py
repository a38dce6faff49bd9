"""Live updates, the server side: what a watcher compares, and the PostgreSQL wake-up hint.

The truth is the conversation's `version` in the database (bumped on every observable change).
A stream polls it; when it moved, the stream compares small digests of each part of the
conversation to say *what* changed. On PostgreSQL, writers also `NOTIFY` after commit, so a
stream wakes at once instead of at its next poll; the notification is only a hint (a lost one
costs one poll interval), which is also why SQLite can do without it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import weakref
from collections.abc import Iterable
from typing import Any, NamedTuple

from django.apps import apps
from django.core.exceptions import FieldError
from django.db import connection
from django.db.models import Count, Max, OuterRef, Q, Subquery

from conversations.models import Conversation, Entry, Run, Submission
from core.access import access_of
from core.auth import Principal
from extensions_host.models import RosterEntry
from extensions_host.surfaces.models import Interaction
from extensions_host.surfaces.selectors import ambient_visible, attention_visible
from extensions_host.surfaces.services.common import visible_extension_ids

logger = logging.getLogger(__name__)

CHANNEL = "hyphae_conversations"
EVERY_CONVERSATION = "*"  # a hint's payload that wakes every stream (not a conversation id)
# What a change event can name (spec 01 live updates, plus the parts the host also tracks).
KINDS = (
    "conversation",
    "entries",
    "submissions",
    "runs",
    "attention",
    "ambient",
    "interactions",
    "artifacts",
    "projection",
)


# --- the publishing side (any process that commits a change) ----------------------------------


def roster_changes_publish(extension_id: str) -> None:
    """After a stop or a resume commits: wake every live stream (their projection slots show
    it). The same hint as a conversation's, naming them all."""
    changes_publish([EVERY_CONVERSATION])


def changes_publish(conversation_ids: Iterable[str]) -> None:
    """After commit: wake the live streams of these conversations (PostgreSQL `NOTIFY`).

    Never raises: it runs in after-commit hooks, and a lost hint only delays a stream to its
    next poll."""
    ids = sorted({cid for cid in conversation_ids if isinstance(cid, str) and cid})
    if not ids or connection.vendor != "postgresql":
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_notify(%s, cid) FROM unnest(%s::text[]) AS cid", [CHANNEL, ids]
            )
    except Exception:
        logger.warning("live update hint failed for %s", ids[:8], exc_info=True)


# --- the reading side (the stream) --------------------------------------------------------------


class Seen(NamedTuple):
    """What a stream compares at each poll: the conversation's version, and the roster's token
    (`roster_token`: it moves when any roster row changes — a stop, a resume, a grant — which
    every conversation's projection slots show, and no conversation's version moves for)."""

    version: int
    roster: str


def _latest_roster_change() -> Any:
    return RosterEntry.objects.order_by("-updated_at").values("updated_at")[:1]


def _token(stamp: Any) -> str:
    """An opaque token of the roster's last change (clients compare it, nothing more)."""
    return hashlib.sha256(str(stamp).encode()).hexdigest()[:16]


def roster_token() -> str:
    """The roster's token now: a page rendered with it learns from the stream or a poll that
    the roster moved since (the stream's first event carries the token it started from)."""
    latest = _latest_roster_change().first()
    return _token(latest["updated_at"] if latest else None)


def conversation_version(*, conversation_id: str, principal: Principal) -> Seen | None:
    """The version and the roster's token (one statement), or None when the conversation is
    gone or no longer readable."""
    row = (
        Conversation.objects.filter(pk=conversation_id)
        .annotate(roster_at=Subquery(_latest_roster_change()))
        .values("version", "owner_id", "sharing", "roster_at")
        .first()
    )
    if row is None:
        return None
    if access_of(principal, owner_id=row["owner_id"], sharing=row["sharing"]) == "none":
        return None
    return Seen(int(row["version"]), _token(row["roster_at"]))


def conversation_digests(*, conversation_id: str) -> dict[str, str]:
    """A short hash per part of the conversation; a part changed iff its digest did."""
    cid = conversation_id
    visible = visible_extension_ids()
    parts: dict[str, Any] = {
        "conversation": Conversation.objects.filter(pk=cid)
        .values_list("name", "sharing", "archived", "owner_id", "source")
        .first(),
        "entries": Entry.objects.filter(conversation_id=cid).aggregate(
            head=Max("id"), withdrawn=Count("id", filter=Q(withdrawn=True))
        ),
        "submissions": list(
            Submission.objects.filter(conversation_id=cid)
            .values_list("status")
            .annotate(n=Count("id"), top=Max("id"))
            .order_by("status")
        ),
        "runs": list(
            Run.objects.filter(conversation_id=cid)
            .order_by("-id")
            .values_list("id", "status", "settled_sequence")[:1]
        ),
        "attention": attention_visible(conversation_id=cid, extension_ids=visible),
        "ambient": ambient_visible(conversation_id=cid, extension_ids=visible),
        "interactions": Interaction.objects.filter(conversation_id=cid).aggregate(
            n=Count("id"),
            top=Max("id"),
            settled=Max("settled_at_ms"),
            pending=Count("id", filter=Q(status="pending")),
        ),
        "artifacts": _artifacts_sequence(cid),
    }
    return {
        kind: hashlib.sha256(
            json.dumps(value, sort_keys=True, default=str).encode("utf-8")
        ).hexdigest()[:16]
        for kind, value in parts.items()
    }


def changed_kinds(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The parts whose digest moved; a version bump that moved none of them was an extension's
    state (documents, records it observed): its projection."""
    changed = [
        kind for kind in KINDS if kind != "projection" and before.get(kind) != after.get(kind)
    ]
    return changed or ["projection"]


def _artifacts_sequence(conversation_id: str) -> Any:
    """The newest artifact event of the conversation's world and the world's `state_version`
    (moved by the calls that change the projection through operation state alone). The
    artifact store is optional and owns its schema: if it cannot answer, artifacts simply
    never show as changed."""
    try:
        event = apps.get_model("artifacts", "Event")
        world = apps.get_model("artifacts", "World")
        # one query: a world without a row has no events either
        newest = event.objects.filter(world_id=OuterRef("pk")).order_by("-sequence")
        return (
            world.objects.filter(pk=conversation_id)
            .annotate(top=Subquery(newest.values("sequence")[:1]))
            .values_list("top", "state_version")
            .first()
        )
    except (LookupError, FieldError):
        return None


# --- the PostgreSQL wake-up hint, per event loop -----------------------------------------------


class ChangeHub:
    """One `LISTEN` connection per event loop, waking the streams of a notified conversation.

    `listening` is False until the connection is up (and after it drops): streams then poll at
    the short interval only."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self.listening = False

    def subscribe(self, conversation_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self._waiters.setdefault(conversation_id, set()).add(event)
        if connection.vendor == "postgresql" and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._listen())
        return event

    def unsubscribe(self, conversation_id: str, event: asyncio.Event) -> None:
        waiters = self._waiters.get(conversation_id)
        if waiters is not None:
            waiters.discard(event)
            if not waiters:
                self._waiters.pop(conversation_id, None)

    def wake(self, conversation_id: str) -> None:
        for event in self._waiters.get(conversation_id, ()):
            event.set()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()

    async def _listen(self) -> None:
        import psycopg

        params = _connect_params()
        try:
            while True:
                try:
                    conn = await psycopg.AsyncConnection.connect(**params, autocommit=True)
                    async with conn:
                        await conn.execute(f"LISTEN {CHANNEL}")
                        self.listening = True
                        self._wake_all()  # a change may have slipped by while we were connecting
                        async for notify in conn.notifies():
                            if notify.payload == EVERY_CONVERSATION:
                                self._wake_all()
                            else:
                                self.wake(notify.payload)
                except Exception:
                    logger.warning("live update listener lost its connection", exc_info=True)
                self.listening = False
                await asyncio.sleep(2.0)
        finally:
            # cancelled as its loop ends (each WSGI-served stream runs in a loop of its own):
            # holding the task would hold the loop, and `_hubs` would never let go of either
            self.listening = False
            self._task = None


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ChangeHub] = weakref.WeakKeyDictionary()


def change_hub() -> ChangeHub:
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = ChangeHub()
    return hub


def _connect_params() -> dict[str, Any]:
    """Django's own connection parameters (OPTIONS such as sslmode included), minus the
    synchronous cursor class and adapters."""
    params = dict(connection.get_connection_params())
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return params
