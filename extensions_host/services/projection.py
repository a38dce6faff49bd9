"""The conversation projection (spec 04): one slot per extension with `projection` or
`commands`, running or stopped; a failing `project` stops that extension and its slot shows
stopped in the same response."""

from __future__ import annotations

from typing import Any, NamedTuple

from conversations.selectors import conversation_get
from core.auth import Principal
from extensions_host import registry
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.registry import LoadedExtension
from extensions_host.runtime.deadlines import default_deadline
from extensions_host.runtime.frames import hook_deadline
from extensions_host.runtime.hooks import hook_project
from extensions_host.runtime.outcomes import FrameOutcome
from extensions_host.runtime.pages import FramePage, run_page
from extensions_host.runtime.stops import extension_stop, missing_handler_reason
from extensions_host.services.commands import command_catalog
from extensions_host.surfaces.selectors import attention_visible

MSG_UPDATING = "Extension is updating to a new revision"


def projection_build(*, principal: Principal, conversation_id: str) -> dict[str, Any]:
    """Every slot, the conversation's version and the visible attention items.

    The `project` hooks of all the slots run as the frames of one optimistic page (group
    commit: one transaction, the roster rows locked in one statement), the longest deadline
    first. The page's time limit is twice the request deadline, or the longest of the hooks'
    deadlines when that is longer (an extension may be given up to 300 s: its hook still runs),
    and a frame starts only with its whole deadline ahead: a slow projection is stopped at its
    own deadline, and the slots it leaves no time for answer `value: null` this time (running,
    not stopped)."""
    conversation = conversation_get(principal=principal, conversation_id=conversation_id)
    slots: dict[str, dict[str, Any]] = {}
    projected: list[tuple[_Row, LoadedExtension, bool, bool]] = []
    attention: list[str] = []  # running and granted `attention`: their items are visible
    rows = RosterEntry.objects.exclude(status=ExtensionStatus.UNINSTALLED).order_by("id")
    for row in map(_Row._make, rows.values_list(*_Row._fields)):
        grants = set(row.admitted_grants or ())
        if row.status == ExtensionStatus.RUNNING and "attention" in grants:
            attention.append(row.id)
        projects, commands = "projection" in grants, "commands" in grants
        loaded = registry.get(row.id)
        if not (projects or commands) or loaded is None:
            continue
        slots[row.id] = _unprojected(row, loaded, projects=projects)
        if not slots[row.id]:
            projected.append((row, loaded, projects, commands))
    if projected:
        deadline = default_deadline("request")
        deadlines = {
            row.id: hook_deadline(None, loaded, row.deadline_seconds, boundary="request")
            for row, loaded, *_ in projected
        }
        projected.sort(key=lambda item: -deadlines[item[0].id])  # stable: by id within a tie
        outcomes = run_page(
            lambda page: _project_all(page, projected, conversation.id),
            boundary="request",
            time_limit_s=max(2 * deadline, *deadlines.values()),
            db_limit_s=deadline,
            optimistic=True,
            first_always=False,
        )
        for (row, loaded, _, commands), outcome in zip(projected, outcomes, strict=True):
            slots[row.id] = _slot(loaded, outcome, commands=commands)
    # an extension this request stopped (a failing or missing `project`) shows no items in this
    # same response: a stop hides them everywhere at once (spec 04)
    attention = [ext_id for ext_id in attention if not _stopped_here(slots.get(ext_id))]
    return {
        "conversation_id": conversation.id,
        # read before the hooks ran: the values are at least as new as this version
        "version": conversation.version,
        "slots": slots,
        "attention": attention_visible(conversation_id=conversation.id, extension_ids=attention),
    }


class _Row(NamedTuple):
    """What the projection reads of a roster row (plain values: no model instances)."""

    id: str
    status: str
    revision: str
    reason: str
    admitted_grants: list[str]
    deadline_seconds: float | None


def _stopped(revision: str, reason: str) -> dict[str, Any]:
    return {"status": "stopped", "revision": revision, "reason": reason}


def _stopped_here(slot: dict[str, Any] | None) -> bool:
    """The slot of an extension read as running came back stopped (its `project` failed or is
    missing, or a stop committed meanwhile). A slot shown stopped for a revision change is not
    a stop: the extension runs and its items stay visible."""
    return slot is not None and slot["status"] == "stopped" and slot["reason"] != MSG_UPDATING


def _unprojected(row: _Row, loaded: LoadedExtension, *, projects: bool) -> dict[str, Any]:
    """The slot of an extension whose hooks do not run for this projection ({} when they do)."""
    if row.status == ExtensionStatus.STOPPED:
        return _stopped(row.revision, row.reason)
    if row.revision != loaded.revision:
        return _stopped(row.revision, MSG_UPDATING)
    if projects and "project" not in loaded.definition.hooks.single:
        stop = extension_stop(
            extension_id=row.id,
            hook="projection",
            reason=missing_handler_reason("projection"),
            revision=loaded.revision,
        )
        return _stopped(loaded.revision, stop.reason)
    return {}


def _project_all(
    page: FramePage,
    projected: list[tuple[_Row, LoadedExtension, bool, bool]],
    conversation_id: str,
) -> list[FrameOutcome]:
    page.lock(row.id for row, *_ in projected)
    return [
        hook_project(
            loaded=loaded,
            conversation_id=conversation_id,
            project=projects,
            catalog=command_catalog(loaded) if commands else None,
            page=page,
        )
        for _, loaded, projects, commands in projected
    ]


def _slot(loaded: LoadedExtension, outcome: FrameOutcome, *, commands: bool) -> dict[str, Any]:
    if outcome.status == "stopped" or outcome.skip == "stopped":
        return _stopped(loaded.revision, outcome.reason)
    if outcome.ok:
        value, entries = outcome.value
    else:
        # a `Retry`, a revision change mid-request, or no time left in the page: no value this
        # time, not a stop
        value = None
        catalog = command_catalog(loaded) if commands else None
        entries = None if catalog is None else [e.model_dump(mode="json") for e in catalog]
    slot: dict[str, Any] = {"status": "running", "revision": loaded.revision, "value": value}
    if entries is not None:
        slot["catalog"] = entries
    return slot
