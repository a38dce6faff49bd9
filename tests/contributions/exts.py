"""Test extensions with contributions, built by functions so each test varies them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import JsonResponse
from pydantic import BaseModel

from extensions_host.runtime import detached_context
from extensions_host.sdk import (
    Collection,
    Extension,
    Notifier,
    Provider,
    Route,
    SlashCommand,
    WebUIBundle,
)

# Filled by handlers so tests can assert a handler ran (or never ran).
calls: list[str] = []


def echo_route(ctx: Any, request: Any) -> Any:
    calls.append(f"{request.method} {ctx.caller.username if ctx.caller else ''}")
    return {"ok": True, "user": ctx.caller.username if ctx.caller else "", "n": len(request.body)}


def make_routes_ext(
    ext_id: str = "web",
    *,
    grants: set[str] | None = None,
    handler: Callable[..., Any] = echo_route,
    body_limit: int = 1024,
    deadline_s: float | None = None,
) -> Extension:
    return Extension(
        id=ext_id,
        version="1.0.0",
        grants={"routes", "state"} if grants is None else grants,
        routes=[
            Route("GET", "status", handler=handler, auth="public"),
            Route("GET", "me", handler=handler, auth="user"),
            Route("POST", "me", handler=handler, auth="user", body_limit=body_limit),
            Route("POST", "admin/reset", handler=handler, auth="admin"),
            Route("POST", "upload", handler=handler, auth="user", body_limit=body_limit),
            Route("GET", "raw", handler=lambda ctx, r: JsonResponse({"raw": 1}, status=201)),
        ],
        deadline_s=deadline_s,
    )


class Note(BaseModel):
    key: str


def make_notes_route_ext(
    handler: Callable[..., Any], *, deadline_s: float | None = None
) -> Extension:
    """`POST /v1/ext/notes/me` with its own deadline `deadline_s`, and a `note` collection."""
    return Extension(
        id="notes",
        version="1.0.0",
        grants={"routes", "state"},
        collections={"note": Collection(Note, key=lambda note: note.key)},
        routes=[Route("POST", "me", handler=handler, deadline_s=deadline_s)],
    )


def make_slash_ext(
    ext_id: str = "todo",
    *,
    run: Callable[..., Any] | None = None,
    name: str = "todo",
    deadline_s: float | None = None,
) -> Extension:
    def default(ctx: Any, invocation: Any) -> Any:
        calls.append(f"{invocation.name} {invocation.args} {invocation.username}")
        return {"notice": f"added {invocation.args}"}

    return Extension(
        id=ext_id,
        version="1.0.0",
        grants={"commands"},
        slash_commands=[
            SlashCommand(
                name,
                run=run or default,
                description="Add a todo",
                args_hint="<text>",
                deadline_s=deadline_s,
            )
        ],
    )


def make_notifier_ext(
    ext_id: str = "ntfy", *, notify: Callable[..., Any], name: str = "push"
) -> Extension:
    return Extension(
        id=ext_id,
        version="1.0.0",
        grants={"notify"},
        notifiers=[Notifier(name, notify=notify)],
    )


def make_provider_ext(
    ext_id: str,
    *,
    providers: list[Provider],
) -> Extension:
    return Extension(id=ext_id, version="1.0.0", grants={"providers"}, providers=providers)


def make_skills_ext(ext_id: str = "skilled", skills: list[str] | None = None) -> Extension:
    return Extension(
        id=ext_id,
        version="1.0.0",
        skills=["skills/summarize", "skills/plain"] if skills is None else skills,
    )


def make_bundle_ext(name: str = "testui", directory: str = "webui") -> Extension:
    return Extension(name=name, webui_bundles=[WebUIBundle(name, directory)])


def make_host_ext(ext_id: str = "bridge", *, grants: set[str]) -> Extension:
    return Extension(id=ext_id, version="1.0.0", grants=grants)


# every grant the host API's areas are gated by
ALL = {"send", "host", "attention", "state"}


def ctx_of(extension_id: str) -> Any:
    """The extension's context outside a frame (as a route, worker or notifier has it)."""
    ctx = detached_context(extension_id=extension_id, hook="test")
    assert ctx is not None
    return ctx
