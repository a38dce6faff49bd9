"""Pydantic models the host hands to hooks or reads back from them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EmptyInput(Frozen):
    """The input model of a command that takes no fields."""


class TimerEvent(Frozen):
    """What `on_timer(ctx, timer)` receives: the key, the instant it was due and when it fired
    (epoch milliseconds, host clock)."""

    key: str
    due_at: int
    fired_at: int


class Caller(Frozen):
    """Who called a command (or route): the username and whether they are staff."""

    username: str
    admin: bool = False
    service: bool = False


class CatalogEntry(Frozen):
    """One command of an extension's catalog, as the projection shows it to front ends."""

    name: str = Field(min_length=1, max_length=64)
    scope: Literal["global", "conversation"]
    description: str = Field(default="", max_length=2000)
    admin_only: bool = False
    input_schema: dict[str, Any] = Field(default_factory=dict)
    output_schema: dict[str, Any] | None = None


class MigrationRow(BaseModel):
    """One stored record as a migration step sees it (steps take and return plain dicts of this
    shape: `{"collection", "key", "value"}`)."""

    model_config = ConfigDict(extra="forbid")

    collection: str
    key: str
    value: Any
