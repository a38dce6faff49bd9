"""Documents are not migrated (docs/extending.md §2.6): `state_version` and `migrations` move
records only. What the reference tells an author to do when a document's model changes is
checked here, through the harness an author uses."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, model_validator

from extensions_host.models import ExtensionDocument
from extensions_host.sdk import Document, EmptyInput, Extension


class BoardV1(BaseModel):
    every: int | None = None  # minutes


class BoardStrict(BaseModel):
    every: str | None = None  # now "HH:MM": a stored v1 board no longer decodes


class BoardV2(BaseModel):
    """v2 with an upgrade on read: a stored v1 board (minutes) becomes "HH:MM"; a new field
    has a default, so an old document without it still reads."""

    every: str | None = None
    paused: bool = False

    @model_validator(mode="before")
    @classmethod
    def _from_v1(cls, value: Any) -> Any:
        if isinstance(value, dict) and isinstance(value.get("every"), int):
            minutes = value["every"]
            value = {**value, "every": f"{minutes // 60:02d}:{minutes % 60:02d}"}
        return value


class View(BaseModel):
    every: str | None


def v1() -> Extension:
    ext = Extension(
        id="boards",
        version="1",
        grants={"state", "commands"},
        documents={"board": Document(BoardV1)},
    )

    @ext.command("set", scope="conversation", input=EmptyInput)
    def set_(ctx: Any, cid: str, data: EmptyInput) -> None:
        ctx.document("board").update(cid, lambda board: BoardV1(every=90))

    return ext


def v2(model: type[BaseModel]) -> Extension:
    ext = Extension(
        id="boards",
        version="2",
        grants={"state", "commands", "projection"},
        state_version=2,  # records are migrated; the document is not touched
        migrations={1: lambda row: [row]},
        documents={"board": Document(model)},
        projection_schema=View,
    )

    @ext.project
    def project(ctx: Any, cid: str) -> View:
        return View(every=ctx.document("board").read(cid).every)

    @ext.command("pause", scope="conversation", input=EmptyInput)
    def pause(ctx: Any, cid: str, data: EmptyInput) -> None:
        ctx.document("board").update(cid, lambda board: board.model_copy(update={"paused": True}))

    return ext


def stored(cid: str) -> str:
    return ExtensionDocument.objects.get(
        extension_id="boards", name="board", conversation_id=cid
    ).value


def seeded(host: Any) -> Any:
    host.install(v1())
    host.conversation("c1")
    host.command("boards", "set", {}, conversation_id="c1")
    return host


def test_a_migration_leaves_documents_as_stored_and_an_incompatible_model_stops_at_read(
    hyphae_host,
):
    seeded(hyphae_host)

    hyphae_host.install(v2(BoardStrict))

    assert hyphae_host.status("boards").running  # the migration ran: documents are not its business
    assert stored("c1") == '{"every":90}'
    slot = hyphae_host.projection("c1")["boards"]
    assert slot["status"] == "stopped"
    assert slot["reason"] == "project: StateError: Stored document board is invalid"


def test_a_model_that_upgrades_the_old_shape_on_read_keeps_working_and_writes_the_new_shape(
    hyphae_host,
):
    seeded(hyphae_host)

    hyphae_host.install(v2(BoardV2))

    assert hyphae_host.projection("c1")["boards"]["value"] == {"every": "01:30"}
    assert stored("c1") == '{"every":90}'  # a read never writes
    hyphae_host.command("boards", "pause", {}, conversation_id="c1")
    assert stored("c1") == '{"every":"01:30","paused":true}'
