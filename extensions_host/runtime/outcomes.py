"""What one frame came to: its outcome for the caller (`FrameOutcome`), the failure that rolled
it back (`HookFailure`), and the listeners that hear of every frame whose hook ran."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from extensions_host.sdk import SdkError

if TYPE_CHECKING:
    from extensions_host.runtime.pages import FramePage

logger = logging.getLogger("extensions_host.runtime")
Status = Literal["ok", "skipped", "stopped", "failed", "retry"]
Skip = Literal["", "missing", "uninstalled", "stopped", "revision", "prepare", "page"]


@dataclass(frozen=True)
class FrameOutcome:
    """What happened to one frame.

    - `ok`: committed; `value` is the hook's (validated) result.
    - `skipped`: the hook did not run (`skip` says why; `reason` is the stored stop reason).
    - `stopped`: rolled back and the extension stopped with `reason`.
    - `failed`: rolled back; `error` is the typed SDK error for the caller (commands, …).
    - `retry`: rolled back on `Retry`; offer the item again after `retry_after` seconds.
    """

    status: Status
    value: Any = None
    error: SdkError | None = None
    reason: str = ""
    skip: Skip = ""
    retry_after: float | None = None
    elapsed_s: float = 0.0
    hook: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# Called with (extension id, outcome) for every frame whose hook ran (metrics subscribe).
outcome_listeners: list[Callable[[str, FrameOutcome], None]] = []


@dataclass(frozen=True)
class HookFailure:
    """Why a frame was rolled back: `kind` says what the frame's caller hears of it.

    "stop": the extension is stopped with `reason`; "typed": `error` goes back to the caller;
    "retry": the item is offered again after `retry_after`; "transient": host trouble, the
    frame (or its page) runs again."""

    # "enclosing": the deadline of the call the frame runs in (a route, a worker run) ran out:
    # rolled back, no stop here; `HookDeadline` goes on to that call, whose rule applies (a
    # route's overrun stops the extension, a worker run's is a failed run, spec 03)
    kind: Literal["stop", "typed", "retry", "transient", "enclosing"]
    hook: str
    reason: str = ""
    cause: BaseException | None = None
    error: SdkError | None = None
    retry_after: float | None = None


def reported(
    extension_id: str, outcome: FrameOutcome, page: FramePage | None = None
) -> FrameOutcome:
    """Tell the outcome listeners of a frame whose hook ran (an optimistic page's frames are
    heard only once the page committed)."""
    if page is not None and not page.isolated:
        page.reports.append((extension_id, outcome))  # heard if the page is not aborted
        return outcome
    for listener in outcome_listeners:
        try:
            listener(extension_id, outcome)
        except Exception:  # observing must never change what the frame did
            logger.exception("frame outcome listener failed")
    return outcome
