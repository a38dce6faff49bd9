"""The conversation projection (spec 04): one slot per extension with `projection` or
`commands`, running or stopped; a failing `project` stops that extension and its slot shows
stopped in the same response."""

from __future__ import annotations

from typing import Any

from conversations.models import Conversation
from conversations.selectors import conversation_get
from core.auth import Principal
from extensions_host import registry
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.registry import LoadedExtension
from extensions_host.runtime.hooks import hook_project
from extensions_host.runtime.stops import extension_stop, missing_handler_reason
from extensions_host.services.commands import command_catalog
from extensions_host.surfaces.selectors import attention_visible

MSG_UPDATING = "Extension is updating to a new revision"


def projection_build(*, principal: Principal, conversation_id: str) -> dict[str, Any]:
    conversation = conversation_get(principal=principal, conversation_id=conversation_id)
    slots: dict[str, dict[str, Any]] = {}
    for row in RosterEntry.objects.exclude(status=ExtensionStatus.UNINSTALLED).order_by("id"):
        grants = set(row.admitted_grants)
        projects, commands = "projection" in grants, "commands" in grants
        loaded = registry.get(row.id)
        if not (projects or commands) or loaded is None:
            continue
        slots[row.id] = _slot(row, loaded, conversation.id, projects=projects, commands=commands)
    version = (
        Conversation.objects.filter(pk=conversation.id).values_list("version", flat=True).first()
    )
    return {
        "conversation_id": conversation.id,
        "version": version if version is not None else conversation.version,
        "slots": slots,
        # items of running extensions granted `attention` (a query-time join on the roster)
        "attention": attention_visible(conversation_id=conversation.id),
    }


def _stopped(revision: str, reason: str) -> dict[str, Any]:
    return {"status": "stopped", "revision": revision, "reason": reason}


def _slot(
    row: RosterEntry,
    loaded: LoadedExtension,
    conversation_id: str,
    *,
    projects: bool,
    commands: bool,
) -> dict[str, Any]:
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
    catalog = command_catalog(loaded) if commands else None
    outcome = hook_project(
        loaded=loaded, conversation_id=conversation_id, project=projects, catalog=catalog
    )
    if outcome.status == "stopped" or outcome.skip == "stopped":
        return _stopped(loaded.revision, outcome.reason)
    if outcome.ok:
        value, entries = outcome.value
    else:
        # a `Retry` (or a revision change mid-request): no value this time, not a stop
        value = None
        entries = None if catalog is None else [e.model_dump(mode="json") for e in catalog]
    slot: dict[str, Any] = {"status": "running", "revision": loaded.revision, "value": value}
    if entries is not None:
        slot["catalog"] = entries
    return slot
