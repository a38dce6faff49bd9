"""Every cursor-paginated list answers a cursor the server did not issue with 400 `Cursor is
invalid`: never a 404, and never a 500 from a position its ordering column cannot compare with
(a NUL, a number past bigint, text where an id goes)."""

from __future__ import annotations

import base64

import pytest

from conversations.models import Conversation
from core import clock

# (path, ordering column's kind)
LISTS = [
    ("/v1/conversations", "datetime"),
    ("/v1/conversations/c1/entries", "id"),
    ("/v1/conversations/c1/interactions", "id"),
    ("/v1/auth/tokens", "id"),
    ("/v1/extensions", "text"),
]
POSITIONS = ["garbage", "\x00", "99999999999999999999999", "-1", "1\x00"]


def forged(position: str) -> str:
    return base64.b64encode(f"p={position}".encode()).decode()


@pytest.mark.parametrize(("path", "kind"), LISTS)
@pytest.mark.parametrize("position", POSITIONS)
def test_a_forged_cursor_position_is_a_400_never_a_500(api, owner, path, kind, position):
    Conversation.objects.create(id="c1", owner=owner, last_activity_at=clock.now())
    response = api(owner).get(path, {"cursor": forged(position)})
    comparable = kind == "text" and "\x00" not in position
    if comparable:  # any text compares with a text column: an empty page, or the next one
        assert response.status_code == 200, response.content
    else:
        assert response.status_code == 400, response.content
        assert response.json()["error"]["message"] == "Cursor is invalid"


@pytest.mark.parametrize(("path", "kind"), LISTS)
def test_a_cursor_that_is_not_base64_is_a_400(api, owner, path, kind):
    Conversation.objects.create(id="c1", owner=owner, last_activity_at=clock.now())
    response = api(owner).get(path, {"cursor": "not a cursor"})
    assert response.status_code == 400, response.content
    assert response.json()["error"]["cause"] == "invalid"
