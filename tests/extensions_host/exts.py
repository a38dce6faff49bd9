"""Test extensions, built by functions so a test can vary version, grants and hooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from extensions_host.sdk import (
    Collection,
    CommandError,
    Document,
    Extension,
    TimerEvent,
)

ALL_GRANTS = {"state", "timers", "commands", "projection", "settled", "lifecycle"}


class Item(BaseModel):
    key: str
    n: int = 0
    tag: str | None = None
    blob: str = ""


class Pad(BaseModel):
    text: str = ""


class Board(BaseModel):
    count: int


class AddInput(BaseModel):
    key: str = Field(min_length=1, max_length=64)
    n: int = 0


class AddOutput(BaseModel):
    key: str
    total: int


def make_ext(
    ext_id: str = "alpha",
    *,
    version: str = "1.0.0",
    grants: set[str] | None = None,
    on_timer: Callable[..., Any] | None = None,
    project: Callable[..., Any] | None = None,
    project_catalog: Callable[..., Any] | None = None,
    activate: Callable[..., Any] | None = None,
    commands: dict[str, tuple[dict[str, Any], Callable[..., Any] | None]] | None = None,
    pad_max_bytes: int = 256,
    pad_fork: str = "copy",
    deadline_s: float | None = None,
    **extra: Any,
) -> Extension:
    """An extension with an `item` collection (indexed by tag), a `pad` document, a `board`
    projection, and the hooks given."""
    ext = Extension(
        id=ext_id,
        version=version,
        grants=ALL_GRANTS if grants is None else grants,
        collections={"item": Collection(Item, key=lambda i: i.key, index=lambda i: i.tag)},
        documents={"pad": Document(Pad, max_bytes=pad_max_bytes, fork=pad_fork)},  # type: ignore[arg-type]
        projection_schema=Board,
        deadline_s=deadline_s,
        **extra,
    )
    if on_timer is not None:
        ext.on_timer(on_timer)
    if project is not None:
        ext.project(project)
    if project_catalog is not None:
        ext.project_catalog(project_catalog)
    if activate is not None:
        ext.activate(activate)
    for name, (spec, handler) in (commands or {}).items():
        decorate = ext.command(name, **spec)
        if handler is not None:
            decorate(handler)
    return ext


def put_item(key: str, n: int = 0, tag: str | None = None) -> Callable[..., None]:
    """An on_timer hook that writes one item."""

    def hook(ctx: Any, timer: TimerEvent) -> None:
        ctx.collection("item").put(Item(key=key, n=n, tag=tag))

    return hook


def add_command(ctx: Any, conversation_id: str, data: AddInput) -> AddOutput:
    items = ctx.collection("item")
    current = items.get(data.key)
    total = (current.n if current else 0) + data.n
    items.put(Item(key=data.key, n=total, tag=conversation_id))
    if total > 100:
        raise CommandError("conflict", "Total is over 100")
    return AddOutput(key=data.key, total=total)


def count_items(ctx: Any, conversation_id: str) -> Board:
    return Board(count=len(ctx.collection("item").page(limit=64, index=conversation_id)))
