"""Reminders: remind a conversation of something later.

- `remind` (a conversation command, `{text, in_seconds}`) stores a reminder and sets a timer for
  its due instant (host clock);
- when the timer fires, `on_timer` sends the reminder into the conversation as a prompt (request
  id `reminder:<id>`, so the same reminder is never admitted twice) and raises an `action`
  attention item ("Reminder due: …") whose command dismisses it;
- `cancel` and `dismiss` commands; the projection lists the conversation's upcoming reminders;
- a reminder that is done (fired, cancelled or undeliverable) is kept a week, then a second
  timer (`forget:<id>`) deletes it, so done reminders never fill the records quota;
- state version 2. Version 1 stored `{id, conversation_id, message, at}` with `at` in epoch
  *seconds*; the migration from 1 renames `message` to `text`, turns `at` into `due_at` (epoch
  milliseconds) and adds `status`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from extensions_host.sdk import (
    AdmissionError,
    AttentionItem,
    Collection,
    CommandError,
    Context,
    Extension,
    Prompt,
    Retry,
    TimerEvent,
)

MAX_TEXT = 500
MAX_DELAY_SECONDS = 366 * 24 * 3600
UPCOMING_SHOWN = 20
# The projection reads at most this many pages of a conversation's reminders (bounded reads).
PROJECTION_PAGES = 16
TITLE_MAX = 200
# a due reminder's attention item goes by itself after a week if nobody dismisses it, and a
# reminder that is done is deleted a week after: kept for ever, they would fill the extension's
# attention and records quotas
KEPT_MS = 7 * 24 * 3600 * 1000
FORGET = "forget:"  # the timer key prefix of a done reminder's deletion


class Reminder(BaseModel):
    """A reminder (state version 2)."""

    id: str
    conversation_id: str
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    due_at: int = Field(ge=0, description="epoch milliseconds, host clock")
    status: Literal["pending", "fired", "cancelled", "undeliverable"] = "pending"
    fired_at: int | None = None


class RemindInput(BaseModel):
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    in_seconds: int = Field(ge=1, le=MAX_DELAY_SECONDS)


class RemindOutput(BaseModel):
    id: str
    due_at: int


class ReminderRef(BaseModel):
    id: str = Field(min_length=1, max_length=64)


class Upcoming(BaseModel):
    id: str
    text: str
    due_at: int


class RemindersView(BaseModel):
    """The projection: the next reminders of the conversation, soonest first."""

    upcoming: list[Upcoming]
    pending: int


def upgrade_from_v1(row: dict[str, Any]) -> list[dict[str, Any]]:
    """State migration 1 → 2 (pure): `message` → `text`, `at` (s) → `due_at` (ms), `status`."""
    old = row["value"]
    return [
        {
            "collection": "reminder",
            "key": row["key"],
            "value": {
                "id": old["id"],
                "conversation_id": old["conversation_id"],
                "text": old["message"],
                "due_at": int(old["at"]) * 1000,
                "status": "pending",
            },
        }
    ]


reminders = Extension(
    id="reminders",
    version="2.1.0",
    description="Remind a conversation of something later",
    grants={"state", "timers", "send", "attention", "commands", "projection"},
    state_version=2,
    collections={
        "reminder": Collection(Reminder, key=lambda r: r.id, index=lambda r: r.conversation_id)
    },
    migrations={1: upgrade_from_v1},
    projection_schema=RemindersView,
)


def attention_id(reminder_id: str) -> str:
    return f"reminder:{reminder_id}"


@reminders.command(
    "remind",
    scope="conversation",
    input=RemindInput,
    output=RemindOutput,
    description="Remind this conversation of `text` after `in_seconds` seconds",
)
def remind(ctx: Context, conversation_id: str, data: RemindInput) -> RemindOutput:
    reminder = Reminder(
        id=ctx.new_id(),
        conversation_id=conversation_id,
        text=data.text,
        due_at=ctx.now_ms() + data.in_seconds * 1000,
    )
    ctx.collection("reminder").put(reminder)
    ctx.timers.set(reminder.id, reminder.due_at)
    return RemindOutput(id=reminder.id, due_at=reminder.due_at)


def _own(ctx: Context, conversation_id: str, reminder_id: str) -> Reminder:
    reminder = ctx.collection("reminder").get(reminder_id)
    if reminder is None or reminder.conversation_id != conversation_id:
        raise CommandError("not_found", "Reminder not found")
    return reminder


@reminders.command(
    "cancel", scope="conversation", input=ReminderRef, description="Cancel a pending reminder"
)
def cancel(ctx: Context, conversation_id: str, data: ReminderRef) -> dict[str, str]:
    reminder = _own(ctx, conversation_id, data.id)
    if reminder.status != "pending":
        raise CommandError("conflict", f"Reminder is {reminder.status}, not pending")
    ctx.timers.cancel(reminder.id)
    _done(ctx, reminder, status="cancelled", at=ctx.now_ms())
    return {"id": reminder.id, "status": "cancelled"}


@reminders.command(
    "dismiss", scope="conversation", input=ReminderRef, description="Dismiss a due reminder"
)
def dismiss(ctx: Context, conversation_id: str, data: ReminderRef) -> dict[str, bool]:
    _own(ctx, conversation_id, data.id)
    return {"dismissed": ctx.attention.clear(conversation_id, attention_id(data.id))}


def _done(ctx: Context, reminder: Reminder, *, status: str, at: int) -> None:
    """Record how the reminder ended; it is deleted a week later."""
    fired_at = at if status != "cancelled" else None
    ctx.collection("reminder").put(
        reminder.model_copy(update={"status": status, "fired_at": fired_at})
    )
    ctx.timers.set(FORGET + reminder.id, at + KEPT_MS)


@reminders.on_timer
def on_timer(ctx: Context, timer: TimerEvent) -> None:
    if timer.key.startswith(FORGET):
        reminder_id = timer.key.removeprefix(FORGET)
        reminder = ctx.collection("reminder").get(reminder_id)
        if reminder is not None and reminder.status != "pending":
            ctx.collection("reminder").remove(reminder_id)
        return
    _due(ctx, timer)


def _due(ctx: Context, timer: TimerEvent) -> None:
    reminder = ctx.collection("reminder").get(timer.key)
    if reminder is None or reminder.status != "pending":
        return  # cancelled (or handled) meanwhile: nothing to do
    try:
        ctx.send(
            reminder.conversation_id,
            prompt=Prompt(request_id=f"reminder:{reminder.id}", text=f"Reminder: {reminder.text}"),
            require_existing_conversation=True,
        )
    except AdmissionError as exc:
        if exc.kind == "throttled":
            raise Retry(30, "send is throttled") from exc
        # the conversation is archived or gone: the record says why, for a week
        _done(ctx, reminder, status="undeliverable", at=timer.fired_at)
        return
    ctx.attention.set(
        reminder.conversation_id,
        AttentionItem(
            id=attention_id(reminder.id),
            level="action",
            title=_bounded(f"Reminder due: {reminder.text}", TITLE_MAX),
            body=reminder.text,
            command={"name": "dismiss", "input": {"id": reminder.id}},
            expires_at_ms=timer.fired_at + KEPT_MS,
        ),
    )
    _done(ctx, reminder, status="fired", at=timer.fired_at)
    ctx.observe(reminder.conversation_id)  # the projection's upcoming list changed


@reminders.project
def project(ctx: Context, conversation_id: str) -> RemindersView:
    pending: list[Reminder] = []
    after: str | None = None
    for _ in range(PROJECTION_PAGES):
        page = ctx.collection("reminder").page(limit=64, after=after, index=conversation_id)
        pending.extend(r for r in page if r.status == "pending")
        if len(page) < 64:
            break
        after = page[-1].id
    pending.sort(key=lambda r: (r.due_at, r.id))
    return RemindersView(
        upcoming=[
            Upcoming(id=r.id, text=r.text, due_at=r.due_at) for r in pending[:UPCOMING_SHOWN]
        ],
        pending=len(pending),
    )


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
