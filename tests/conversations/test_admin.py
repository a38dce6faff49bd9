"""The read-mostly admin: pages render for staff in a fixed number of queries."""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def populated(kit, make_user):
    for n in range(12):
        owner = make_user(f"user{n}")
        kit.conversation(f"c{n}", owner=owner)
        kit.submit(f"c{n}")
        kit.settle(kit.claim(f"c{n}"))
        kit.submit(f"c{n}", say="queued")


@pytest.mark.parametrize("model", ["conversation", "entry", "submission", "run"])
def test_every_changelist_renders_in_a_fixed_number_of_queries(
    staff_client, populated, model, django_assert_max_num_queries
):
    with django_assert_max_num_queries(12):
        response = staff_client.get(f"/admin/conversations/{model}/")
    assert response.status_code == 200


def test_a_conversation_page_links_to_its_entries_submissions_and_runs(staff_client, populated):
    response = staff_client.get("/admin/conversations/conversation/c3/change/")
    assert response.status_code == 200
    page = response.content.decode()
    for model in ("entry", "submission", "run"):
        assert f"/admin/conversations/{model}/?conversation=c3" in page
    filtered = staff_client.get("/admin/conversations/entry/?conversation=c3")
    assert filtered.status_code == 200
    assert filtered.context["cl"].result_count == 3


def test_the_admin_offers_no_add_or_change(staff_client, populated):
    assert staff_client.get("/admin/conversations/run/add/").status_code == 403
    response = staff_client.post("/admin/conversations/conversation/c1/change/", {"name": "hacked"})
    assert response.status_code == 403


def test_non_staff_cannot_see_the_admin(client, owner):
    client.force_login(owner)
    response = client.get("/admin/conversations/conversation/")
    assert response.status_code == 302
