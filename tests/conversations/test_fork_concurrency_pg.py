"""Concurrent identical forks under one client-chosen child id (PostgreSQL, real threads)."""

from __future__ import annotations

import pytest

from conversations import services
from conversations.models import Conversation
from core.auth import user_principal
from core.errors import HostError
from tests.conversations.test_concurrency_pg import in_threads

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _fork(owner, at: int, child_id: str = "child", conversation_id: str = "p1") -> object:
    try:
        created = services.conversation_fork(
            principal=user_principal(owner, "token"),
            conversation_id=conversation_id,
            at=at,
            child_id=child_id,
        )
    except HostError as exc:
        return f"{exc.status} {exc.message}"
    return created.conversation.pk


def test_identical_forks_racing_under_one_child_id_all_get_the_one_fork(kit, owner):
    """A client retry in flight with the first attempt: every request gets the fork, as a
    replay after it would (the loser of the insert re-reads instead of answering 409)."""
    kit.conversation("p1")
    entry = kit.submit("p1", "hello").entry

    outcomes = in_threads(8, lambda _: _fork(owner, entry.pk))

    assert set(outcomes) == {"child"}, outcomes
    child = Conversation.objects.get(pk="child")
    assert (child.parent_id, child.forked_at_entry) == ("p1", entry.pk)


def test_different_forks_racing_under_one_child_id_leave_one_and_refuse_the_rest(kit, owner):
    kit.conversation("p1")
    first = kit.submit("p1", "hello").entry
    second = kit.submit("p1", "again").entry

    outcomes = in_threads(8, lambda n: _fork(owner, first.pk if n % 2 else second.pk))

    winner = Conversation.objects.get(pk="child").forked_at_entry
    assert set(outcomes) == {"child", "409 Conversation id is taken"}, outcomes
    assert outcomes.count("child") == 4  # every request for the winning fork point
    assert winner in (first.pk, second.pk)
