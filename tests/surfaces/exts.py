"""Test extensions for the conversation capabilities, built by functions so tests vary them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from extensions_host.sdk import Extension, StateError


class Empty(BaseModel):
    pass


class SendInput(BaseModel):
    conversation_id: str
    request_id: str
    text: str
    when_busy: str = "queue"
    require_existing: bool = False


class LookupInput(BaseModel):
    query: str = Field(min_length=1, max_length=100)
    limit: int = 10


def make_ext(
    ext_id: str = "alpha",
    *,
    grants: set[str] | None = None,
    hooks: dict[str, Callable[..., Any]] | None = None,
    commands: dict[str, Callable[..., Any]] | None = None,
    tools: dict[str, tuple[type[BaseModel], Callable[..., Any]]] | None = None,
    version: str = "1.0.0",
    **extra: Any,
) -> Extension:
    """An extension with the given grants, single-slot hooks (`{"prompt": fn, …}`),
    conversation commands taking `Empty` input (`{"name": handler}`) and tools."""
    ext = Extension(id=ext_id, version=version, grants=grants or set(), **extra)
    for slot, fn in (hooks or {}).items():
        getattr(ext, slot)(fn)
    for name, handler in (commands or {}).items():
        ext.command(name, scope="conversation", input=Empty)(handler)
    for name, (model, handler) in (tools or {}).items():
        ext.tool(name, input=model, description=f"the {name} tool")(handler)
    return ext


def sections(*pairs: tuple[str, str]) -> Callable[..., Any]:
    """A `prompt` hook returning these (name, text) sections."""

    def prompt(ctx: Any, run: Any) -> list[dict[str, str]]:
        return [{"name": name, "text": text} for name, text in pairs]

    return prompt


def prompter(ext_id: str, prompt: Any) -> Extension:
    """An extension taking part in runs through its `prompt` hook."""
    return make_ext(ext_id, grants={"prompt"}, hooks={"prompt": prompt})


def captured(fn: Any) -> Any:
    """A hook that calls `fn(ctx)` and returns the StateError it raised (or None)."""

    def hook(ctx: Any) -> StateError | None:
        try:
            fn(ctx)
        except StateError as exc:
            return exc
        return None

    return hook
