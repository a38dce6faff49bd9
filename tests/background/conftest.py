"""Fixtures for background work: install test extensions, run frames, make settled runs, and
capture enqueued tasks instead of sending them."""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import transaction

from conversations.models import (
    Conversation,
    Entry,
    OriginKind,
    Role,
    Run,
    RunStatus,
    Submission,
    SubmissionStatus,
)
from conversations.services import Origin, run_claim, run_settle, submission_admit
from core import clock
from extensions_host.background import tasks
from extensions_host.background.models import Timer
from extensions_host.models import RosterEntry
from extensions_host.runtime import FrameOutcome, run_frame
from extensions_host.services.roster import extension_resume


def in_frame(extension_id: str, fn: Callable[[Any], Any], **options: Any) -> FrameOutcome:
    """Run `fn(ctx)` in a frame of the extension (as a command would: typed errors return)."""
    options.setdefault("failures", "return")
    return run_frame(extension_id=extension_id, hook="test", call=fn, **options)


def set_timers(extension_id: str, **timers: int) -> None:
    """Set each `key=due_at` timer of the extension, in one frame."""

    def body(ctx: Any) -> None:
        for key, due in timers.items():
            ctx.timers.set(key, due)

    outcome = in_frame(extension_id, body)
    assert outcome.ok, outcome


def pending(extension_id: str) -> dict[str, int]:
    """The extension's stored timers, key → due_at."""
    return dict(Timer.objects.filter(extension_id=extension_id).values_list("key", "due_at"))


def roster(extension_id: str) -> RosterEntry:
    return RosterEntry.objects.get(pk=extension_id)


def resume(extension_id: str) -> None:
    extension_resume(extension_id=extension_id, actor="staff")


@dataclass
class Sent:
    """Tasks enqueued (after commit) during a test, by task name."""

    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)

    def of(self, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [(args, kwargs) for task, args, kwargs in self.calls if task == name]

    def clear(self) -> None:
        self.calls.clear()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Sent:
    """Record `delay`/`apply_async` of the background tasks instead of sending them."""
    record = Sent()
    for name in (
        "fire_timers",
        "deliver_settled",
        "deliver_lifecycle",
        "lifecycle_fanout",
        "run_worker",
        "workers_sweep",
        "run_job",
        "run_jobs",
        "detect_idle",
    ):
        task = getattr(tasks, name)

        def delay(*args: Any, _name: str = name, **kwargs: Any) -> None:
            record.calls.append((_name, args, kwargs))

        def apply_async(
            args: Any = (), kwargs: Any = None, _name: str = name, **options: Any
        ) -> None:
            record.calls.append((_name, tuple(args or ()), {**(kwargs or {}), **options}))

        monkeypatch.setattr(task, "delay", delay)
        monkeypatch.setattr(task, "apply_async", apply_async)
    return record


@pytest.fixture
def conversation(owner: Any) -> Callable[..., Conversation]:
    def make(cid: str = "c1", *, who: Any = None) -> Conversation:
        return Conversation.objects.create(id=cid, owner=who or owner, last_activity_at=clock.now())

    return make


def settle_runs(conversation_id: str, count: int, *, text: str = "hi") -> list[int]:
    """Submit, claim and settle `count` runs in the conversation; returns their sequences."""
    sequences = []
    for n in range(count):
        with transaction.atomic():
            submission_admit(
                conversation_id=conversation_id,
                parts=[{"type": "text", "text": f"{text} {n}"}],
                origin=Origin(kind="extension", extension_id="tests"),
                request_id=f"{conversation_id}-{secrets.token_hex(6)}",
            )
        claim = run_claim(conversation_id=conversation_id)
        assert claim is not None
        settled = run_settle(run_id=claim.run.pk, status="unanswered", reason="done")
        sequences.append(settled.run.settled_sequence)
    return sequences


def claimed_runs(owner: Any, count: int, tag: str) -> list[int]:
    """`count` conversations, each with one input and one claimed run (bulk setup: the test is
    about settling and delivery, not about admission and claims)."""
    now = clock.now()
    lease = now + dt.timedelta(hours=1)
    conversations = Conversation.objects.bulk_create(
        [Conversation(id=f"{tag}{n:05}", owner=owner, last_activity_at=now) for n in range(count)]
    )
    runs = Run.objects.bulk_create(
        [
            Run(conversation=c, status=RunStatus.CLAIMED, claimed_at=now, lease_expires_at=lease)
            for c in conversations
        ]
    )
    submissions = Submission.objects.bulk_create(
        [
            Submission(
                conversation_id=run.conversation_id,
                request_id="r",
                parts=[{"type": "text", "text": f"input of {run.conversation_id}"}],
                origin_kind=OriginKind.USER,
                origin_user=owner,
                fingerprint="0" * 64,
                status=SubmissionStatus.CLAIMED,
                run=run,
            )
            for run in runs
        ]
    )
    Entry.objects.bulk_create(
        [
            Entry(
                conversation_id=sub.conversation_id,
                role=Role.USER,
                content=sub.parts,
                submission=sub,
            )
            for sub in submissions
        ]
    )
    return [run.pk for run in runs]


# --- real processes (integration tests): the fixtures of tests/integration ------------------

from tests.integration.conftest import (  # noqa: E402
    broker,
    processes,
    pytest_runtest_makereport,
)

__all__ = ["broker", "processes", "pytest_runtest_makereport"]
