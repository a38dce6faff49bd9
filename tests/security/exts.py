"""The extension the security tests install: a conversation command, a global command, an
admin-only command, a projection, interactions and a job, so every extension-backed endpoint
reaches real objects (and so real access checks) instead of stopping at 404/503."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from extensions_host.background.declarations import Job, add_job
from extensions_host.sdk import Collection, Extension, Route


class Note(BaseModel):
    key: str
    text: str = ""
    conversation: str = ""


class NoteInput(BaseModel):
    key: str = Field(min_length=1, max_length=64)
    text: str = Field(default="", max_length=500)


class Count(BaseModel):
    count: int


guarded = Extension(
    id="guarded",
    version="1.0.0",
    grants={"state", "commands", "projection", "attention", "timers"},
    collections={"note": Collection(Note, key=lambda n: n.key, index=lambda n: n.conversation)},
    projection_schema=Count,
    interaction_kinds=("approval",),
)


@guarded.command("note", scope="conversation", input=NoteInput)
def note(ctx: Any, conversation_id: str, data: NoteInput) -> dict[str, Any]:
    ctx.collection("note").put(Note(key=data.key, text=data.text, conversation=conversation_id))
    return {"key": data.key}


@guarded.command("count", scope="global")
def count(ctx: Any, data: Any) -> dict[str, Any]:
    return {"count": len(ctx.collection("note").page(limit=64))}


@guarded.command("purge", scope="global", admin_only=True)
def purge(ctx: Any, data: Any) -> dict[str, Any]:
    return {"purged": 0}


@guarded.project
def project(ctx: Any, conversation_id: str) -> Count:
    return Count(count=len(ctx.collection("note").page(limit=64, index=conversation_id)))


def tidy(ctx: Any, run: Any) -> None:
    """The job's action: nothing to do (the tests only trigger it)."""


add_job(guarded, Job("tidy", every_seconds=3600, action=tidy))


# --- secrets (test_secrets.py) ------------------------------------------------------------------


def keep(ctx: Any, request: Any) -> dict[str, Any]:
    """Store the request body as a secret, then read it back (it travels, it must not leak)."""
    ctx.stores.secrets.set("token", request.body.decode())
    return {"ok": ctx.stores.secrets.get("token") == request.body.decode()}


def spill(ctx: Any, request: Any) -> None:
    """A defect whose message carries the secret: the stop reason and the logs must not."""
    raise RuntimeError(f"upstream refused token {ctx.stores.secrets.get('token')}")


vaulted = Extension(
    id="vaulted",
    version="1.0.0",
    grants={"routes"},
    routes=[Route("POST", "keep", keep), Route("POST", "spill", spill)],
)
