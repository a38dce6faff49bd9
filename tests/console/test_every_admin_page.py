"""Every admin page of every model loads with data present, and the busiest lists stay within
a fixed number of queries however many rows they show."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from conversations.models import Conversation
from core import clock
from extensions_host.models import RosterEntry


def test_every_changelist_change_and_add_page_loads_with_data_present(console, host, staff):
    walked, empty = [], set()
    for model, model_admin in admin.site._registry.items():
        info = (model._meta.app_label, model._meta.model_name)
        listing = console.get(reverse("admin:{}_{}_changelist".format(*info)))
        assert listing.status_code == 200, info
        if model_admin.search_fields:
            searched = console.get(reverse("admin:{}_{}_changelist".format(*info)), {"q": "c1"})
            assert searched.status_code == 200, info
        row = model._default_manager.order_by("pk").first()
        if row is None:
            empty.add(info)
            continue
        change = console.get(reverse("admin:{}_{}_change".format(*info), args=[row.pk]))
        assert change.status_code == 200, info
        walked.append(info)
        request = listing.wsgi_request
        if model_admin.has_add_permission(request):
            assert console.get(reverse("admin:{}_{}_add".format(*info))).status_code == 200, info
    assert empty == set()  # the filled host has a row of every model: every page is walked
    assert len(walked) >= 25
    index = console.get(reverse("admin:index"))
    assert index.status_code == 200


def test_read_only_admins_let_staff_view_rows_but_never_add_change_or_delete_them(console, host):
    from core.admin import ReadOnlyAdmin

    request = console.get(reverse("admin:index")).wsgi_request  # a superuser's request
    read_only = {
        model: model_admin
        for model, model_admin in admin.site._registry.items()
        if isinstance(model_admin, ReadOnlyAdmin)
    }
    assert len(read_only) >= 15
    for model, model_admin in read_only.items():
        row = model._default_manager.order_by("pk").first()
        assert model_admin.has_view_permission(request, row), model
        assert not model_admin.has_add_permission(request), model
        assert not model_admin.has_change_permission(request, row), model
        assert not model_admin.has_delete_permission(request, row), model
    # conversations included: they go by archive and the retention sweep, never a cascade
    assert Conversation in read_only


def _extensions(n: int) -> None:
    RosterEntry.objects.bulk_create(
        RosterEntry(id=f"ext{i:03}", version="1", revision="r" * 64, admitted_grants=["state"])
        for i in range(n)
    )


@pytest.mark.parametrize("rows", [5, 60])
def test_the_extension_list_takes_a_fixed_number_of_queries(
    console, db, rows, django_assert_max_num_queries
):
    _extensions(rows)
    with django_assert_max_num_queries(8):
        page = console.get(reverse("admin:extensions_host_rosterentry_changelist"))
    assert page.status_code == 200
    assert page.content.decode().count('class="hy-badge hy-running"') == min(rows, 100)


@pytest.mark.parametrize("rows", [5, 60])
def test_the_conversation_list_takes_a_fixed_number_of_queries(
    console, staff, rows, django_assert_max_num_queries
):
    Conversation.objects.bulk_create(
        Conversation(id=f"conv{i:03}", owner=staff, last_activity_at=clock.now())
        for i in range(rows)
    )
    with django_assert_max_num_queries(8):
        page = console.get(reverse("admin:conversations_conversation_changelist"))
    assert page.status_code == 200
    assert page.content.decode().count("/inspect/conv") == min(rows, 100)


# filters that reach a query: the records browser, the world debug view, Django's list lookups
# and search (on PostgreSQL each was a 500: text with a NUL cannot be compared)
NUL_FILTERS = [
    ("admin:extensions_host_rosterentry_change", ["keeper"], {"key": "a\x00"}),
    ("admin:extensions_host_rosterentry_change", ["keeper"], {"index": "a\x00"}),
    ("admin:extensions_host_rosterentry_change", ["keeper"], {"collection": "a\x00"}),
    ("admin:artifacts_world_debug", ["c1"], {"operation_id": "a\x00"}),
    ("admin:conversations_entry_changelist", [], {"conversation": "a\x00"}),
    ("admin:conversations_run_changelist", [], {"conversation": "a\x00"}),
    ("admin:extensions_host_rosterentry_changelist", [], {"status__exact": "a\x00"}),
    ("admin:conversations_conversation_changelist", [], {"q": "a\x00"}),
]


@pytest.mark.parametrize(("name", "args", "query"), NUL_FILTERS)
def test_a_nul_in_a_console_filter_is_a_400_page_never_a_server_error(
    console, host, name, args, query
):
    url = reverse(name, args=args)
    refused = console.get(url, query)
    assert refused.status_code == 400
    assert refused["Content-Type"].startswith("text/html")
    (param,) = query
    assert console.get(url, {param: "a"}).status_code == 200  # the same filter without it
