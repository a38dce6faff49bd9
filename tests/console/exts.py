"""Test extensions of the staff console and the inspector page."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from extensions_host.sdk import Collection, Document, Extension


class Note(BaseModel):
    key: str
    text: str = ""
    tag: str | None = None


class Pad(BaseModel):
    text: str = ""


class Board(BaseModel):
    notes: int


class KeeperSettings(BaseModel):
    channel: str = Field(default="#ops", min_length=1)


def keeper(ext_id: str = "keeper") -> Extension:
    """An extension with state, a projection counting its notes, attention, ambient and
    interactions, settings and timers."""
    ext = Extension(
        id=ext_id,
        version="1.2.0",
        grants={"state", "timers", "attention", "projection", "settled"},
        collections={"note": Collection(Note, key=lambda n: n.key, index=lambda n: n.tag)},
        documents={"pad": Document(Pad, max_bytes=4096, fork="copy")},  # type: ignore[arg-type]
        projection_schema=Board,
        ambient_kinds=("status",),
        interaction_kinds=("approval",),
        settings_model=KeeperSettings,
    )

    @ext.project
    def project(ctx: Any, conversation_id: str) -> Board:
        return Board(notes=len(ctx.collection("note").page(limit=64)))

    return ext


def flaky(ext_id: str = "flaky") -> Extension:
    """An extension with a projection slot, stopped by the tests."""
    ext = Extension(
        id=ext_id, version="0.1.0", grants={"projection", "timers"}, projection_schema=Board
    )

    @ext.project
    def project(ctx: Any, conversation_id: str) -> Board:
        return Board(notes=0)

    return ext
