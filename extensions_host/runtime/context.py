"""The context objects handed to hooks, and the guards every state access goes through.

Guards:
- a **write** needs the current frame to be this context's frame (or, for a detached context
  from a route or worker, a frame of the same extension opened by `update`/`transact`), open,
  and writable. Otherwise it is a defect: inside some frame, that frame's extension is stopped
  (it ran the offending code); outside any frame, the context's extension is stopped now.
- a **read** with another extension's context inside a frame is a defect of that frame.
- a call whose grant is not admitted raises `AdmissionError(closed, "Extension is not granted
  <grant>")` (`require_grant`), like the host API (spec 05).
- a **write** from another thread than the frame's own (a thread handed a copy of the
  context, `asyncio.to_thread`) is a defect of that frame: its connection is not in the frame's
  transaction, so the write would escape it.
- store errors: a transient database error becomes `HostTransient` (the frame is retried; with
  no frame to retry, `store/unavailable`), `statement_timeout` becomes `HookDeadline`, anything
  else `StateError(unavailable)`.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from django.db import DatabaseError, IntegrityError

from core import clock
from extensions_host.runtime import deadlines
from extensions_host.runtime.current import (
    Boundary,
    Frame,
    FrameDefect,
    HookDeadline,
    HostTransient,
    current_frame,
)
from extensions_host.runtime.transient import is_statement_timeout, is_transient, store_unavailable
from extensions_host.sdk import AdmissionError, Caller, ExtensionStop, StateError
from extensions_host.services import documents as document_store
from extensions_host.services import records as record_store

if TYPE_CHECKING:
    from extensions_host.registry import LoadedExtension
    from extensions_host.sdk import Context

T = TypeVar("T")

MSG_OUTSIDE = "Extension write used outside its own core transaction"
MSG_OTHER_WRITE = "Extension write used another extension's context"
MSG_OTHER_READ = "Extension read used another extension's context"
MSG_STALE = "Extension write used a context of an earlier frame"
MSG_OTHER_THREAD = "Extension write used from another thread"
MSG_READ_ONLY = "Extension write used in a read-only hook"
MSG_NOT_GRANTED = "Extension is not granted {grant}"

# Capabilities other modules attach to every context (`ctx.timers`, `ctx.send`, …):
# name → factory(ctx) returning the handle. Their guards use `require_write`/`require_read`.
capabilities: dict[str, Callable[[HookContext], Any]] = {}


def register_capability(name: str, factory: Callable[[HookContext], Any]) -> None:
    capabilities[name] = factory


def defect(frame: Frame, message: str) -> NoReturn:
    """Mark the running frame defective (even if the hook swallows the raise) and interrupt."""
    if frame.defect is None:
        frame.defect = message
    raise FrameDefect(message)


def require_write(ctx: HookContext, *, capability: str = "state") -> Frame:
    """The frame a write through `ctx` belongs to, or a defect."""
    from extensions_host.runtime.stops import extension_stop, in_host_transaction

    frame = current_frame()
    if frame is None:
        reason = f"{ctx.hook} defect: {MSG_OUTSIDE}"
        stop = extension_stop(
            extension_id=ctx.extension_id,
            hook=ctx.hook,
            reason=reason,
            revision=ctx.revision,
            enclosing=in_host_transaction(),
        )
        raise ExtensionStop(stop.reason)
    if frame.thread != threading.get_ident():
        defect(frame, MSG_OTHER_THREAD)
    if frame.extension_id != ctx.extension_id:
        defect(frame, MSG_OTHER_WRITE)
    if ctx._frame is not None and ctx._frame is not frame:
        defect(frame, MSG_STALE)
    if frame.mode == "read":
        defect(frame, MSG_READ_ONLY)
    if frame.mode == "state" and capability != "state":
        raise StateError("unavailable", f"Only state is available inside update, not {capability}")
    return frame


def require_read(ctx: HookContext) -> Frame | None:
    frame = current_frame()
    if frame is not None and frame.extension_id != ctx.extension_id:
        defect(frame, MSG_OTHER_READ)
    return frame


def not_granted(grant: str) -> AdmissionError:
    """The one refusal of a call whose grant is not admitted (spec 05): a 409, not a retry."""
    return AdmissionError("closed", MSG_NOT_GRANTED.format(grant=grant))


def require_grant(ctx: HookContext, grant: str, frame: Frame | None = None) -> None:
    """Every grant-gated `ctx` call checks its grant here: `AdmissionError(closed)` without it."""
    own_frame = frame is not None and frame.extension_id == ctx.extension_id
    grants = frame.grants if own_frame and frame is not None else ctx.grants
    if grant not in grants:
        raise not_granted(grant)


@contextmanager
def store_call(frame: Frame | None) -> Iterator[None]:
    """Translate database errors raised by a store call (see module docstring)."""
    try:
        yield
    except DatabaseError as exc:
        if frame is not None:
            frame.poisoned = exc
        if is_statement_timeout(exc):
            raise HookDeadline("statement timeout") from exc
        if frame is None and is_transient(exc):
            # a read outside any frame (a route, slash command, notifier, worker): there is no
            # frame to retry, and host trouble is never the extension's defect (spec 02 §1)
            raise store_unavailable() from exc
        if is_transient(exc) or isinstance(exc, IntegrityError):
            # an integrity error here is a race with a concurrent frame (two first writes of
            # one key): retrying the frame sees the other's row
            raise HostTransient(str(exc)) from exc
        raise StateError("unavailable", "Extension state is unavailable") from exc


class CollectionAccess:
    """`ctx.collection(name)`: get/page anywhere in the extension; put/remove in its frame."""

    def __init__(self, ctx: HookContext, name: str) -> None:
        self._ctx = ctx
        self._name = name
        self._spec = record_store.collection_spec(ctx._loaded.definition, name)

    def get(self, key: str) -> Any:
        frame = require_read(self._ctx)
        require_grant(self._ctx, "state", frame)
        with store_call(frame):
            return record_store.record_get(
                extension_id=self._ctx.extension_id,
                collection=self._name,
                spec=self._spec,
                key=key,
            )

    def page(
        self, limit: int = record_store.MAX_PAGE, after: str | None = None, index: str | None = None
    ) -> list[Any]:
        frame = require_read(self._ctx)
        require_grant(self._ctx, "state", frame)
        with store_call(frame):
            return record_store.record_page(
                extension_id=self._ctx.extension_id,
                collection=self._name,
                spec=self._spec,
                limit=limit,
                after=after,
                index=index,
            )

    def put(self, value: Any) -> None:
        frame = require_write(self._ctx)
        require_grant(self._ctx, "state", frame)
        with store_call(frame):
            record_store.record_put(
                frame=frame, collection=self._name, spec=self._spec, value=value
            )

    def remove(self, key: str) -> bool:
        frame = require_write(self._ctx)
        require_grant(self._ctx, "state", frame)
        with store_call(frame):
            return record_store.record_remove(frame=frame, collection=self._name, key=key)


class DocumentAccess:
    """`ctx.document(name)`: read(conversation_id) anywhere; update(conversation_id, fn) in the
    frame (marks the conversation changed)."""

    def __init__(self, ctx: HookContext, name: str) -> None:
        self._ctx = ctx
        self._name = name
        self._spec = document_store.document_spec(ctx._loaded.definition, name)

    def read(self, conversation_id: str) -> Any:
        frame = require_read(self._ctx)
        require_grant(self._ctx, "state", frame)
        with store_call(frame):
            return document_store.document_read(
                extension_id=self._ctx.extension_id,
                name=self._name,
                spec=self._spec,
                conversation_id=conversation_id,
            )

    def update(self, conversation_id: str, fn: Callable[[Any], Any]) -> Any:
        frame = require_write(self._ctx)
        require_grant(self._ctx, "state", frame)
        with store_call(frame):
            # `fn` runs on the value read under the row's lock: no concurrent update is lost
            stored = document_store.document_update(
                extension_id=self._ctx.extension_id,
                name=self._name,
                spec=self._spec,
                conversation_id=conversation_id,
                fn=fn,
            )
        frame.observed.add(conversation_id)
        return stored


class _Documents:
    def __init__(self, ctx: HookContext) -> None:
        self._ctx = ctx

    def __getitem__(self, name: str) -> DocumentAccess:
        return DocumentAccess(self._ctx, name)


class HookContext:
    """What a hook receives as `ctx` (implements `extensions_host.sdk.Context`; the handles
    other apps attach through `register_capability` implement its protocols: `tests/sdk`)."""

    def __init__(
        self,
        *,
        loaded: LoadedExtension,
        hook: str,
        grants: frozenset[str],
        frame: Frame | None = None,
        caller: Caller | None = None,
        boundary: Boundary = "worker",
    ) -> None:
        self._loaded = loaded
        self._frame = frame
        # the kind of call the context was handed to: its `transact`/`update` frames get that
        # boundary's deadline (5 s in a request, 30 s in a worker)
        self._boundary: Boundary = boundary
        self.extension_id = loaded.id
        self.revision = loaded.revision
        self.hook = hook
        self.grants = grants
        self.caller = caller

    def __repr__(self) -> str:
        return f"<context of {self.extension_id} in {self.hook}>"

    def __getattr__(self, name: str) -> Any:
        factory = capabilities.get(name)
        if factory is None:
            raise AttributeError(name)
        return factory(self)

    def now_ms(self) -> int:
        return clock.now_ms()

    def new_id(self) -> str:
        # 12 hex digits of milliseconds (sortable until the year 10889) + 80 random bits
        return f"{clock.now_ms():012x}{secrets.token_hex(10)}"

    def seconds_left(self) -> float | None:
        # the innermost bounded call running now: this hook's frame, or the route, slash
        # command, notifier or worker run the context was handed to (or a frame it opened)
        return deadlines.seconds_left()

    def collection(self, name: str) -> CollectionAccess:
        return CollectionAccess(self, name)

    def document(self, name: str) -> DocumentAccess:
        return DocumentAccess(self, name)

    @property
    def documents(self) -> _Documents:
        return _Documents(self)

    def observe(self, conversation_id: str) -> None:
        frame = require_write(self)
        frame.observed.add(document_store.check_conversation_id(conversation_id))

    def update(self, fn: Callable[[HookContext], T]) -> T:
        from extensions_host.runtime.transact import context_update

        return context_update(self, fn)

    def transact(self, fn: Callable[[HookContext], T]) -> T:
        from extensions_host.runtime.transact import context_transact

        return context_transact(self, fn)


if TYPE_CHECKING:

    def _implements_context(ctx: HookContext) -> Context:
        return ctx  # mypy checks HookContext against the SDK's protocol
