"""A host with data in every table the console shows (the walk test and the page tests)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Group

from artifacts import services as artifact_services
from conversations.models import Conversation
from core import clock
from core.services import audit_record, token_create
from extensions_host.background.models import (
    JobState,
    LifecycleDelivery,
    Outcome,
    SettledCursor,
    Timer,
    WorkerState,
)
from extensions_host.contributions.models import (
    ExtensionSettings,
    NotifierHealth,
)
from extensions_host.contributions.models import Notification as OutboxNotification
from extensions_host.contributions.services.stores import secret_set
from extensions_host.surfaces.models import ToolCallResult
from tests.artifacts.helpers import decl, emit, newest_head, op_context, started
from tests.conversations.conftest import Kit

from .conftest import in_frame, stop
from .exts import Note, Pad

SECRET_VALUE = "sk-live-plaintext-never-shown-4242"


@dataclass
class Host:
    conversation: Conversation
    html_record_id: str


def fill_host(owner: Any) -> Host:
    """An API token, two extensions (keeper running, flaky stopped) and one conversation `c1`
    with a settled run, a queued prompt, attention, ambient, an interaction, records, a
    document, timers, a settled cursor, a job, a worker, notifications, settings, a secret and
    artifacts."""
    kit = Kit(default_owner=owner)
    token_create(user=owner, name="cli", scope="read", expires_at=None)
    conversation = kit.conversation("c1", name="Launch plan")
    kit.submit("c1", say="hello keeper")
    run = kit.settle(kit.claim("c1"), say="echo: hello keeper")
    ToolCallResult.objects.create(
        run=run,
        tool_call_id="tool-1",
        extension_id="keeper",
        tool="lookup",
        fingerprint="0" * 64,
        ok=True,
        result={"found": 1},
    )
    Group.objects.create(name="operators")
    kit.submit("c1", say="still waiting")
    stop("flaky")

    def fill(ctx: Any) -> None:
        notes = ctx.collection("note")
        notes.put(Note(key="alpha", text="first note", tag="c1"))
        notes.put(Note(key="beta", text="second note", tag="other"))
        ctx.document("pad").update("c1", lambda pad: Pad(text="pad text for c1"))
        ctx.attention.set(
            "c1", {"id": "review", "level": "warning", "title": "Review the launch plan"}
        )
        ctx.set_ambient("c1", {"key": "status", "place": "header", "body": ["2 of 3 done"]})
        ctx.seed_interaction("c1", {"call_id": "ask-1", "kind": "approval", "prompt": "Ship it?"})

    in_frame("keeper", fill)
    now = clock.now_ms()
    Timer.objects.create(
        extension_id="keeper", key="due-now", due_at=now - 5000, fire_at=now - 5000
    )
    Timer.objects.create(
        extension_id="keeper", key="later", due_at=now + 60_000, fire_at=now + 60_000
    )
    SettledCursor.objects.update_or_create(extension_id="keeper", defaults={"position": 0})
    JobState.objects.create(
        id="ext:keeper:nightly",
        extension_id="keeper",
        name="nightly",
        next_run_at=now + 3_600_000,
        last_run_at=now - 60_000,
        last_outcome=Outcome.FAILED,
        last_error="nightly failed: timeout",
        runs=3,
        failures=1,
    )
    WorkerState.objects.create(
        extension_id="keeper", name="indexer", runs=2, last_run_at=now, last_outcome=Outcome.OK
    )
    LifecycleDelivery.objects.create(
        extension_id="keeper", event_id=1, kind="conversation_created", conversation_id="c1"
    )
    outbox = OutboxNotification.objects.create(
        type="job.failed",
        title="Job nightly of keeper failed",
        body="nightly failed: timeout",
        job_id="ext:keeper:nightly",
    )
    outbox.deliveries.create(extension_id="keeper", notifier="pager", status="failed", attempts=5)
    NotifierHealth.objects.create(
        extension_id="keeper",
        notifier="pager",
        status=NotifierHealth.Status.DEGRADED,
        consecutive_failures=5,
        failed_deliveries=1,
        last_error="pager: connection refused",
        last_failure_at=now - 1000,
    )
    ExtensionSettings.objects.create(extension_id="keeper", value={"channel": "#launch"})
    secret_set(extension_id="keeper", key="api_token", value=SECRET_VALUE)
    audit_record(actor="staff", action="extension_settings_edited", target="keeper")

    operation = op_context(world_id="c1", parent_head=newest_head("c1"))
    context = started(
        operation,
        decl("notes", save="operation"),
        decl("data", save="operation", content_type="application/json", channel="side"),
        decl("page", save="operation", content_type="text/html", channel="side"),
    )
    emit(context, "notes", "# Plan\n\n*bold* move", "call-1")
    emit(context, "data", {"steps": 3}, "call-2")
    html = emit(context, "page", "<p id='x'>hi</p>", "call-3")
    artifact_services.operation_mark_core_committed(context=operation, head=operation.parent_head)
    return Host(conversation=conversation, html_record_id=html.record_id)
