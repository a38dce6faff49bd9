"""The artifact console stays up and bounded: a corrupt JSON payload is shown (debug view) or
skipped and logged (projection), never a 500; the world debug view costs the same however
long the world has lived; the big lists count and filter without reading whole tables."""

from __future__ import annotations

import ast
import copy
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models.signals import post_init
from django.test import Client
from django.test.utils import CaptureQueriesContext

from artifacts import services
from artifacts.admin import (
    DEBUG_OPERATIONS_SHOWN,
    EVENT_REASONS,
    INTEGRITY_WORLDS_MAX,
    MSG_TOO_MANY_WORLDS,
    PROBLEMS_SHOWN,
)
from artifacts.fingerprints import MSG_PAYLOAD_UNDECODABLE
from artifacts.models import Operation, Record, World
from artifacts.selectors import UNDECODABLE_TEXT_MAX, projection_read
from tests.artifacts.helpers import decl, emit, head, make_world, op_context, started

pytestmark = pytest.mark.django_db

DEBUG = "/admin/artifacts/world/world-1/debug/"


@pytest.fixture
def cards(world):
    """A committed operation with a text panel (sequence 1) and a JSON card (sequence 2)."""
    op = op_context()
    ctx = started(op, decl("panel"), decl("card", channel="cards", content_type="application/json"))
    emit(ctx, "panel", "the panel text", "c1")
    card = emit(ctx, "card", {"title": "the card"}, "c2")
    services.operation_mark_core_committed(context=op, head=head(1))
    return Record.objects.get(record_id=card.record_id)


def _corrupt(record: Record, text: str = "{not json") -> None:
    Record.objects.filter(pk=record.pk).update(payload=text)


def _clones(model: Any, n: int, mutate: Any) -> None:
    """`n` copies of the model's first row, each changed by `mutate(row, i)`: rows in bulk,
    for what the debug view loads, not for what they mean."""
    base = model._default_manager.order_by("pk").first()
    rows = []
    for i in range(n):
        row = copy.copy(base)
        row.pk = None
        mutate(row, i)
        rows.append(row)
    model._default_manager.bulk_create(rows)


def _more_records(n: int, start: int) -> None:
    def mutate(row: Record, i: int) -> None:
        row.sequence = 10_000 + start + i
        row.record_id = f"artifact:{10_000 + start + i}:clone"
        row.tool_call_id = f"clone-{start + i}"
        row.superseded = True  # out of the projection: only the debug view's reads see them

    _clones(Record, n, mutate)


def _more_operations(n: int, start: int) -> None:
    _clones(Operation, n, lambda row, i: setattr(row, "id", f"clone-op-{start + i:04}"))


def _loaded(client: Client, model: Any, url: str) -> int:
    """How many `model` instances a GET of `url` builds."""
    seen: list[Any] = []

    def count(sender: Any, instance: Any, **kwargs: Any) -> None:
        seen.append(instance)

    post_init.connect(count, sender=model)
    try:
        assert client.get(url).status_code == 200
    finally:
        post_init.disconnect(count, sender=model)
    return len(seen)


def _queries(client: Client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return [q["sql"] for q in captured.captured_queries]


# --- a JSON payload that no longer parses -----------------------------------------------------


def test_the_debug_view_shows_a_corrupt_json_payload_marked_with_its_raw_text(console, cards):
    _corrupt(cards, "{not json " + "x" * 5000)

    page = console.get(DEBUG)

    assert page.status_code == 200
    html = page.content.decode()
    assert f"undecodable payload: {MSG_PAYLOAD_UNDECODABLE}" in html
    assert "{not json " + "x" * (UNDECODABLE_TEXT_MAX - 10) + "…" in html  # its start, cut
    assert "x" * (UNDECODABLE_TEXT_MAX + 1) not in html
    assert "the panel text" in html  # the rest of the world as usual


@pytest.mark.parametrize("text", ["{not json", "[" * 100_000], ids=["garbled", "too-deep"])
def test_the_projection_skips_a_corrupt_json_payload_and_logs_world_and_sequence(
    cards, caplog, text
):
    _corrupt(cards, text)

    with caplog.at_level(logging.WARNING, logger="artifacts.selectors"):
        items = projection_read(world_id="world-1")

    assert [item["payload"] for item in items] == ["the panel text"]
    assert any(
        "world=world-1 sequence=2" in record.getMessage() and record.levelname == "WARNING"
        for record in caplog.records
    )


def test_the_api_projection_and_the_inspector_answer_200_over_a_corrupt_payload(
    cards, api, owner, staff, client
):
    _corrupt(cards)

    projection = api(owner).get("/v1/worlds/world-1/artifacts")
    debug = api(staff).get("/v1/worlds/world-1/artifacts/debug")
    client.force_login(owner)
    inspector = client.get("/inspect/world-1")

    assert projection.status_code == 200
    assert [item["payload"] for item in projection.json()["items"]] == ["the panel text"]
    assert debug.status_code == 200
    row = next(r for r in debug.json()["results"] if r["sequence"] == 2)
    assert (row["payload"], row["payload_undecodable"], row["payload_raw"]) == (
        None,
        True,
        "{not json",
    )
    assert inspector.status_code == 200
    assert "the panel text" in inspector.content.decode()


@pytest.mark.parametrize("text", ["{not json", "[" * 100_000], ids=["garbled", "too-deep"])
def test_the_integrity_check_still_reports_a_corrupt_json_payload(cards, console, text):
    _corrupt(cards, text)

    problems = [str(p) for p in services.integrity_check(world_ids=["world-1"])]
    checked = console.get(DEBUG + "?check=1").content.decode()

    assert "world=world-1 sequence=2: the JSON payload does not parse" in problems
    assert "world=world-1 sequence=2: the JSON payload does not parse" in checked


# --- the world debug view: bounded -----------------------------------------------------------


def test_the_debug_view_runs_the_integrity_check_only_when_asked(console, cards):
    Record.objects.filter(pk=cards.pk).update(payload='{"title": "tampered"}')

    plain = console.get(DEBUG).content.decode()
    checked = console.get(DEBUG + "?check=1").content.decode()

    assert "does not match its fingerprint" not in plain
    assert "Run the integrity check" in plain
    assert "world=world-1 sequence=2: the payload does not match its fingerprint" in checked


def test_the_debug_view_loads_as_many_records_for_600_as_for_1200_old_ones(console, cards):
    _more_records(600, 0)
    at_600 = _loaded(console, Record, DEBUG)
    _more_records(600, 600)
    at_1200 = _loaded(console, Record, DEBUG)

    assert at_1200 == at_600
    assert "Older records are not listed" in console.get(DEBUG).content.decode()


def test_the_debug_view_lists_the_newest_operations_only(console, cards):
    _more_operations(DEBUG_OPERATIONS_SHOWN, 0)
    at_cap = _loaded(console, Operation, DEBUG)
    _more_operations(300, DEBUG_OPERATIONS_SHOWN)
    past_cap = _loaded(console, Operation, DEBUG)

    assert past_cap == at_cap
    html = console.get(DEBUG).content.decode()
    assert f"Operations (newest {DEBUG_OPERATIONS_SHOWN})" in html
    assert "More operations are not listed" in html
    assert len(re.findall(r"\?operation_id=", html)) == DEBUG_OPERATIONS_SHOWN
    # newest first, and the list the note links to has them all
    assert html.index("clone-op-0399") < html.index("clone-op-0300")
    every = re.search(r'href="(/admin/artifacts/operation/\?[^"]+)"', html)
    assert every is not None
    listed = console.get(every[1].replace("&amp;", "&"))
    assert listed.status_code == 200
    assert "401 operations" in listed.content.decode()


def test_the_debug_view_shows_at_most_the_capped_number_of_problems(console, cards):
    _more_records(PROBLEMS_SHOWN + 5, 0)  # clones: each one is several problems

    html = console.get(DEBUG + "?check=1").content.decode()

    shown = re.findall(r'<li class="error">world=world-1 ', html)
    assert len(shown) == PROBLEMS_SHOWN
    assert f"the first {PROBLEMS_SHOWN} are shown" in html


def test_the_integrity_action_refuses_more_worlds_than_its_bound(console, cards, owner):
    for n in range(INTEGRITY_WORLDS_MAX):
        World.objects.create(conversation=make_world(owner, f"world-x{n}"))
    Record.objects.filter(pk=cards.pk).update(payload="tampered")
    select_all = {"action": "check_integrity", "select_across": "1", "_selected_action": ["x"]}

    page = console.post("/admin/artifacts/world/", select_all, follow=True)
    one = {"action": "check_integrity", "_selected_action": ["world-1"]}
    checked = console.post("/admin/artifacts/world/", one, follow=True)

    html = page.content.decode()
    assert MSG_TOO_MANY_WORLDS in html
    assert "problem(s) found" not in html and "no corruption found" not in html
    assert "problem(s) found in 1 world(s)." in checked.content.decode()


# --- the big lists ----------------------------------------------------------------------------


def test_the_operation_list_is_ordered_by_its_primary_key(console, cards):
    """An order no index leads with sorts the whole table for every page (PostgreSQL)."""
    sql = _queries(console, "/admin/artifacts/operation/")

    listing = [q for q in sql if q.startswith('SELECT "artifacts_operation"."id"')]
    assert listing
    assert all('ORDER BY "artifacts_operation"."id" DESC' in q for q in listing)


_FULL_COUNT = re.compile(r'^SELECT COUNT\(\*\) AS "__count" FROM "(?P<table>[a-z_]+)"$')


@pytest.mark.parametrize("query", ["", "?q=world-1"])
@pytest.mark.parametrize("model", ["operation", "record", "event"])
def test_a_big_artifact_list_never_counts_its_whole_table(console, cards, model, query):
    sql = _queries(console, f"/admin/artifacts/{model}/{query}")

    table = f"artifacts_{model}"
    assert [q for q in sql if (m := _FULL_COUNT.match(q)) and m["table"] == table] == []
    assert any(q.startswith("SELECT COUNT(*)") and table in q for q in sql)  # the capped one


def test_the_event_list_filters_by_reason_without_reading_the_table_for_them(console, world):
    op = op_context()
    ctx = started(op, decl("panel", invalidation="new_operation"))
    emit(ctx, "panel", "first", "c1")
    services.artifact_clear(context=ctx, output="panel", tool_call_id="c2")
    services.operation_begin(context=op_context(operation_id="op-2"))

    sql = _queries(console, "/admin/artifacts/event/")
    filtered = console.get("/admin/artifacts/event/?reason=explicit_clear").content.decode()

    assert [q for q in sql if "DISTINCT" in q and "artifacts_event" in q] == []
    assert (
        "?reason=late_superseded_operation_result"
        in console.get("/admin/artifacts/event/").content.decode()
    )
    assert re.findall(r'<td class="field-reason">([^<]*)</td>', filtered) == ["explicit_clear"]


def _written_reasons() -> set[str]:
    """The reason literals artifacts/services writes events with: `reason="…"` (or a
    conditional of literals) and the reason argument of `supersede(…)` and
    `_supersede_operation_end(…)`."""
    found: set[str] = set()

    def literals(node: ast.AST) -> set[str]:
        return {
            n.value
            for n in ast.walk(node)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }

    root = Path(services.__file__).parent
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                if keyword.arg == "reason":
                    found |= literals(keyword.value)
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in ("supersede", "_supersede_operation_end") and len(node.args) >= 2:
                found |= literals(node.args[-1])
    return found


def test_the_reason_filter_offers_every_reason_the_services_write():
    written = _written_reasons()

    assert "explicit_clear" in written and "core_failed" in written  # the scan finds them
    assert written == {str(reason) for reason in EVENT_REASONS}
