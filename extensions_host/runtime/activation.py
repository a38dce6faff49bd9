"""Per-process activation: the read-only `activate(ctx)` runs when this process first uses an
extension, and again after it sees a resume or a new revision (the roster's activation epoch
moved). Frames run it before their hook (`ensure_activated`); code outside frames gets it from
`outside.activate_outside`."""

from __future__ import annotations

import threading

from extensions_host.registry import LoadedExtension
from extensions_host.runtime.context import HookContext
from extensions_host.runtime.current import Frame
from extensions_host.runtime.invoke import invoke
from extensions_host.runtime.outcomes import HookFailure
from extensions_host.runtime.pages import FramePage
from extensions_host.runtime.roster_rows import RosterView

_activation_lock = threading.Lock()
_activated: dict[str, tuple[str, int]] = {}


def is_activated(loaded: LoadedExtension, epoch: int) -> bool:
    """Whether this process ran `activate` at the loaded revision and this activation epoch."""
    with _activation_lock:
        return _activated.get(loaded.id) == (loaded.revision, epoch)


def ensure_activated(
    loaded: LoadedExtension,
    row: RosterView,
    grants: frozenset[str],
    limit: float,
    page: FramePage | None,
) -> HookFailure | None:
    """Run `activate` in the frame being started, unless this process already ran it at the
    row's revision and epoch; its failure, if it failed (the frame then rolls back)."""
    if is_activated(loaded, row.activation_epoch):
        return None
    fn = loaded.definition.hooks.single.get("activate")
    if fn is not None:
        frame = Frame(
            extension_id=loaded.id,
            revision=loaded.revision,
            hook="activation",
            mode="read",
            grants=grants,
            quotas={},
            deadline_s=limit,
            page=page,
        )
        ctx = HookContext(loaded=loaded, hook="activation", grants=grants, frame=frame)
        _, failure = invoke(frame, ctx, fn, None, "stop", 0)
        if failure is not None:
            return failure
    with _activation_lock:
        _activated[loaded.id] = (loaded.revision, row.activation_epoch)
    return None


def forget_activations() -> None:
    """A process restart, as far as activation goes (tests, the author harness)."""
    with _activation_lock:
        _activated.clear()
