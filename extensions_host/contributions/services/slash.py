"""Slash commands (spec 05): the core ones (`help`, `fork`, `archive`, `rename`, `share`, run
through the conversation services, so every rule of the HTTP API applies) and the extensions'
(grant `commands`), listed by `GET /v1/commands` and invoked with `POST
/v1/conversations/{cid}/commands/{name}` `{args}` → `{notice?}` by the conversation's owner.

An extension's `run(ctx, invocation)` runs outside any frame with the route rules
(`outside.run_outside`): typed errors map without a stop, `Retry` → 503, a defect stops it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conversations.models import Sharing
from conversations.selectors import conversation_get, conversation_head
from conversations.services import conversation_fork, conversation_update
from core.auth import Principal
from core.db import BIGINT_MAX
from core.errors import HostError
from core.validation import decimal_number
from extensions_host import registry
from extensions_host.contributions.outside import extension_available, run_outside
from extensions_host.runtime import InvalidResult, detached_context
from extensions_host.runtime.frames import hook_deadline
from extensions_host.sdk import Caller, SlashCommand, SlashInvocation
from extensions_host.services.roster import extensions_running_with

ARGS_MAX = 4096
NOTICE_MAX = 2000
MSG_UNKNOWN = "Command is unknown"
MSG_ARGS_TOO_LONG = f"Command arguments are longer than {ARGS_MAX} characters"
MSG_NO_ARGS = "Command takes no arguments"
MSG_RENAME_ARGS = "rename needs the new name (1..200 characters)"
MSG_SHARE_ARGS = "share needs one of private, users, public"
MSG_FORK_ARGS = "fork takes an optional entry id"
MSG_FORK_EMPTY = "Nothing to fork: the conversation has no entries yet"
MSG_RESULT_INVALID = "Slash command result must be {notice} or a string"

CORE_DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "help": ("List the commands", ""),
    "fork": ("Fork the conversation (at its newest entry, or at an entry id)", "[entry id]"),
    "archive": ("Archive the conversation", ""),
    "rename": ("Rename the conversation", "<name>"),
    "share": ("Share the conversation", "private|users|public"),
}


def _eligible() -> list[tuple[str, SlashCommand]]:
    """Extension slash commands that can run now (running, revision, `commands` admitted)."""
    return [
        (extension_id, command)
        for extension_id, loaded in extensions_running_with("commands")
        for command in loaded.definition.contributions.slash_commands
    ]


_CORE_ORDER = {name: index for index, name in enumerate(CORE_DESCRIPTIONS)}


def command_position(row: dict[str, Any]) -> str:
    """Where a row of `slash_commands_list` sorts, as unique text (also the list's cursor
    position): core commands first, in their own order, then extension commands by name (unique
    across extensions: checked when they load)."""
    if row["source"] == "core":
        return f"0 {_CORE_ORDER[row['name']]:03d}"
    return f"1 {row['name']}"


def slash_commands_list() -> list[dict[str, Any]]:
    """Core commands first, then every available extension command (`command_position`)."""
    core = [
        {"name": name, "description": text, "args_hint": hint, "source": "core"}
        for name, (text, hint) in CORE_DESCRIPTIONS.items()
    ]
    contributed = [
        {
            "name": command.name,
            "description": command.description,
            "args_hint": command.args_hint,
            "source": extension_id,
        }
        for extension_id, command in _eligible()
    ]
    return sorted(core + contributed, key=command_position)


def slash_command_run(
    *, principal: Principal, conversation_id: str, name: str, args: str
) -> dict[str, Any]:
    """Run a slash command in a conversation the principal owns; returns `{notice?, …}`."""
    conversation_get(principal=principal, conversation_id=conversation_id, write=True)
    if len(args) > ARGS_MAX:
        raise HostError(
            "contract", "invalid", MSG_ARGS_TOO_LONG, details={"args": [MSG_ARGS_TOO_LONG]}
        )
    core = _CORE.get(name)
    if core is not None:
        return core(principal, conversation_id, args.strip())
    owner = next(
        (
            loaded.id
            for loaded in registry.loaded().values()
            if any(c.name == name for c in loaded.definition.contributions.slash_commands)
        ),
        None,
    )
    if owner is None:
        raise HostError("contract", "invalid", MSG_UNKNOWN)
    loaded, row = extension_available(extension_id=owner, grant="commands")
    command = next(c for c in loaded.definition.contributions.slash_commands if c.name == name)
    username = principal.user.get_username()
    caller = Caller(username=username, admin=principal.admin, service=principal.service)
    hook = f"slash {name}"
    ctx = detached_context(extension_id=owner, hook=hook, caller=caller, boundary="request")
    if ctx is None:
        raise HostError("extensions", "unavailable", "Extension is unavailable")
    invocation = SlashInvocation(
        conversation_id=conversation_id,
        name=name,
        args=args,
        username=username,
        admin=principal.admin,
    )

    def call() -> dict[str, Any]:
        result = command.run(ctx, invocation)
        if hasattr(result, "__await__"):
            return result  # the runner stops it as an async crossing
        return _result(result)

    return run_outside(
        loaded=loaded, hook=hook, limit=hook_deadline(row, loaded, command.deadline_s), call=call
    )


def _result(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        value = {"notice": value}
    if (
        not isinstance(value, dict)
        or set(value) - {"notice"}
        or not isinstance(value.get("notice", ""), str)
    ):
        raise InvalidResult(MSG_RESULT_INVALID)
    if "notice" in value:
        return {"notice": value["notice"][:NOTICE_MAX]}
    return {}


# --- the core commands ------------------------------------------------------------------------


def _no_args(args: str) -> None:
    if args:
        raise HostError("contract", "invalid", MSG_NO_ARGS, details={"args": [MSG_NO_ARGS]})


def _help(principal: Principal, conversation_id: str, args: str) -> dict[str, Any]:
    _no_args(args)
    lines = [
        f"/{item['name']}{' ' + item['args_hint'] if item['args_hint'] else ''} — "
        f"{item['description'] or item['source']}"
        for item in slash_commands_list()
    ]
    return {"notice": "\n".join(lines)[:NOTICE_MAX]}


def _fork(principal: Principal, conversation_id: str, args: str) -> dict[str, Any]:
    if args:
        at = decimal_number(args, maximum=BIGINT_MAX)
        if at is None:
            raise HostError("contract", "invalid", MSG_FORK_ARGS, details={"args": [MSG_FORK_ARGS]})
    else:
        head = conversation_head(conversation_id=conversation_id)
        if head is None:
            raise HostError("contract", "invalid", MSG_FORK_EMPTY)
        at = head
    created = conversation_fork(principal=principal, conversation_id=conversation_id, at=at)
    child = created.conversation.pk
    return {"notice": f"Forked into {child}", "conversation_id": child}


def _archive(principal: Principal, conversation_id: str, args: str) -> dict[str, Any]:
    _no_args(args)
    conversation_update(principal=principal, conversation_id=conversation_id, archived=True)
    return {"notice": "Conversation archived"}


def _rename(principal: Principal, conversation_id: str, args: str) -> dict[str, Any]:
    if not 1 <= len(args) <= 200:
        raise HostError("contract", "invalid", MSG_RENAME_ARGS, details={"args": [MSG_RENAME_ARGS]})
    conversation_update(principal=principal, conversation_id=conversation_id, name=args)
    return {"notice": f"Renamed to {args}"}


def _share(principal: Principal, conversation_id: str, args: str) -> dict[str, Any]:
    if args not in Sharing.values:
        raise HostError("contract", "invalid", MSG_SHARE_ARGS, details={"args": [MSG_SHARE_ARGS]})
    conversation_update(principal=principal, conversation_id=conversation_id, sharing=args)
    return {"notice": f"Sharing is now {args}"}


_CORE: dict[str, Callable[[Principal, str, str], dict[str, Any]]] = {
    "help": _help,
    "fork": _fork,
    "archive": _archive,
    "rename": _rename,
    "share": _share,
}
