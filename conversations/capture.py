"""What a claim captures for its run (spec 01 "What a claim captures", spec 04 participation).

`run_capture(run)` is the ONE place that computes it. The claim service calls it after the
claim committed and outside any write transaction (the participation hooks are read-only), then
stores the result on the run and returns it to the runtime. Today nothing participates: the
extensions issue fills this function in and changes nothing else.

A participation rule violation raises `CaptureRejected`: the claim service then releases the
run and re-queues its submissions in one transaction, calls `in_release_transaction` inside that
same transaction (e.g. to stop the offending extension), and answers with `error` (422).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conversations.models import Run
from core.errors import HostError


class CaptureRejected(Exception):
    """A participation rule was violated while capturing; the claim must be undone."""

    def __init__(
        self, error: HostError, *, in_release_transaction: Callable[[], None] | None = None
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.in_release_transaction = in_release_transaction


def capture_empty() -> dict[str, Any]:
    return {
        "participants": [],
        "prompt_sections": [],
        "tool_modules": [],
        "skills": [],
        "files": [],
        "compaction_handoff": None,
    }


def run_capture(run: Run) -> dict[str, Any]:
    """Participants, prompt sections, tool modules, skills, files and compaction handoff."""
    # imported here: the extension host depends on conversations, never the reverse at import
    from extensions_host.surfaces.services.participation import participation_capture

    return participation_capture(run)
