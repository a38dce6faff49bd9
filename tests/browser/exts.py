"""Extensions served by the browser tests' real processes (listed in HOST_EXTENSIONS)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from extensions_host.sdk import Extension


class Seen(BaseModel):
    attention: int


lookout = Extension(
    id="lookout",
    version="1.0.0",
    grants={"attention", "projection"},
    projection_schema=Seen,
    description="Marks conversations for attention (browser tests).",
)


@lookout.project
def _project(ctx: Any, conversation_id: str) -> Seen:
    return Seen(attention=1)


flaky = Extension(id="flaky", version="0.3.0", grants={"projection"}, projection_schema=Seen)


@flaky.project
def _flaky_project(ctx: Any, conversation_id: str) -> Seen:
    return Seen(attention=0)
