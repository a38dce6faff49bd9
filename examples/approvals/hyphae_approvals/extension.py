"""Approvals: requests a conversation puts to its user, decided in the UI or by a webhook.

- `request` (conversation command) seeds a pending interaction of kind `approval` (options
  `approve`/`reject`), stores the approval, raises an `action` attention item and refreshes the
  ambient header "N approvals waiting";
- the user answers through the host's interaction API; the host has no hook for that answer, so
  a reconcile timer (one timer, `reconcile`, every `reconcile_seconds` while anything is
  pending) reads the interactions' snapshots and records each decision; it also expires
  approvals past their deadline;
- `decide` (conversation command) and the public webhook route `POST callback` decide directly;
  the route checks the `X-Approvals-Token` header against a secret minted by `configure`;
- the notifier `log` appends every host notification to a JSON-lines log in the extension's
  data directory, or POSTs it to the `webhook_url` of its settings;
- the daily job expires overdue approvals and escalates those waiting more than a day.
"""

from __future__ import annotations

import hmac
import json
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, HttpUrl, ValidationError

from extensions_host.sdk import (
    AmbientRecord,
    AttentionItem,
    Collection,
    CommandError,
    Context,
    Extension,
    InteractionRecord,
    Job,
    JobRun,
    NotificationEvent,
    TimerEvent,
    add_job,
)

if TYPE_CHECKING:  # imported for the annotations only
    from django.http import HttpRequest

KIND = "approval"
AMBIENT_KEY = "approvals"
RECONCILE = "reconcile"
TOKEN_SECRET = "callback_token"  # noqa: S105 (the secret's name, not a secret)
TOKEN_HEADER = "X-Approvals-Token"  # noqa: S105 (a header name)
DAY_MS = 24 * 3600 * 1000
PAGES = 16  # a sweep reads at most 16 pages of 64 pending approvals; the rest waits a tick
OPTIONS = ["approve", "reject"]

Status = Literal["pending", "approved", "rejected", "expired", "cancelled"]


class Approval(BaseModel):
    id: str
    conversation_id: str
    title: str = Field(min_length=1, max_length=200)
    detail: str = Field(default="", max_length=2000)
    status: Status = "pending"
    requested_by: str = ""
    requested_at: int
    expires_at: int
    decided_at: int | None = None
    decided_by: str = ""
    via: Literal["", "answer", "decide", "callback", "expiry", "cancel"] = ""

    @property
    def call_id(self) -> str:
        return f"approval-{self.id}"


class Open(BaseModel):
    """The set of pending approvals the reconcile sweep walks (removed once decided)."""

    id: str
    conversation_id: str


class ApprovalsSettings(BaseModel):
    """Staff-editable settings (validated by the host on every edit)."""

    model_config = ConfigDict(extra="forbid")

    webhook_url: HttpUrl | None = None
    reconcile_seconds: int = Field(default=15, ge=1, le=3600)


class RequestInput(BaseModel):
    title: str = Field(min_length=1, max_length=200)
    detail: str = Field(default="", max_length=2000)
    expires_in_hours: int = Field(default=24, ge=1, le=720)


class RequestOutput(BaseModel):
    id: str
    call_id: str
    expires_at: int


class DecideInput(BaseModel):
    id: str = Field(min_length=1, max_length=64)
    decision: Literal["approve", "reject"]


class DecideOutput(BaseModel):
    id: str
    status: Status


class CallbackInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    conversation_id: str = Field(min_length=1, max_length=64)
    id: str = Field(min_length=1, max_length=64)
    decision: Literal["approve", "reject"]
    by: str = Field(default="webhook", min_length=1, max_length=150)


class ConfigureInput(BaseModel):
    webhook_url: HttpUrl | None = None
    rotate_callback_token: bool = False


approvals = Extension(
    id="approvals",
    version="1.0.0",
    description="Approval requests answered in the UI or by a webhook",
    grants={"state", "commands", "attention", "timers", "routes", "notify"},
    collections={
        "approval": Collection(Approval, key=lambda a: a.id, index=lambda a: a.conversation_id),
        "open": Collection(Open, key=lambda o: o.id),
    },
    interaction_kinds=[KIND],
    ambient_kinds=[AMBIENT_KEY],
    settings_model=ApprovalsSettings,
)


def settings_of(ctx: Context) -> ApprovalsSettings:
    return ApprovalsSettings.model_validate(ctx.stores.settings.get())


# --- requesting -------------------------------------------------------------------------------


@approvals.command(
    "request",
    scope="conversation",
    input=RequestInput,
    output=RequestOutput,
    description="Ask this conversation's user to approve something",
)
def request(ctx: Context, conversation_id: str, data: RequestInput) -> RequestOutput:
    now = ctx.now_ms()
    approval = Approval(
        id=ctx.new_id(),
        conversation_id=conversation_id,
        title=data.title,
        detail=data.detail,
        requested_by=ctx.caller.username if ctx.caller else "",
        requested_at=now,
        expires_at=now + data.expires_in_hours * 3600 * 1000,
    )
    ctx.interactions.seed(
        conversation_id,
        InteractionRecord(
            call_id=approval.call_id,
            kind=KIND,
            prompt=f"{approval.title}\n\n{approval.detail}".strip(),
            options=OPTIONS,
        ),
    )
    ctx.collection("approval").put(approval)
    ctx.collection("open").put(Open(id=approval.id, conversation_id=conversation_id))
    ctx.attention.set(conversation_id, _waiting_item(approval, level="action"))
    _refresh_ambient(ctx, conversation_id)
    if ctx.timers.read(RECONCILE) is None:
        ctx.timers.set(RECONCILE, now + settings_of(ctx).reconcile_seconds * 1000)
    return RequestOutput(id=approval.id, call_id=approval.call_id, expires_at=approval.expires_at)


def _waiting_item(approval: Approval, *, level: Literal["action", "warning"]) -> AttentionItem:
    prefix = "Approval waiting" if level == "action" else "Still waiting for approval"
    title = f"{prefix}: {approval.title}"
    return AttentionItem(
        id=f"approval:{approval.id}",
        level=level,
        title=title if len(title) <= 200 else title[:199] + "…",
        body=approval.detail or None,
    )


def _refresh_ambient(ctx: Context, conversation_id: str) -> None:
    """The header surface: how many approvals wait in this conversation, and which."""
    pending = [a for a in _approvals_of(ctx, conversation_id) if a.status == "pending"]
    if not pending:
        ctx.ambient.clear(conversation_id, AMBIENT_KEY)
        return
    count = len(pending)
    ctx.ambient.set(
        conversation_id,
        AmbientRecord(
            key=AMBIENT_KEY,
            place="header",
            max_rows=5,
            overflow="summarize",
            body=f"{count} approval{'s' if count != 1 else ''} waiting",
            details={"waiting": [a.title for a in pending[:5]]},
        ),
    )


def _approvals_of(ctx: Context, conversation_id: str) -> list[Approval]:
    found: list[Approval] = []
    after: str | None = None
    for _ in range(PAGES):
        page = ctx.collection("approval").page(limit=64, after=after, index=conversation_id)
        found.extend(page)
        if len(page) < 64:
            break
        after = page[-1].id
    return found


# --- deciding ---------------------------------------------------------------------------------


def _record(ctx: Context, approval: Approval, status: Status, *, via: str, by: str) -> Approval:
    """Store a decision: the approval, the open set, its attention item and the header."""
    decided = approval.model_copy(
        update={"status": status, "via": via, "decided_by": by, "decided_at": ctx.now_ms()}
    )
    ctx.collection("approval").put(decided)
    ctx.collection("open").remove(approval.id)
    ctx.attention.clear(approval.conversation_id, f"approval:{approval.id}")
    _refresh_ambient(ctx, approval.conversation_id)
    return decided


def _from_snapshot(ctx: Context, approval: Approval, snapshot: dict[str, Any] | None) -> Approval:
    """Record what the interaction says, if it is no longer pending."""
    if snapshot is None:
        return _record(ctx, approval, "cancelled", via="cancel", by="host")
    status = snapshot["status"]
    if status == "answered":
        decision: Status = "approved" if snapshot["answer"] == "approve" else "rejected"
        return _record(ctx, approval, decision, via="answer", by="user")
    if status in ("expired", "skipped", "cancelled"):
        final: Status = "expired" if status == "expired" else "cancelled"
        return _record(ctx, approval, final, via="answer", by="user")
    return approval


def decide_in(
    ctx: Context, conversation_id: str, approval_id: str, decision: str, *, via: str, by: str
) -> DecideOutput:
    """Decide inside a frame (the `decide` command, or the route's `ctx.transact`)."""
    approval = ctx.collection("approval").get(approval_id)
    if approval is None or approval.conversation_id != conversation_id:
        raise CommandError("not_found", "Approval not found")
    if approval.status != "pending":
        raise CommandError("conflict", f"Approval is already {approval.status}")
    if not ctx.interactions.answer(conversation_id, approval.call_id, decision):
        # the user answered (or it expired) a moment ago and no sweep saw it yet: theirs wins
        current = _from_snapshot(
            ctx, approval, ctx.interactions.snapshot(conversation_id, approval.call_id)
        )
        return DecideOutput(id=current.id, status=current.status)
    status: Status = "approved" if decision == "approve" else "rejected"
    return DecideOutput(
        id=approval.id, status=_record(ctx, approval, status, via=via, by=by).status
    )


@approvals.command(
    "decide",
    scope="conversation",
    input=DecideInput,
    output=DecideOutput,
    description="Approve or reject a pending approval",
)
def decide(ctx: Context, conversation_id: str, data: DecideInput) -> DecideOutput:
    by = ctx.caller.username if ctx.caller else ""
    return decide_in(ctx, conversation_id, data.id, data.decision, via="decide", by=by)


def reconcile(ctx: Context) -> int:
    """Pick up answers given through the host's interaction API and expire overdue approvals;
    keep the reconcile timer while anything is pending. Returns how many are still pending."""
    now = ctx.now_ms()
    still_pending = 0
    after: str | None = None
    for _ in range(PAGES):
        page = ctx.collection("open").page(limit=64, after=after)
        for item in page:
            approval = ctx.collection("approval").get(item.id)
            if approval is None or approval.status != "pending":
                ctx.collection("open").remove(item.id)
                continue
            snapshot = ctx.interactions.snapshot(approval.conversation_id, approval.call_id)
            current = _from_snapshot(ctx, approval, snapshot)
            if current.status == "pending" and now >= approval.expires_at:
                ctx.interactions.settle(approval.conversation_id, approval.call_id, "expired")
                current = _record(ctx, approval, "expired", via="expiry", by="host")
            still_pending += current.status == "pending"
        if len(page) < 64:
            break
        after = page[-1].id
    if still_pending:
        ctx.timers.set(RECONCILE, now + settings_of(ctx).reconcile_seconds * 1000)
    return still_pending


@approvals.on_timer
def on_timer(ctx: Context, timer: TimerEvent) -> None:
    if timer.key == RECONCILE:
        reconcile(ctx)


def daily(ctx: Context, run: JobRun) -> dict[str, int]:
    """The daily job: reconcile, then escalate approvals waiting more than a day."""
    reconcile(ctx)
    escalated = 0
    after: str | None = None
    for _ in range(PAGES):
        page = ctx.collection("open").page(limit=64, after=after)
        for item in page:
            approval = ctx.collection("approval").get(item.id)
            if approval is not None and run.scheduled_for - approval.requested_at >= DAY_MS:
                ctx.attention.set(
                    approval.conversation_id, _waiting_item(approval, level="warning")
                )
                escalated += 1
        if len(page) < 64:
            break
        after = page[-1].id
    return {"escalated": escalated}


add_job(approvals, Job("daily", schedule="0 8 * * *", action=daily))


# --- configuration and the webhook callback ------------------------------------------------


@approvals.command(
    "configure",
    scope="global",
    input=ConfigureInput,
    admin_only=True,
    description="Set the notifier's webhook URL; rotate the callback token (shown once)",
)
def configure(ctx: Context, data: ConfigureInput) -> dict[str, Any]:
    current = settings_of(ctx)
    ctx.stores.settings.set(
        current.model_copy(update={"webhook_url": data.webhook_url}).model_dump(mode="json")
    )
    result: dict[str, Any] = {"webhook_url": str(data.webhook_url) if data.webhook_url else None}
    if data.rotate_callback_token:
        token = secrets.token_urlsafe(32)
        ctx.stores.secrets.set(TOKEN_SECRET, token)
        result["callback_token"] = token
    return result


@approvals.route("POST", "callback", auth="public", body_limit=16 * 1024)
def callback(ctx: Context, request: HttpRequest) -> Any:
    """An external system decides: `{conversation_id, id, decision, by?}` with the token."""
    from django.http import JsonResponse

    expected = ctx.stores.secrets.get(TOKEN_SECRET)
    given = request.headers.get(TOKEN_HEADER, "")
    if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        error = {"category": "auth", "cause": "forbidden", "message": "Callback token is invalid"}
        return JsonResponse({"error": error}, status=403)
    try:
        data = CallbackInput.model_validate_json(request.body or b"{}")
    except ValidationError as exc:
        raise CommandError("invalid", "Callback body is invalid") from exc
    result = ctx.transact(
        lambda tx: decide_in(
            tx, data.conversation_id, data.id, data.decision, via="callback", by=data.by
        )
    )
    return result.model_dump()


# --- the notifier -----------------------------------------------------------------------------


@approvals.notifier("log")
def log(ctx: Context, event: NotificationEvent) -> None:
    """Every host notification, as one JSON line in the data directory — or POSTed to the
    `webhook_url` setting. A failure is retried by the host with backoff (never a stop)."""
    line = event.model_dump(mode="json")
    url = settings_of(ctx).webhook_url
    if url is not None:
        response = httpx.post(str(url), json=line, timeout=5.0)
        response.raise_for_status()
        return
    path = Path(ctx.stores.paths.data) / "notifications.jsonl"
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, sort_keys=True) + "\n")
