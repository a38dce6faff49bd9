"""The runtime: the one place any extension hook is invoked (frames, locks, deadlines, stop
rules, observation). Read `frames.py` first (`run_frame`), then `invoke.py` (the call and its
classification), `pages.py` (frames sharing a commit), `context.py` (guards) and `stops.py`.
`outside.py` and `transact.py` are the extension's code outside hooks and the frames it starts."""

from __future__ import annotations

from extensions_host.runtime.activation import forget_activations
from extensions_host.runtime.context import (
    HookContext,
    register_capability,
    require_grant,
    require_read,
    require_write,
)
from extensions_host.runtime.current import Frame, InvalidResult, current_frame
from extensions_host.runtime.frames import observation_listeners, run_frame
from extensions_host.runtime.outcomes import FrameOutcome
from extensions_host.runtime.pages import FramePage, frame_page, run_page
from extensions_host.runtime.stops import (
    StopRecord,
    extension_stop,
    missing_handler_reason,
    secret_sources,
    stop_listeners,
)
from extensions_host.runtime.transact import detached_context

__all__ = [
    "Frame",
    "FrameOutcome",
    "FramePage",
    "HookContext",
    "InvalidResult",
    "StopRecord",
    "current_frame",
    "detached_context",
    "extension_stop",
    "forget_activations",
    "frame_page",
    "missing_handler_reason",
    "observation_listeners",
    "register_capability",
    "require_grant",
    "require_read",
    "require_write",
    "run_frame",
    "run_page",
    "secret_sources",
    "stop_listeners",
]
