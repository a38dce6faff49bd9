"""Load-time checks of contributions (a registry load listener): contributor-only extensions
carry no hooks or state; skill directories and web UI bundles resolve inside their package;
slash command names are unique across extensions; the selected bundle exists. Route body
limits are registered with the body-limit middleware here, before any request can reach them.
A failure raises `ExtensionLoadError`, naming the extension and the problem.
"""

from __future__ import annotations

import logging

from core.middleware import body_limits_replace
from extensions_host.contributions.services.bundles import bundles_check
from extensions_host.contributions.services.skills import skills_resolve
from extensions_host.registry import ExtensionLoadError, LoadedExtension
from extensions_host.sdk import Extension

logger = logging.getLogger("extensions_host.contributions")

ROUTE_PREFIX = "/v1/ext/"


def on_load(extensions: dict[str, LoadedExtension]) -> None:
    slash_owner: dict[str, str] = {}
    for loaded in extensions.values():
        definition = loaded.definition
        _contributor_only_check(definition)
        skills_resolve(definition)
        for command in definition.contributions.slash_commands:
            previous = slash_owner.get(command.name)
            if previous is not None:
                raise ExtensionLoadError(
                    f"Slash command {command.name!r} is declared twice: by extension "
                    f"{previous} and by extension {definition.id}"
                )
            slash_owner[command.name] = definition.id
    bundles_check(extensions)
    _provider_collisions_log(extensions)
    for loaded in extensions.values():
        route_limits_register(loaded)


def _contributor_only_check(definition: Extension) -> None:
    if not definition.contributor_only:
        return
    hooks = definition.hooks
    if (
        hooks.single
        or hooks.commands
        or hooks.tools
        or hooks.lifecycle
        or definition.collections
        or definition.documents
        or definition.commands
    ):
        raise ExtensionLoadError(
            f"Extension {definition.id} is contributor-only (identified by name) but declares "
            "hooks, commands or state; give it an id and a version"
        )


def _provider_collisions_log(extensions: dict[str, LoadedExtension]) -> None:
    """A provider name contributed twice is not an error (the last contributor wins); it is
    recorded here once per load and shown in `/v1/meta`."""
    owners: dict[str, list[str]] = {}
    for loaded in extensions.values():
        for provider in loaded.definition.contributions.providers:
            owners.setdefault(provider.name, []).append(loaded.id)
    for name, ids in owners.items():
        if len(ids) > 1:
            logger.warning(
                "provider_collision",
                extra={"event": "provider_collision", "provider": name, "extensions": ids},
            )


def route_prefix(extension_id: str, path: str) -> str:
    return f"{ROUTE_PREFIX}{extension_id}/{path}"


def route_limits_register(loaded: LoadedExtension) -> None:
    """Each route path's body limit (the largest of its methods; the route view enforces the
    exact one), so the middleware refuses an oversized body before anything reads it. They
    replace what an earlier load of the extension set: a route's limit raised or dropped
    holds from this load on."""
    limits: dict[str, int] = {}
    for route in loaded.definition.contributions.routes:
        prefix = route_prefix(loaded.id, route.path)
        limits[prefix] = max(limits.get(prefix, 0), route.body_limit)
    body_limits_replace(route_prefix(loaded.id, ""), limits)
