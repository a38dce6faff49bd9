"""The context a hook receives, as typed protocols (the host's runtime implements them).

Reads (`get`, `page`, `read`) work in any hook of the extension; writes (`put`, `remove`,
`update`, `observe`) only inside the extension's own frame. A write elsewhere — after the hook
returned, from another thread, with another extension's context, or inside a read-only hook such
as `project` — is a defect and stops the extension.

Annotate hooks with `ctx: Context` and mypy checks every call against these signatures, which
are the runtime handles' own (`tests/sdk` holds the two side by side).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel

from extensions_host.sdk.models import Caller
from extensions_host.surfaces.types import (
    Accepted,
    AmbientRecord,
    AttentionItem,
    InteractionRecord,
    NotReady,
    Prompt,
    RunInfo,
    WhenBusy,
)

if TYPE_CHECKING:
    from core.auth import Principal

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

Sharing = Literal["private", "users", "public"]
SettleStatus = Literal["skipped", "expired", "cancelled"]


# --- state ------------------------------------------------------------------------------------


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


class DocumentsHandle(Protocol):
    def __getitem__(self, name: str) -> DocumentHandle[Any]:
        """`ctx.documents["notes"]` is `ctx.document("notes")`."""


class TimersHandle(Protocol):
    """`ctx.timers` (grant `timers`): one timer per key, fired once by `on_timer`."""

    def set(self, key: str, due_at_ms: int) -> None:
        """Insert or move the timer `key` to `due_at_ms` (epoch ms, host clock)."""

    def cancel(self, key: str) -> bool:
        """Delete the timer; True when it was pending."""

    def read(self, key: str) -> int | None:
        """The pending timer's instant, or None."""


# --- conversation capabilities (spec 04) ------------------------------------------------------


class SendHandle(Protocol):
    """`ctx.send(...)` (grant `send`): admit a prompt into a conversation, inside the frame."""

    def __call__(
        self,
        conversation_id: str,
        *,
        prompt: Prompt | dict[str, Any],
        when: int | None = None,
        when_busy: WhenBusy = "queue",
        correlation: str | None = None,
        require_existing_conversation: bool = False,
    ) -> Accepted | NotReady: ...


class AttentionHandle(Protocol):
    """`ctx.attention` (grant `attention`)."""

    def set(self, conversation_id: str, item: AttentionItem | dict[str, Any]) -> None:
        """Insert or replace the item `item.id` on the conversation."""

    def clear(self, conversation_id: str, item_id: str) -> bool:
        """Remove the item; True when it was there."""


class InteractionsHandle(Protocol):
    """`ctx.interactions` and `ctx.host.interactions` (grant `attention`)."""

    def seed(self, conversation_id: str, record: InteractionRecord | dict[str, Any]) -> bool:
        """Seed (or replace) a pending interaction; False for a no-op (a terminal record)."""

    def answer(self, conversation_id: str, call_id: str, answer: Any) -> bool:
        """Answer the extension's own pending interaction; False when it is not pending."""

    def settle(self, conversation_id: str, call_id: str, status: SettleStatus) -> bool:
        """Mark the pending interaction skipped, expired or cancelled."""

    def snapshot(self, conversation_id: str, call_id: str) -> dict[str, Any] | None:
        """The extension's record as JSON data (the `InteractionRecord` fields and
        `extension`: `InteractionRecord.model_validate(snapshot)` reads it), or None."""


class AmbientHandle(Protocol):
    """`ctx.ambient` and `ctx.host.ambient` (grant `attention`)."""

    def set(self, conversation_id: str, record: AmbientRecord | dict[str, Any]) -> None:
        """Replace the surface `record.key` (a key declared in `ambient_kinds`)."""

    def clear(self, conversation_id: str, key: str) -> None:
        """Empty the surface, keeping its ownership."""


# --- stores (no grant) ------------------------------------------------------------------------


class SecretsHandle(Protocol):
    """`ctx.stores.secrets`: encrypted at rest, redacted everywhere."""

    def get(self, key: str) -> str | None: ...

    def set(self, key: str, value: str) -> None: ...

    def delete(self, key: str) -> None: ...

    def keys(self) -> list[str]: ...


class SettingsHandle(Protocol):
    """`ctx.stores.settings`: staff-edited, validated against `settings_model`."""

    def get(self) -> dict[str, Any]: ...

    def set(self, value: dict[str, Any]) -> None: ...


class PathsHandle(Protocol):
    """`ctx.stores.paths`: the extension's own directories (they exist)."""

    @property
    def data(self) -> str: ...

    @property
    def cache(self) -> str: ...

    @property
    def state(self) -> str: ...


class StoresHandle(Protocol):
    """`ctx.stores`."""

    @property
    def secrets(self) -> SecretsHandle: ...

    @property
    def settings(self) -> SettingsHandle: ...

    @property
    def paths(self) -> PathsHandle: ...


# --- the host API (spec 05) -------------------------------------------------------------------


class HostConversationsHandle(Protocol):
    """`ctx.host.conversations`: create/submit (grant `send`), meta/watch/list (grant `host`)."""

    def create(
        self,
        *,
        owner: str | None = None,
        sharing: Sharing = "private",
        name: str = "",
        source: str = "",
        id: str | None = None,
    ) -> str:
        """Create a conversation (owner: a username, default the extension's user); its id."""

    def submit(
        self,
        conversation_id: str,
        parts: str | list[dict[str, Any]],
        *,
        user: str | None = None,
        request_id: str | None = None,
        when_busy: WhenBusy = "queue",
    ) -> dict[str, Any] | NotReady:
        """Submit input as `user` (default the owner): the submission, with `idempotent`, or
        `NotReady()` (busy and `when_busy="reject"`)."""

    def meta(self, conversation_id: str) -> dict[str, Any]:
        """The conversation's view."""

    def watch(
        self, conversation_id: str, since_version: int = 0, *, timeout_s: float = 30.0
    ) -> Iterator[dict[str, Any]]:
        """The conversation's view each time its version moves (never inside a frame)."""

    # last: inside the class body, `list` names this method from here on
    def list(
        self, *, owner: str | None = None, archived: bool | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Conversation summaries, newest activity first."""


class HostUsersHandle(Protocol):
    """`ctx.host.users` (grant `host`)."""

    def get(self, username: str) -> dict[str, Any] | None: ...

    def list(self) -> list[dict[str, Any]]: ...


class HostAccessHandle(Protocol):
    """`ctx.host.access` (grant `host`)."""

    def access_of(
        self,
        principal: Principal | Caller | dict[str, Any] | str | None,
        resource: dict[str, Any],
    ) -> str:
        """`owner`, `read` or `none`: what `principal` (a `Principal`, a `Caller`, a username,
        `{"user": username}`; None or "" for anonymous) may do with `{owner, sharing}`."""


class HostIdentityHandle(Protocol):
    """`ctx.host.identity` (grant `host`)."""

    def acting_user(self, conversation_id: str) -> str | None:
        """Who the agent acts for in the conversation (its owner's username)."""


class HostHandle(Protocol):
    """`ctx.host`: the host API, each call gated by its grant and audited as `ext:<id>`."""

    @property
    def conversations(self) -> HostConversationsHandle: ...

    @property
    def users(self) -> HostUsersHandle: ...

    @property
    def access(self) -> HostAccessHandle: ...

    @property
    def identity(self) -> HostIdentityHandle: ...

    @property
    def interactions(self) -> InteractionsHandle: ...

    @property
    def ambient(self) -> AmbientHandle: ...


# --- the context ------------------------------------------------------------------------------


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

    def seconds_left(self) -> float | None:
        """Seconds left before the deadline of the call running now (a hook, route, slash
        command, notifier, worker run, `transact`/`update` frame), never negative; None when
        no deadline bounds it. At 0 the call is interrupted: leave a margin."""

    def collection(self, name: str) -> CollectionHandle[Any]: ...

    def document(self, name: str) -> DocumentHandle[Any]: ...

    @property
    def documents(self) -> DocumentsHandle:
        """`ctx.documents["notes"]` is `ctx.document("notes")`."""

    def observe(self, conversation_id: str) -> None:
        """Mark a conversation changed by this frame (its version is bumped on commit)."""

    def update(self, fn: Callable[[Context], T]) -> T:
        """Run a state-only update in a fresh transaction, from outside a hook."""

    def transact(self, fn: Callable[[Context], T]) -> T:
        """Run a full frame from the extension's own code (a route, a worker, a job)."""

    @property
    def timers(self) -> TimersHandle: ...

    @property
    def send(self) -> SendHandle: ...

    @property
    def attention(self) -> AttentionHandle: ...

    @property
    def interactions(self) -> InteractionsHandle: ...

    @property
    def ambient(self) -> AmbientHandle: ...

    @property
    def stores(self) -> StoresHandle: ...

    @property
    def host(self) -> HostHandle: ...

    # `ctx.interactions.*` and `ctx.ambient.*` under their flat names
    def seed_interaction(
        self, conversation_id: str, record: InteractionRecord | dict[str, Any]
    ) -> bool: ...

    def answer_interaction(self, conversation_id: str, call_id: str, answer: Any) -> bool: ...

    def settle_interaction(
        self, conversation_id: str, call_id: str, status: SettleStatus
    ) -> bool: ...

    def snapshot_interaction(self, conversation_id: str, call_id: str) -> dict[str, Any] | None: ...

    def set_ambient(self, conversation_id: str, record: AmbientRecord | dict[str, Any]) -> None: ...

    def clear_ambient(self, conversation_id: str, key: str) -> None: ...

    # reads for `run_tools` extensions (`run`: the `RunInfo` a hook received, or its id)
    def has_pending_steer(self, run: RunInfo | int) -> bool: ...

    def has_successful_tool_result(self, run: RunInfo | int, tool_call_id: str) -> bool: ...
