"""The digest example, through the author harness: the settled consumer keeps the summary
document, its prompt section reaches the next claim, the idle worker nudges."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from hyphae_digest.extension import IDLE_ITEM, digest

from conversations.models import Entry
from conversations.services import conversation_fork


@pytest.fixture
def host(hyphae_host: Any) -> Any:
    hyphae_host.install(digest)
    hyphae_host.conversation("c1")
    return hyphae_host


def test_the_digest_document_updates_on_each_settled_run(host):
    first = host.settle("c1", "plan a trip to Lisbon", answer="Sure: three days.")
    assert host.deliver_settled() == 1

    doc = host.document("digest", "summary", "c1")
    assert (doc.runs, doc.answered, doc.last_sequence) == (1, 1, first.sequence)
    assert [(e.asked, e.answer) for e in doc.recent] == [
        ("plan a trip to Lisbon", "Sure: three days.")
    ]

    second = host.settle("c1", "and the budget?", outcome="unanswered")
    assert host.deliver_settled() == 1

    doc = host.document("digest", "summary", "c1")
    assert (doc.runs, doc.answered, doc.last_sequence) == (2, 1, second.sequence)
    assert [e.outcome for e in doc.recent] == ["answered", "unanswered"]


def test_each_settled_run_is_folded_in_exactly_once(host):
    host.settle("c1", "one")
    host.settle("c1", "two")

    assert host.deliver_settled() == 2
    assert host.deliver_settled() == 0  # the cursor moved with the document

    assert host.document("digest", "summary", "c1").runs == 2


def test_the_digest_section_reaches_the_next_claim(host):
    first = host.settle("c1", "plan a trip to Lisbon")
    assert first.prompt_sections == {}  # nothing settled yet: no section
    host.deliver_settled()

    second = host.settle("c1", "and the budget?")

    section = second.prompt_sections["digest.summary"]
    assert section.startswith("Conversation digest: 1 runs settled, 1 answered.")
    assert '"plan a trip to Lisbon"' in section
    assert "prompt sections: digest.summary" in second.answer  # the echo runtime names it


def test_digests_of_conversations_are_separate(host):
    host.conversation("c2")
    host.settle("c1", "about c1")
    host.settle("c2", "about c2")
    host.deliver_settled()

    assert [e.asked for e in host.document("digest", "summary", "c1").recent] == ["about c1"]
    assert [e.asked for e in host.document("digest", "summary", "c2").recent] == ["about c2"]


def test_the_idle_worker_nudges_an_idle_conversation_with_its_digest(host):
    host.settle("c1", "draft the release notes")
    host.deliver_settled()

    host.advance(seconds=settings.IDLE_AFTER_SECONDS + 1)
    assert host.detect_idle() == 1

    (item,) = host.attention("c1")
    assert (item["id"], item["level"]) == (IDLE_ITEM, "info")
    assert '"draft the release notes"' in item["body"]
    assert host.jobs() == {}  # a worker, not a job
    # activity clears the nudge
    host.settle("c1", "back again")
    host.deliver_settled()
    assert host.attention("c1") == []


def test_a_conversation_without_runs_is_not_nudged(host):
    host.advance(seconds=settings.IDLE_AFTER_SECONDS + 1)

    assert host.detect_idle() == 1
    assert host.attention("c1") == []
    assert host.status("digest").running


def test_a_fork_starts_with_a_copy_of_the_digest(host):
    host.settle("c1", "before the fork")
    host.deliver_settled()
    at = Entry.objects.filter(conversation_id="c1").order_by("pk").last().pk

    conversation_fork(principal=host.principal(), conversation_id="c1", at=at, child_id="c1b")

    assert host.document("digest", "summary", "c1b") == host.document("digest", "summary", "c1")
