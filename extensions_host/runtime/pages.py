"""Pages: one outer transaction shared by several frames (group commit, spec 03). See
`frames.py` for the two kinds (isolated, optimistic) and what a page does once for its frames."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.db import transaction

from extensions_host.runtime import deadlines
from extensions_host.runtime.crashes import clear_deferred
from extensions_host.runtime.current import Boundary
from extensions_host.runtime.outcomes import FrameOutcome, HookFailure, reported
from extensions_host.runtime.roster_rows import RosterView, lock_roster_rows
from extensions_host.runtime.transient import with_transient_retries
from extensions_host.services.quotas import PageUsage

T = TypeVar("T")
logger = logging.getLogger("extensions_host.runtime")


class FramePage:
    """One outer transaction shared by several frames (group commit, spec 03).

    Isolated: each frame runs in a savepoint; a failing frame rolls back only its savepoint and
    its stop is written into the page's transaction; later frames of a stopped extension in the
    page are skipped. Optimistic (`isolated=False`): no savepoints; a failing frame aborts the
    page (`PageAbort`). The roster rows its frames use are held `FOR SHARE` until the page
    commits, so its time is bounded: a frame starts only when its whole deadline ends within the
    page's time limit (`admits`), the page's first frame whatever its deadline when
    `first_always`. A frame's own deadline is never cut by the page.
    """

    def __init__(
        self,
        *,
        boundary: Boundary,
        time_limit_s: float,
        db_limit_s: float | None = None,
        isolated: bool = True,
        first_always: bool = True,
    ) -> None:
        self.boundary = boundary
        self.deadline_at = time.monotonic() + time_limit_s
        # the database limits set for the whole page (a frame sets its own when its deadline
        # is another)
        self.db_limit_s = time_limit_s if db_limit_s is None else min(db_limit_s, time_limit_s)
        self.isolated = isolated
        self.first_always = first_always
        self.started = 0  # frames admitted so far
        self.stopped: set[str] = set()
        self.rows: dict[str, RosterView] = {}  # roster rows this page holds FOR SHARE
        self.usage = PageUsage()
        self.reports: list[tuple[str, FrameOutcome]] = []  # optimistic: heard after the page
        # failures of an aborted optimistic run, by (extension, hook, item): not run again
        self.known: dict[tuple[str, str, str], HookFailure] = {}

    def remaining(self) -> float:
        return max(self.deadline_at - time.monotonic(), deadlines.MIN_DEADLINE_SECONDS)

    def admits(self, deadline_s: float) -> bool:
        """Whether a frame with this whole deadline may start now: it ends within the page's
        time limit, or it is the page's first frame (`first_always`)."""
        if self.remaining() < deadline_s and not (self.first_always and not self.started):
            return False
        self.started += 1
        return True

    def lock(self, extension_ids: Iterable[str]) -> None:
        """Take the roster rows of these extensions `FOR SHARE` in one statement, in the page's
        own transaction (outside any frame's savepoint), for every frame of the page to use."""
        wanted = sorted(set(extension_ids) - set(self.rows))
        for row in lock_roster_rows(wanted) if wanted else ():
            self.rows[row.id] = row
            self.usage.seed(row.id, row.usage)


class PageAbort(Exception):
    """A frame of an optimistic page failed: the page is rolled back whole and run again."""

    def __init__(self, culprit: tuple[str, str, str], failure: HookFailure) -> None:
        super().__init__(f"{culprit[0]}: {failure.reason}")
        self.culprit = culprit
        self.failure = failure


@contextmanager
def frame_page(
    *,
    boundary: Boundary = "worker",
    time_limit_s: float | None = None,
    db_limit_s: float | None = None,
    isolated: bool = True,
    first_always: bool = True,
) -> Iterator[FramePage]:
    """Open a page: one durable transaction for several frames."""
    limit = time_limit_s if time_limit_s is not None else deadlines.default_deadline(boundary)
    try:
        with transaction.atomic(durable=True):
            page = FramePage(
                boundary=boundary,
                time_limit_s=limit,
                db_limit_s=db_limit_s,
                isolated=isolated,
                first_always=first_always,
            )
            deadlines.database_limits(page.db_limit_s)
            yield page
            page.usage.flush()
    finally:
        clear_deferred()  # the delivery counts of the page's frames that finished


def run_page(
    fn: Callable[[FramePage], T],
    *,
    boundary: Boundary = "worker",
    time_limit_s: float | None = None,
    db_limit_s: float | None = None,
    optimistic: bool = False,
    first_always: bool = True,
) -> T:
    """Run `fn(page)` in a page, again from the start after a host-transient database error.
    Optimistic: without savepoints first, and isolated again after a frame failed."""
    known: dict[tuple[str, str, str], HookFailure] = {}

    def attempt() -> T:
        with frame_page(
            boundary=boundary,
            time_limit_s=time_limit_s,
            db_limit_s=db_limit_s,
            isolated=not optimistic or bool(known),
            first_always=first_always,
        ) as page:
            page.known.update(known)
            result = fn(page)
        for extension_id, outcome in page.reports:
            reported(extension_id, outcome)
        return result

    try:
        return with_transient_retries(attempt)
    except PageAbort as abort:
        logger.info("optimistic page aborted (%s): running it again isolated", abort)
        known[abort.culprit] = abort.failure
        return with_transient_retries(attempt)
