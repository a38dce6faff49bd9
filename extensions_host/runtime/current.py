"""The frame a hook runs in, the per-thread "current frame", and the host's own interrupts.

A `Frame` exists only while its hook runs (`open`); the context handed to the hook is bound to
it. Guards compare the frame a write is attempted with against the current one: that is how a
write after the hook returned, from another thread, with another extension's context or in a
read-only hook is recognised as a defect.
"""

from __future__ import annotations

import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from extensions_host.runtime.pages import FramePage

FrameMode = Literal["write", "read", "state"]
# the deadline a call gets by default (5 s in a request, 30 s in a worker)
Boundary = Literal["request", "worker"]
# what a failing hook does: "stop" the extension (background hooks), or "return" typed SDK
# errors to the caller (commands, routes, `transact`, `update`)
Failures = Literal["stop", "return"]


class HostInterrupt(BaseException):
    """Raised by the host into extension code. A `BaseException`, so an extension's
    `except Exception` cannot swallow it."""


class HookDeadline(HostInterrupt):
    """The hook overran its deadline (raised by the SIGALRM handler)."""


class FrameDefect(HostInterrupt):
    """A guard saw a defect (a write outside the frame, a read-only violation, …)."""


class HostTransient(HostInterrupt):
    """A host-side transient database error inside a store call: the frame is retried."""


# The host process is being told to exit (gunicorn's worker timeout and shutdown signals raise
# SystemExit wherever the code is; Ctrl-C): never an extension's failure, always re-raised.
PROCESS_EXIT = (SystemExit, KeyboardInterrupt, GeneratorExit)


class TransientDatabaseError(Exception):
    """A frame (or page) hit a transient database error and must be retried from the start."""


class InvalidResult(Exception):
    """A hook returned a value that breaks its contract (schema, JSON, rules)."""


@dataclass(eq=False)
class Frame:
    """One hook of one extension running inside a host-owned transaction (or savepoint)."""

    extension_id: str
    revision: str
    hook: str
    mode: FrameMode
    grants: frozenset[str]
    quotas: dict[str, int]
    deadline_s: float
    page: FramePage | None = None
    # the deadline is an enclosing call's (a route's or worker run's `ctx.transact`, cut to its
    # time left): running into it is that call's overrun, not this frame's (no stop here)
    enclosed: bool = False
    started: float = field(default_factory=time.monotonic)
    # the thread running the hook: its database connection holds the frame's transaction, so a
    # write from any other thread (a copied context, `asyncio.to_thread`) would escape it
    thread: int = field(default_factory=threading.get_ident)
    open: bool = True
    observed: set[str] = field(default_factory=set)
    # the first guard violation: it stops the extension even if the hook swallowed the raise
    defect: str | None = None
    # a store error the hook may have swallowed: the frame cannot commit
    poisoned: BaseException | None = None
    # quota accounting: the committed usage (loaded at the first write) and this frame's delta
    usage_base: tuple[int, int] | None = None
    delta_records: int = 0
    delta_bytes: int = 0
    # per-capability bookkeeping for capabilities registered by other modules (timers, send, …)
    scratch: dict[str, Any] = field(default_factory=dict)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


_current: ContextVar[Frame | None] = ContextVar("hyphae_extension_frame", default=None)


def current_frame() -> Frame | None:
    """The frame whose hook is running in this context right now, if any (a thread handed a copy
    of the context sees it too: writes check `Frame.thread`)."""
    frame = _current.get()
    return frame if frame is not None and frame.open else None
