"""Digest: a running summary of each conversation, given to the agent on every claim.

- `on_settled(ctx, runs)` folds each settled run (in sequence order, exactly once: the host
  advances this consumer's cursor in the same transaction) into the conversation's `summary`
  document: counts and the last `RECENT` exchanges, each cut to `EXCERPT` characters;
- `prompt(ctx, run)` returns that digest as the section `summary` (the runtime sees it as
  `digest.summary`), or nothing before the first settled run;
- the idle worker `nudge` is woken by `conversation_idle`; outside any transaction it reads the
  digest and, through `ctx.transact`, puts an `info` attention item "where you left off" on
  the conversation. The next settled run of that conversation clears it.
"""

from __future__ import annotations

from collections import defaultdict
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from extensions_host.sdk import (
    AttentionItem,
    Context,
    Document,
    Extension,
    RunInfo,
    StateError,
    Worker,
    WorkerWake,
    add_worker,
)

if TYPE_CHECKING:  # Django-backed: imported for the annotations only
    from extensions_host.sdk import RunSettledEvent

RECENT = 5
EXCERPT = 200
IDLE_ITEM = "digest:idle"
SECTION_MAX_BYTES = 8192  # the host's bound for one prompt section


class Exchange(BaseModel):
    sequence: int
    asked: str = Field(max_length=EXCERPT)
    answer: str = Field(max_length=EXCERPT)
    outcome: Literal["answered", "unanswered"]


class Digest(BaseModel):
    """The `summary` document of one conversation."""

    runs: int = 0
    answered: int = 0
    last_sequence: int = 0
    recent: list[Exchange] = Field(default_factory=list, max_length=RECENT)
    updated_at: int | None = None


digest = Extension(
    id="digest",
    version="1.0.0",
    description="A running digest of each conversation, in every prompt",
    grants={"state", "settled", "prompt", "lifecycle", "attention"},
    documents={"summary": Document(Digest, max_bytes=16 * 1024, fork="copy")},
)


def excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


def answer_text(outcome: dict[str, Any]) -> str:
    parts = (outcome.get("answer") or {}).get("content") or []
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict))


def fold(current: Digest, runs: list[RunSettledEvent], now_ms: int) -> Digest:
    """The document after these runs (pure; runs it already holds are skipped)."""
    doc = current.model_copy(deep=True)
    for run in runs:
        if run.sequence <= doc.last_sequence:
            continue
        answered = run.outcome.get("status") == "answered"
        doc.runs += 1
        doc.answered += int(answered)
        doc.last_sequence = run.sequence
        asked = " / ".join(t for t in run.input_texts if t) or "(no input)"
        doc.recent = [
            *doc.recent,
            Exchange(
                sequence=run.sequence,
                asked=excerpt(asked),
                answer=excerpt(answer_text(run.outcome) if answered else ""),
                outcome="answered" if answered else "unanswered",
            ),
        ][-RECENT:]
    doc.updated_at = now_ms
    return doc


def render(doc: Digest) -> str:
    lines = [f"Conversation digest: {doc.runs} runs settled, {doc.answered} answered."]
    for item in doc.recent:
        reply = f' → "{item.answer}"' if item.outcome == "answered" else " → (unanswered)"
        lines.append(f'- #{item.sequence} "{item.asked}"{reply}')
    text = "\n".join(lines)
    while len(text.encode("utf-8")) > SECTION_MAX_BYTES:  # never for RECENT × EXCERPT, but cheap
        text = text[: len(text) // 2] + "…"
    return text


@digest.on_settled
def on_settled(ctx: Context, runs: list[RunSettledEvent]) -> None:
    by_conversation: dict[str, list[RunSettledEvent]] = defaultdict(list)
    for run in runs:
        by_conversation[run.conversation_id].append(run)
    for conversation_id, settled in by_conversation.items():
        try:
            ctx.document("summary").update(
                conversation_id, partial(fold, runs=settled, now_ms=ctx.now_ms())
            )
        except StateError as exc:
            if exc.kind != "bound":
                raise
            continue  # the conversation was deleted (retention) before its runs reached us
        ctx.attention.clear(conversation_id, IDLE_ITEM)  # it is active again


@digest.prompt
def prompt(ctx: Context, run: RunInfo) -> list[dict[str, str]]:
    doc = ctx.document("summary").read(run.conversation_id)
    if doc.runs == 0:
        return []
    return [{"name": "summary", "text": render(doc)}]


def nudge(ctx: Context, wake: WorkerWake) -> None:
    """Runs outside any transaction (it could call a slow summariser here); writes through
    `ctx.transact`."""
    if not wake.conversation_id:
        return
    doc = ctx.document("summary").read(wake.conversation_id)
    if doc.runs == 0:
        return  # nothing happened there yet: nothing to remind anyone of
    item = AttentionItem(
        id=IDLE_ITEM,
        level="info",
        title="Idle conversation: here is where you left off",
        body=render(doc)[:2000],
    )
    ctx.transact(lambda tx: tx.attention.set(wake.conversation_id, item))


add_worker(digest, Worker("nudge", wake_on=["conversation_idle"], run=nudge))
