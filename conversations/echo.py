"""The built-in `echo` runtime (AGENT_RUNTIME=echo): claims runnable conversations and answers
each run with an assistant entry echoing its inputs and naming the prompt sections it received.

It goes through exactly the services an external runtime reaches over HTTP (claim, append,
settle), so demos and tests exercise the real path.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings

from conversations import services
from conversations.models import Run
from conversations.selectors import entry_text, run_inputs
from core.errors import HostError

logger = logging.getLogger(__name__)

ECHO_PAGE = 32  # runs answered per sweep call; the task re-enqueues itself while work remains
ECHO_ENTRY_KEY = "echo-answer"


def echo_text(*, input_texts: list[str], capture: dict[str, Any]) -> str:
    sections = [s.get("name", "") for s in capture.get("prompt_sections") or []]
    lines = [f"echo: {text}" for text in input_texts] or ["echo: (no input)"]
    lines.append("prompt sections: " + (", ".join(sections) if sections else "none"))
    return "\n".join(lines)


def echo_answer(*, run: Run) -> None:
    """Append the echo answer to a claimed run and settle it answered."""
    texts = [
        entry_text(s.entry.content) if getattr(s, "entry", None) and not s.entry.withdrawn else ""
        for s in run_inputs(run_id=run.pk)
    ]
    content = [{"type": "text", "text": echo_text(input_texts=texts, capture=run.capture)}]
    appended = services.entry_append(
        conversation_id=run.conversation_id,
        run_id=run.pk,
        role="assistant",
        content=content,
        entry_key=ECHO_ENTRY_KEY,
    )
    services.run_settle(run_id=run.pk, status="answered", answer_entry_id=appended.entry.pk)


def echo_sweep(*, limit: int = ECHO_PAGE) -> bool:
    """Answer up to `limit` runnable conversations; True when more work may remain."""
    if settings.AGENT_RUNTIME != "echo":
        return False
    for _ in range(limit):
        try:
            claim = services.run_claim()
        except HostError as exc:  # e.g. a participation rule rejected the capture: claim again
            logger.warning("echo runtime: claim failed: %s", exc.message)
            continue
        if claim is None:
            return False
        try:
            echo_answer(run=claim.run)
        except HostError as exc:
            # the run stays claimed; its lease expires and the inputs are re-queued
            logger.warning("echo runtime: run %s not answered: %s", claim.run.pk, exc.message)
    return True
