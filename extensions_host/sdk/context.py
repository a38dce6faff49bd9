"""The context a hook receives, as typed protocols (the host's runtime implements them).

Reads (`get`, `page`, `read`) work in any hook of the extension; writes (`put`, `remove`,
`update`, `observe`) only inside the extension's own frame. A write elsewhere — after the hook
returned, from another thread, with another extension's context, or inside a read-only hook such
as `project` — is a defect and stops the extension.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from extensions_host.sdk.models import Caller

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class CollectionHandle(Protocol[M]):
    def get(self, key: str) -> M | None:
        """The record with this key, or None."""

    def page(self, limit: int = 64, after: str | None = None, index: str | None = None) -> list[M]:
        """Up to `limit` (1..64) records ordered by key, after the key `after`, optionally only
        those whose index equals `index`."""

    def put(self, value: M) -> None:
        """Insert or replace the record `key(value)`."""

    def remove(self, key: str) -> bool:
        """Delete the record; True when it existed."""


class DocumentHandle(Protocol[M]):
    def read(self, conversation_id: str) -> M:
        """The stored document of that conversation, or the declared initial value."""

    def update(self, conversation_id: str, fn: Callable[[M], M]) -> M:
        """Replace the document with `fn(current)`; marks the conversation changed."""


class Context(Protocol):
    """What every hook receives as `ctx`."""

    extension_id: str
    revision: str
    hook: str
    grants: frozenset[str]
    caller: Caller | None

    def now_ms(self) -> int:
        """The host clock (UTC epoch milliseconds) — use it for every due time."""

    def new_id(self) -> str:
        """A new unique, time-ordered id (32 lowercase hex characters)."""

    def collection(self, name: str) -> CollectionHandle[Any]: ...

    def document(self, name: str) -> DocumentHandle[Any]: ...

    @property
    def documents(self) -> Any:
        """`ctx.documents["notes"]` is `ctx.document("notes")`."""

    def observe(self, conversation_id: str) -> None:
        """Mark a conversation changed by this frame (its version is bumped on commit)."""

    def update(self, fn: Callable[[Context], T]) -> T:
        """Run a state-only update in a fresh transaction, from outside a hook."""

    def transact(self, fn: Callable[[Context], T]) -> T:
        """Run a full frame from the extension's own code (a route, a worker, a job)."""
