"""Typed values extensions exchange with the conversation capabilities (spec 04).

Re-exported by `extensions_host.sdk`: `Prompt`, `Accepted`, `NotReady`, `AttentionItem`,
`InteractionRecord`, `AmbientRecord`, `PromptSection`, `ToolModule`, `FileRef`, `RunInfo`.
Pure pydantic: nothing here touches the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

JS_SAFE_MAX = 2**53 - 1
REQUEST_ID_MAX = 128
CORRELATION_MAX = 256

Delivery = Literal["follow_up", "steer"]
WhenBusy = Literal["queue", "steer", "reject"]
AttentionLevel = Literal["info", "warning", "action"]
InteractionStatus = Literal["pending", "answered", "skipped", "expired", "cancelled"]
AmbientPlace = Literal["header", "sidebar", "footer"]
AmbientOverflow = Literal["drop", "wrap", "summarize"]

TERMINAL_INTERACTION = frozenset({"answered", "skipped", "expired", "cancelled"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- send -------------------------------------------------------------------------------------


class Prompt(_Strict):
    """A prompt an extension sends into a conversation: `request_id` is its idempotency key
    (the same id with different text is a conflict)."""

    request_id: str = Field(min_length=1, max_length=REQUEST_ID_MAX)
    text: str = Field(min_length=1)
    delivery: Delivery = "follow_up"


@dataclass(frozen=True)
class Accepted:
    """`ctx.send` admitted the prompt (or found the identical one already admitted)."""

    submission_id: int
    delivery: str
    created: bool = True


@dataclass(frozen=True)
class NotReady:
    """`ctx.send(..., when_busy="reject")` into a busy conversation: nothing was admitted."""


# --- attention --------------------------------------------------------------------------------


class AttentionCommand(_Strict):
    """The extension command a front end offers with an attention item."""

    name: str = Field(min_length=1, max_length=64)
    input: dict[str, Any] = Field(default_factory=dict)


class AttentionItem(_Strict):
    """A small "look at this" marker on a conversation. Unknown fields are errors."""

    id: str = Field(min_length=1, max_length=256)
    level: AttentionLevel
    title: str = Field(min_length=1, max_length=200)
    body: str | None = Field(default=None, max_length=2000)
    command: AttentionCommand | None = None
    expires_at_ms: StrictInt | None = Field(default=None, ge=0, le=JS_SAFE_MAX)


# --- interactions and ambient -----------------------------------------------------------------


class InteractionRecord(_Strict):
    """A pending question or approval put to the user of a conversation.

    `extension` (the owner) and `created_at`/`settled_at` (epoch ms) are stamped by the host;
    values given when seeding are ignored. A snapshot (`ctx.interactions.snapshot`) is this
    record as JSON data: `InteractionRecord.model_validate(snapshot)` reads it back.
    """

    call_id: str = Field(min_length=1, max_length=128)
    kind: str = Field(min_length=1, max_length=64)
    prompt: str = Field(min_length=1, max_length=4000)
    options: list[str] | None = Field(default=None, max_length=32)
    status: InteractionStatus = "pending"
    answer: Any = None
    extension: str | None = None
    created_at: StrictInt | None = None
    settled_at: StrictInt | None = None

    @model_validator(mode="after")
    def _options_bounded(self) -> InteractionRecord:
        for option in self.options or []:
            if not 1 <= len(option) <= 200:
                raise ValueError("each option is 1..200 characters")
        return self


class AmbientRecord(_Strict):
    """One ambient surface (a status line, a progress list), replaced whole on every set."""

    key: str = Field(min_length=1, max_length=64)
    place: AmbientPlace
    max_rows: StrictInt | None = Field(default=None, ge=1, le=200)
    overflow: AmbientOverflow = "drop"
    refresh_ms: StrictInt | None = Field(default=None, ge=0, le=86_400_000)
    body: Any = None
    details: dict[str, Any] | None = None


# --- run participation ------------------------------------------------------------------------


class RunInfo(_Strict):
    """What participation hooks and tool handlers receive as `run`."""

    id: int
    conversation_id: str
    inputs: tuple[int, ...] = ()
    input_texts: tuple[str, ...] = ()


class PromptSection(_Strict):
    """One prompt section (`prompt(ctx, run)` returns a list of these or of plain dicts)."""

    name: str
    text: str


class ToolModule(_Strict):
    """What `module_for_run(ctx, run)` returns: which declared tools the run gets (None: all of
    them) and optional instructions for the model."""

    tools: list[str] | None = None
    instructions: str = Field(default="", max_length=8192)


class FileRef(_Strict):
    """A file for the run, by path or URL (the host stores no binary content)."""

    path: str | None = Field(default=None, min_length=1, max_length=2048)
    url: str | None = Field(default=None, min_length=1, max_length=2048)
    name: str | None = Field(default=None, max_length=256)
    mime_type: str | None = Field(default=None, max_length=128)

    @model_validator(mode="after")
    def _has_location(self) -> FileRef:
        if self.path is None and self.url is None:
            raise ValueError("a file needs a path or a url")
        return self
