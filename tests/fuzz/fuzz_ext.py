"""The extension the fuzzed server runs (HOST_EXTENSIONS=tests.fuzz.fuzz_ext:fuzzy), so the
extension endpoints reach real commands, state and projections rather than only 404/503."""

from __future__ import annotations

from typing import Any

from extensions_host.sdk import Collection, Extension
from tests.security.exts import Count, Note, NoteInput  # the same models as the security suite's

fuzzy = Extension(
    id="fuzzy",
    version="1.0.0",
    grants={"state", "commands", "projection"},
    collections={"note": Collection(Note, key=lambda n: n.key, index=lambda n: n.conversation)},
    projection_schema=Count,
    description="Fuzz target: a conversation command, a global command, a projection.",
)


@fuzzy.command("note", scope="conversation", input=NoteInput)
def note(ctx: Any, conversation_id: str, data: NoteInput) -> dict[str, Any]:
    ctx.collection("note").put(Note(key=data.key, text=data.text, conversation=conversation_id))
    return {"key": data.key}


@fuzzy.command("count", scope="global")
def count(ctx: Any, data: Any) -> dict[str, Any]:
    return {"count": len(ctx.collection("note").page(limit=64))}


@fuzzy.project
def project(ctx: Any, conversation_id: str) -> Count:
    return Count(count=len(ctx.collection("note").page(limit=64, index=conversation_id)))
