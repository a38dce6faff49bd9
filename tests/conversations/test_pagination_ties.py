"""The conversation list's cursors when activity instants tie (spec 07: cursor pagination;
spec 01: the list sorts by `last_activity_at`). Ties are ordinary: a millisecond clock,
conversations created together. The cursor carries the whole key (`last_activity_at`, `id`,
the order of `conv_activity_idx`), so `next` and `previous` are both exact."""

from __future__ import annotations

import base64
from urllib.parse import urlencode

import pytest

pytestmark = pytest.mark.django_db


def ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def flat(pages: list[list[str]]) -> list[str]:
    return [cid for page in pages for cid in page]


def walk_forward(client, url: str) -> list:
    pages = [client.get(url)]
    while pages[-1].json()["next"]:
        pages.append(client.get(pages[-1].json()["next"]))
    return pages


def test_the_previous_link_leads_back_to_the_page_before_when_activity_ties(
    api, owner, kit, fake_clock
):
    for i in range(7):
        kit.conversation(f"c{i}")  # the fake clock does not move: every activity ties
    client = api(owner)
    pages = walk_forward(client, "/v1/conversations?limit=2")
    forward = [ids(page) for page in pages]
    assert flat(forward) == [f"c{i}" for i in range(7)]
    assert ids(client.get(pages[1].json()["previous"])) == forward[0]
    assert ids(client.get(pages[3].json()["previous"])) == forward[2]


def test_walking_back_from_the_last_page_gives_every_page_again_in_order(
    api, owner, kit, fake_clock
):
    # groups of tying instants, newest first: b0..b2, then a0..a3, then z0 on its own
    for cid in ("z0", "a0", "a1", "a2", "a3", "b0", "b1", "b2"):
        if cid in ("a0", "b0"):
            fake_clock.advance(seconds=1)
        kit.conversation(cid)
    client = api(owner)
    pages = walk_forward(client, "/v1/conversations?limit=3")
    forward = [ids(page) for page in pages]
    assert flat(forward) == ["b0", "b1", "b2", "a0", "a1", "a2", "a3", "z0"]
    assert pages[0].json()["previous"] is None

    backward = [ids(pages[-1])]
    page = pages[-1]
    while page.json()["previous"]:
        page = client.get(page.json()["previous"])
        backward.insert(0, ids(page))
        # a page reached backwards leads forward to the page after it again
        assert ids(client.get(page.json()["next"])) == backward[1]
    assert backward == forward


def test_a_conversation_active_in_the_same_instant_as_the_cursor_is_neither_skipped_nor_repeated(
    api, owner, kit, fake_clock
):
    for cid in ("c1", "c3", "c5"):
        kit.conversation(cid)
    client = api(owner)
    first = client.get("/v1/conversations?limit=2")
    assert ids(first) == ["c1", "c3"]
    kit.conversation("c2")  # same instant, sorts before the cursor's row: not on a later page
    kit.conversation("c4")  # same instant, after the cursor's row: on the next page
    assert ids(client.get(first.json()["next"])) == ["c4", "c5"]


def cursor(*positions: str, **tokens: str) -> str:
    query = urlencode([("p", p) for p in positions] + list(tokens.items()))
    return base64.b64encode(query.encode()).decode()


@pytest.mark.parametrize(
    "forged",
    [
        cursor("2026-01-01 00:00:00+00:00", "c1", "extra"),  # more values than the key has
        cursor("2026-01-01 00:00:00+00:00", "c1", o="2"),  # an offset: never issued
        cursor("2026-01-01 00:00:00+00:00", "c\x00"),  # an id PostgreSQL text cannot hold
        cursor("garbage", "c1"),
    ],
)
def test_a_cursor_the_server_did_not_issue_is_a_400(api, owner, kit, forged):
    kit.conversation("c1")
    response = api(owner).get("/v1/conversations", {"cursor": forged})
    assert response.status_code == 400, response.content
    assert response.json()["error"]["message"] == "Cursor is invalid"
