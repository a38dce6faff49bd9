"""Builders for conversation tests: conversations, submissions, claims, through the services."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction

from conversations import services
from conversations.models import Conversation, Entry, Run, Submission
from conversations.services import Origin


def text(value: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value}]


@dataclass
class Kit:
    """Drives the services the way the API and the runtime do."""

    default_owner: Any

    def conversation(self, cid: str = "c1", *, owner: Any = None, **fields: Any) -> Conversation:
        with transaction.atomic():
            return services.conversation_ensure(
                owner=owner or self.default_owner, conversation_id=cid, **fields
            ).conversation

    def submit(self, cid: str = "c1", say: str = "hello", **kw: Any) -> Submission:
        kw.setdefault("origin", Origin.of_user(self.default_owner))
        with transaction.atomic():
            return services.submission_admit(conversation_id=cid, parts=text(say), **kw).submission

    def claim(self, cid: str | None = "c1", claim_key: str | None = None) -> Run:
        claim = services.run_claim(conversation_id=cid, claim_key=claim_key)
        assert claim is not None, "nothing was claimable"
        return claim.run

    def answer(self, run: Run, say: str = "answer", key: str | None = None) -> Entry:
        return services.entry_append(
            conversation_id=run.conversation_id,
            run_id=run.pk,
            role="assistant",
            content=text(say),
            entry_key=key,
        ).entry

    def settle(self, run: Run, say: str = "answer") -> Run:
        entry = self.answer(run, say)
        return services.run_settle(run_id=run.pk, status="answered", answer_entry_id=entry.pk).run


@pytest.fixture
def kit(owner) -> Kit:
    return Kit(default_owner=owner)


@pytest.fixture
def runtime(api):
    """The agent runtime: a client authenticated with the service token."""
    return api("service")
