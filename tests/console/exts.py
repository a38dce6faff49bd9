"""Test extensions of the staff console and the inspector page."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from extensions_host.sdk import Collection, CommandError, Document, Extension, Job, add_job


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


def reporter(failing: list[bool], ext_id: str = "reporter") -> Extension:
    """An extension with an hourly job `nightly` whose runs fail while `failing[0]` is true (a
    typed error: the run is recorded as failed and notified, the extension keeps running)."""
    ext = Extension(id=ext_id, version="1.0.0", grants={"timers"})

    def nightly(ctx: Any, run: Any) -> None:
        if failing[0]:
            raise CommandError("rejected", "quota at the provider")

    add_job(ext, Job("nightly", every_seconds=3600, action=nightly))
    return ext
