"""Pieces every conversation service shares: messages, the version bump, content checks."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from conversations.models import Conversation
from core import clock
from core.errors import HostError
from core.validation import json_problem, json_size

logger = logging.getLogger(__name__)

# Error messages are constants: clients and tests rely on them (the not-found ones are the
# selectors').
MSG_ID_TAKEN = "Conversation id is taken"
MSG_ID_INVALID = "Conversation id must be 1-64 of A-Z a-z 0-9 _ -"
MSG_BUSY = "Conversation is busy"
MSG_ARCHIVED = "Conversation is archived"
MSG_REQUEST_ID_REUSED = "Request id was already used with different content"
MSG_SUBMISSION_NOT_FOUND = "Submission not found"
MSG_NOT_QUEUED = "Submission is no longer queued"
MSG_FORK_POINT = "Fork point is not an entry of this conversation"
MSG_RUN_NOT_CLAIMED = "Run is not claimed"
MSG_RUN_RELEASED = "Run was released after its lease expired; claim again"
MSG_RUN_OTHER_CONVERSATION = "Run belongs to another conversation"
MSG_SETTLED_DIFFERENTLY = "Run is already settled with a different outcome"
MSG_ANSWER_ENTRY = "Answer entry is not an entry of this conversation"
MSG_CLAIM_KEY_TAKEN = "Claim key was used for another conversation"
MSG_ENTRY_KEY_REUSED = "Entry key was already used with different content"
MSG_TEXT_TOO_LARGE = "Submission text is too large"
MSG_CONTENT_TOO_LARGE = "Entry content is too large"
MSG_CONTENT_INVALID = "Content is invalid"
MSG_LEASE_EXPIRED = "lease expired"

REQUEST_ID_MAX = 128
TEXT_LIMIT_BYTES = 64 * 1024  # submission text, all text parts together (spec 01)
CONTENT_LIMIT_BYTES = 1024 * 1024  # one entry's content, JSON-encoded (spec 01)
MAX_PARTS = 256

# What changed, for watchers (the SSE stream of a later issue sends it with the version).
CHANGES = frozenset(
    {
        "conversation",
        "entries",
        "submissions",
        "runs",
        "attention",
        "ambient",
        "projection",
        "artifacts",
    }
)

PART_TYPES_SUBMISSION = frozenset({"text", "image", "file"})
PART_TYPES_ENTRY = frozenset({"text", "image", "file", "tool_call", "tool_result"})
# Keys each part type may carry; `meta` is every part's escape hatch for runtime metadata.
_PART_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "meta"}),
    "image": frozenset({"type", "url", "path", "name", "mime_type", "meta"}),
    "file": frozenset({"type", "url", "path", "name", "mime_type", "meta"}),
    "tool_call": frozenset({"type", "id", "name", "arguments", "meta"}),
    "tool_result": frozenset({"type", "tool_call_id", "name", "ok", "content", "meta"}),
}


def touch_sql(*, stamp_activity: bool = False) -> str:
    """The statement of `conversation_touch`: its parameters are the activity instant (with
    `stamp_activity`) and the conversation id. A service that bumps the version inside a
    statement of its own (the artifact emit's write) uses it too, and tells the watchers
    after its commit as `conversation_touch` does."""
    quote = connection.ops.quote_name
    table = quote(Conversation._meta.db_table)
    version = quote(Conversation._meta.get_field("version").column)
    stamp = ""
    if stamp_activity:
        stamp = f", {quote(Conversation._meta.get_field('last_activity_at').column)} = %s"
    return (
        f"UPDATE {table} SET {version} = {version} + 1{stamp} "  # noqa: S608 (model names)
        f"WHERE {quote(Conversation._meta.pk.column)} = %s"
    )


def conversation_touch(*, conversation_id: str, changed: str, stamp_activity: bool = False) -> int:
    """Bump the conversation's version (watchers compare versions); returns rows updated.

    `stamp_activity` is passed by exactly two callers: submission admission and run settlement
    (spec 01: activity is stamped at those two moments and no other). The update is an F
    expression, so concurrent touches never lose a bump; it also takes the row lock, which
    the callers rely on for their lock order (conversation first).
    """
    if changed not in CHANGES:
        raise ValueError(f"unknown change kind {changed!r}")
    params: list[Any] = [conversation_id]
    if stamp_activity:
        params.insert(0, connection.ops.adapt_datetimefield_value(clock.now()))
    with connection.cursor() as cursor:  # a plain statement: admissions and settlements run it
        cursor.execute(touch_sql(stamp_activity=stamp_activity), params)
        updated = cursor.rowcount
    if updated:
        transaction.on_commit(
            lambda: conversation_changed(conversation_id=conversation_id, changed=changed),
            robust=True,
        )
    return updated


def conversation_lock(*, conversation_id: str, skip_locked: bool = False) -> bool:
    """Lock the conversation row (FOR NO KEY UPDATE); False when missing (or skipped).

    Lock order everywhere in this app: the conversation row first, then its submissions, runs
    and the settled counter, so no two services can deadlock on each other. NO KEY: inserts
    of rows referencing the conversation (entries, runs) only need KEY SHARE and go on.
    """
    return bool(
        list(
            Conversation.objects.select_for_update(no_key=True, skip_locked=skip_locked)
            .filter(pk=conversation_id)
            .values_list("pk", flat=True)
        )
    )


# Called after commit with (conversation_id, changed): the live event stream subscribes here.
change_listeners: list[Callable[[str, str], None]] = []


def conversation_changed(*, conversation_id: str, changed: str) -> None:
    """After-commit hook for watchers."""
    logger.debug("conversation %s changed: %s", conversation_id, changed)
    for listener in change_listeners:
        listener(conversation_id, changed)


def echo_wake() -> None:
    """Ask the built-in echo runtime to look for work soon (after commit; echo mode only)."""
    if settings.AGENT_RUNTIME != "echo":
        return
    from conversations import tasks  # the tasks module imports services: import late

    transaction.on_commit(tasks.echo_sweep.delay, robust=True)


def json_check(value: Any, *, field: str) -> int:
    """Reject what the database cannot store (`core.validation.json_problem`: NUL characters,
    lone surrogates, non-finite numbers, nesting deeper than 32); return the UTF-8 size of
    the JSON encoding."""
    problem = json_problem(value)
    if problem is not None:
        raise _invalid(field, problem)
    return json_size(value)


def _invalid(field: str, message: str) -> HostError:
    return HostError("contract", "invalid", MSG_CONTENT_INVALID, details={field: [message]})


def content_size_check(size: int, *, field: str) -> None:
    """An entry's content is at most 1 MiB encoded (spec 01), whoever writes it: a runtime
    append, or a submission whose parts become its entry (`meta` and references count too)."""
    if size > CONTENT_LIMIT_BYTES:
        raise HostError(
            "limit",
            "too_large",
            MSG_CONTENT_TOO_LARGE,
            details={field: [f"At most {CONTENT_LIMIT_BYTES} bytes encoded."]},
        )


def parts_check(
    parts: Any, *, allowed: Iterable[str], field: str = "parts"
) -> tuple[list[dict[str, Any]], int, int]:
    """Validate content parts; return (parts, text bytes, encoded bytes).

    Parts reference binary content by URL or path; the host stores none (spec 01).
    """
    allowed = frozenset(allowed)
    if not isinstance(parts, list) or not parts:
        raise _invalid(field, "Must be a non-empty list of parts.")
    if len(parts) > MAX_PARTS:
        raise _invalid(field, f"At most {MAX_PARTS} parts.")
    text_bytes = 0
    for index, part in enumerate(parts):
        where = f"{field}[{index}]"
        if not isinstance(part, dict) or part.get("type") not in allowed:
            raise _invalid(where, f"Must be an object with type one of {sorted(allowed)}.")
        kind = part["type"]
        unknown = sorted(set(part) - _PART_KEYS[kind])
        if unknown:
            raise _invalid(where, f"Unknown keys for a {kind} part: {unknown}.")
        _PART_CHECKS[kind](part, where)
        if kind == "text":
            text_bytes += len(part["text"].encode("utf-8", "surrogatepass"))
    size = json_check(parts, field=field)
    return parts, text_bytes, size


def _str(part: dict[str, Any], key: str, where: str, *, required: bool, limit: int) -> None:
    value = part.get(key)
    if value is None and not required:
        return
    if not isinstance(value, str) or (required and not value):
        raise _invalid(where, f"`{key}` must be a non-empty string.")
    if len(value) > limit:
        raise _invalid(where, f"`{key}` must be at most {limit} characters.")


def _text_part(part: dict[str, Any], where: str) -> None:
    if not isinstance(part.get("text"), str):
        raise _invalid(where, "`text` must be a string.")


def _ref_part(part: dict[str, Any], where: str) -> None:
    if part.get("url") is None and part.get("path") is None:
        raise _invalid(where, "Needs `url` or `path`.")
    for key in ("url", "path"):
        _str(part, key, where, required=False, limit=2048)
    _str(part, "name", where, required=False, limit=256)
    _str(part, "mime_type", where, required=False, limit=128)


def _tool_call_part(part: dict[str, Any], where: str) -> None:
    _str(part, "id", where, required=True, limit=128)
    _str(part, "name", where, required=True, limit=128)
    if not isinstance(part.get("arguments", {}), dict):
        raise _invalid(where, "`arguments` must be an object.")


def _tool_result_part(part: dict[str, Any], where: str) -> None:
    _str(part, "tool_call_id", where, required=True, limit=128)
    _str(part, "name", where, required=False, limit=128)
    if "ok" in part and not isinstance(part["ok"], bool):
        raise _invalid(where, "`ok` must be a boolean.")


_PART_CHECKS: dict[str, Callable[[dict[str, Any], str], None]] = {
    "text": _text_part,
    "image": _ref_part,
    "file": _ref_part,
    "tool_call": _tool_call_part,
    "tool_result": _tool_result_part,
}
