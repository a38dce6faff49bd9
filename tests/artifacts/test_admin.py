"""The read-only artifact admin: lists, the per-world debug view and the integrity action."""

from __future__ import annotations

import pytest
from django.test import Client

from artifacts import services
from artifacts.models import Record
from tests.artifacts.helpers import decl, emit, head, op_context, req_context, started, with_attempt

pytestmark = pytest.mark.django_db


@pytest.fixture
def filled(world):
    op = op_context()
    ctx = started(op, decl("panel", save="operation"))
    record = emit(ctx, "panel", "visible panel text", "c1")
    services.operation_mark_core_committed(context=op, head=head(1))
    return record


@pytest.mark.parametrize("model", ["world", "operation", "record", "event"])
def test_staff_can_list_and_view_but_not_add_change_or_delete(console, filled, model):
    listing = console.get(f"/admin/artifacts/{model}/")
    assert listing.status_code == 200
    assert console.get(f"/admin/artifacts/{model}/add/").status_code == 403


def test_a_record_page_is_read_only(console, filled):
    record = Record.objects.get()
    page = console.get(f"/admin/artifacts/record/{record.pk}/change/")
    assert page.status_code == 200
    assert b"visible panel text" in page.content
    assert b'name="_save"' not in page.content
    posted = console.post(f"/admin/artifacts/record/{record.pk}/change/", {"channel": "x"})
    assert posted.status_code == 403
    assert Record.objects.get().channel == "main"


def test_the_debug_view_shows_projection_operations_records_and_integrity(console, filled):
    page = console.get("/admin/artifacts/world/world-1/debug/")
    assert page.status_code == 200
    html = page.content.decode()
    assert filled.record_id in html
    assert "core_committed" in html
    assert "visible panel text" in html
    assert "bind_head" in html
    assert "Run the integrity check" in html  # the check itself only on request
    checked = console.get("/admin/artifacts/world/world-1/debug/?check=1")
    assert "No corruption found" in checked.content.decode()


def test_the_debug_view_reports_corruption(console, filled):
    Record.objects.update(payload="tampered")
    html = console.get("/admin/artifacts/world/world-1/debug/?check=1").content.decode()
    assert "the payload does not match its fingerprint" in html


def test_the_integrity_action_reports_clean_and_corrupt_worlds(console, filled):
    action = {"action": "check_integrity", "_selected_action": ["world-1"]}
    page = console.post("/admin/artifacts/world/", action, follow=True)
    assert "1 world(s) checked: no corruption found." in page.content.decode()

    Record.objects.update(payload="tampered")
    page = console.post("/admin/artifacts/world/", action, follow=True)
    html = page.content.decode()
    # a changed payload: its fingerprint and its size no longer match
    assert "2 problem(s) found in 1 world(s)." in html
    # (the admin capitalises the first letter of each message)
    assert "World=world-1 sequence=1: the payload does not match its fingerprint" in html


def test_non_staff_cannot_open_the_debug_view(owner, filled):
    client = Client()
    client.force_login(owner)
    response = client.get("/admin/artifacts/world/world-1/debug/")
    assert response.status_code == 302  # to the admin login


def _column(html: str, name: str) -> list[str]:
    """The cells of one list_display column, in page order."""
    import re

    return re.findall(rf'<td class="field-{name}">([^<]*)</td>', html)


def test_the_record_list_shows_each_records_effective_status(console, world):
    first = op_context(operation_id="op-1")
    ctx1 = started(first, decl("panel", save="operation"))
    emit(ctx1, "panel", "first", "c1")
    services.head_reconcile(world_id="world-1", head=head(9))  # op-1 is superseded: not its record
    second = op_context(operation_id="op-2", parent_head=head(9))
    ctx2 = started(second, decl("panel", save="operation"), decl("later", channel="x"))
    emit(ctx2, "panel", "cleared", "c2")
    services.artifact_clear(context=ctx2, output="panel", tool_call_id="c3")
    emit(ctx2, "panel", "shown", "c4")
    emit(ctx2, "later", "pending", "c5")
    assert Record.objects.get(operation_id="op-1").superseded is False  # the raw column

    html = console.get("/admin/artifacts/record/").content.decode()

    # newest first
    assert _column(html, "status") == ["pending", "active", "cleared", "superseded"]


def test_the_record_list_reads_statuses_in_a_bounded_number_of_queries(console, owner, world):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.artifacts.helpers import make_world

    def listed() -> tuple[int, list[str]]:
        with CaptureQueriesContext(connection) as captured:
            page = console.get("/admin/artifacts/record/")
        assert page.status_code == 200
        return len(captured.captured_queries), _column(page.content.decode(), "status")

    def fill(world_id: str, emits: int) -> None:
        op = op_context(world_id=world_id, operation_id=f"op-{world_id}")
        ctx = started(op, decl("panel", save="operation", max_emits=emits))
        for n in range(emits):
            emit(ctx, "panel", f"p{n}", f"c{n}")
        services.artifact_clear(context=ctx, output="panel", tool_call_id="clear")

    fill("world-1", 2)
    few_queries, few = listed()
    assert few == ["cleared", "cleared"]
    for n in range(2, 6):
        make_world(owner, f"world-{n}")
        fill(f"world-{n}", 25)

    many_queries, many = listed()

    assert len(many) == 100  # one full page, over five worlds
    assert set(many) == {"cleared"}
    assert many_queries == few_queries


def test_the_operation_list_shows_request_attempts(console, world):
    ctx = started(op_context(), decl())
    services.request_attempt_begin(context=with_attempt(ctx, 3))
    services.request_attempt_begin(context=req_context(op_context(), decl(), request_id="a-req"))
    services.operation_begin(context=op_context(operation_id="op-2"))

    html = console.get("/admin/artifacts/operation/").content.decode()

    assert _column(html, "attempts") == ["-", "a-req=1, req-1=3"]
