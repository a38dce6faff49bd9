"""The console's lists over tables that grow without bound stay bounded: no DISTINCT over the
table for a filter's choices, no truncated timestamps, no uncapped COUNT(*), no big column
loaded for a row that does not show it, an order an index serves, and a fixed number of queries
however many rows a page shows."""

from __future__ import annotations

import ast
import datetime as dt
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from conversations.models import Entry, Run, Submission
from core.admin import BigTableAdmin
from core.models import AuditEntry
from core.services import audit_record
from extensions_host.background.models import LifecycleDelivery, SettledCursor
from extensions_host.contributions.admin import AUDIT_ACTIONS
from extensions_host.models import ExtensionRecord

# (admin URL name, table) of the lists that filtered a plain column by Django's
# `AllValuesFieldListFilter` (a SELECT DISTINCT over the table) or had a date hierarchy
FILTERED_LISTS = [
    ("extensions_host_extensionrecord", "extensions_host_extensionrecord"),
    ("extensions_host_extensiondocument", "extensions_host_extensiondocument"),
    ("core_auditentry", "core_auditentry"),
    ("ext_contributions_notificationdelivery", "ext_contributions_notificationdelivery"),
    ("ext_surfaces_toolcallresult", "ext_surfaces_toolcallresult"),
    ("ext_surfaces_interaction", "ext_surfaces_interaction"),
    ("ext_background_lifecycledelivery", "ext_background_lifecycledelivery"),
]

# the lists over tables that grow without bound (the artifact ones are tested in tests/artifacts)
BIG_LISTS = [
    ("extensions_host_extensionrecord", "extensions_host_extensionrecord"),
    ("extensions_host_extensiondocument", "extensions_host_extensiondocument"),
    ("ext_background_timer", "ext_background_timer"),
    ("ext_background_lifecycledelivery", "ext_background_lifecycledelivery"),
    ("core_auditentry", "core_auditentry"),
    ("ext_contributions_notification", "ext_contributions_notification"),
    ("ext_contributions_notificationdelivery", "ext_contributions_notificationdelivery"),
    ("ext_surfaces_toolcallresult", "ext_surfaces_toolcallresult"),
    ("ext_surfaces_interaction", "ext_surfaces_interaction"),
    ("conversations_conversation", "conversations_conversation"),
    ("conversations_entry", "conversations_entry"),
    ("conversations_submission", "conversations_submission"),
    ("conversations_run", "conversations_run"),
]
_FULL_COUNT = re.compile(r'^SELECT COUNT\(\*\) AS "__count" FROM "(?P<table>[a-z_]+)"$')


def _list(console, name, params=None):
    """The list page and the SQL it ran."""
    with CaptureQueriesContext(connection) as ctx:
        page = console.get(reverse(f"admin:{name}_changelist"), params or {})
    assert page.status_code == 200, name
    return page, [q["sql"] for q in ctx.captured_queries]


def _shown(page) -> list:
    return list(page.context["cl"].result_list)


# --- filters: choices from small sources, never from the filtered table ------------------------


@pytest.mark.parametrize(("name", "table"), FILTERED_LISTS)
def test_a_big_list_finds_its_filter_choices_without_a_distinct_over_its_table(
    console, host, name, table
):
    _, sql = _list(console, name)
    distinct = [q for q in sql if q.startswith("SELECT DISTINCT") and f'FROM "{table}"' in q]
    assert distinct == []


def test_the_audit_log_truncates_no_timestamp_to_offer_dates(console, host):
    _, sql = _list(console, "core_auditentry")
    assert [q for q in sql if "trunc" in q.lower()] == []


@pytest.mark.parametrize(
    ("name", "param", "offered", "absent"),
    [
        ("extensions_host_extensionrecord", "collection", "note", "nothing"),
        ("extensions_host_extensiondocument", "name", "pad", "nothing"),
        ("ext_background_lifecycledelivery", "kind", "conversation_created", "user_deleted"),
        ("ext_background_lifecycledelivery", "extension_id", "keeper", "flaky"),
        ("ext_contributions_notificationdelivery", "extension_id", "keeper", "flaky"),
        ("ext_surfaces_toolcallresult", "extension_id", "keeper", "flaky"),
        ("ext_surfaces_interaction", "kind", "approval", "uninstalled-kind"),
        ("core_auditentry", "action", "extension_settings_edited", "job_triggered"),
    ],
)
def test_a_big_list_filter_offers_the_declared_values_and_filters_by_them(
    console, host, name, param, offered, absent
):
    page, _ = _list(console, name)
    (spec,) = [
        f for f in page.context["cl"].filter_specs if getattr(f, "parameter_name", None) == param
    ]
    assert offered in dict(spec.lookup_choices)
    assert len(_shown(page)) >= 1
    assert len(_shown(_list(console, name, {param: offered})[0])) >= 1
    assert _shown(_list(console, name, {param: absent})[0]) == []
    assert console.get(reverse(f"admin:{name}_changelist"), {"_facets": "1"}).status_code == 200


def test_a_value_no_source_names_still_filters_and_shows_as_chosen(console, host):
    """A link from elsewhere, or the rows of an extension no longer in the roster."""
    LifecycleDelivery.objects.create(
        extension_id="gone", event_id=7, kind="user_deleted", conversation_id=""
    )
    page, _ = _list(console, "ext_background_lifecycledelivery", {"extension_id": "gone"})
    assert [row.extension_id for row in _shown(page)] == ["gone"]
    (spec,) = [
        f
        for f in page.context["cl"].filter_specs
        if getattr(f, "parameter_name", None) == "extension_id"
    ]
    assert ("gone", "gone") in spec.lookup_choices
    assert spec.value() == "gone"


def test_the_audit_action_filter_offers_the_known_actions_in_their_order(console, host):
    page, _ = _list(console, "core_auditentry")
    (spec,) = [
        f for f in page.context["cl"].filter_specs if getattr(f, "parameter_name", None) == "action"
    ]
    assert [value for value, _ in spec.lookup_choices] == list(AUDIT_ACTIONS)


def test_the_audit_log_filters_by_the_last_hour_day_week_or_month(console, host):
    audit_record(actor="staff", action="job_triggered", target="ext:keeper:old")
    AuditEntry.objects.filter(target="ext:keeper:old").update(
        at=timezone.now() - dt.timedelta(days=10)
    )

    def targets(window):
        page, _ = _list(console, "core_auditentry", {"at__within": window})
        return {entry.target for entry in _shown(page)}

    assert "keeper" in targets("hour")  # the filled host's entry, just written
    assert "ext:keeper:old" not in targets("week")
    assert "ext:keeper:old" in targets("month")
    refused = console.get(reverse("admin:core_auditentry_changelist"), {"at__within": "year"})
    assert refused.status_code == 302  # Django's "bad filter" redirect (?e=1), not a 500


def _audited_actions() -> set[str]:
    """Every action the project's code audits: the `action` of `audit_record(...)` calls, and
    `host.<name>` for the host API's `self._audit("<name>", ...)`."""
    found: set[str] = set()
    root = Path(settings.BASE_DIR)
    for path in root.rglob("*.py"):
        if {".venv", "tests", "migrations"} & set(path.relative_to(root).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            called = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if called == "audit_record":
                (action,) = [k.value for k in node.keywords if k.arg == "action"]
                if isinstance(action, ast.JoinedStr):  # host.{action}: the _audit calls below
                    continue
                literals = (
                    [action.body, action.orelse] if isinstance(action, ast.IfExp) else [action]
                )
                for literal in literals:
                    assert isinstance(literal, ast.Constant), f"{path}:{node.lineno}"
                    found.add(literal.value)
            elif called == "_audit" and node.args:
                assert isinstance(node.args[0], ast.Constant), f"{path}:{node.lineno}"
                found.add(f"host.{node.args[0].value}")
    return found


def test_the_audit_action_filter_names_every_action_the_code_audits():
    audited = _audited_actions()
    assert len(audited) >= 20  # the scan finds the calls (it is not vacuous)
    assert audited - set(AUDIT_ACTIONS) == set()


# --- counts: capped, never the whole table ----------------------------------------------------


@pytest.mark.parametrize(("name", "table"), BIG_LISTS)
def test_a_big_list_never_counts_its_whole_table(console, host, name, table):
    _, sql = _list(console, name)
    full = [q for q in sql if (m := _FULL_COUNT.match(q)) and m["table"] == table]
    assert full == []
    model = next(m for m in admin.site._registry if m._meta.db_table == table)
    assert isinstance(admin.site._registry[model], BigTableAdmin)


# --- columns: a list loads what it shows ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model", "column"),
    [
        ("conversations_run", Run, "capture"),
        ("conversations_entry", Entry, "content"),
        ("conversations_submission", Submission, "parts"),
        ("extensions_host_extensionrecord", ExtensionRecord, "value"),
    ],
)
def test_a_list_leaves_out_the_big_column_its_rows_never_show_and_the_row_page_shows_it(
    console, host, name, model, column
):
    page, sql = _list(console, name)
    rows = _shown(page)
    assert rows and all(column in row.get_deferred_fields() for row in rows)
    listing = [q for q in sql if q.startswith(f'SELECT "{model._meta.db_table}"."')]
    assert listing and all(f'"{model._meta.db_table}"."{column}" FROM' not in q for q in listing)
    row = model.objects.order_by("pk").first()
    change = console.get(reverse(f"admin:{name}_change", args=[row.pk]))
    assert change.status_code == 200
    assert column.replace("_", " ").capitalize() in change.content.decode()


def test_the_record_list_previews_the_start_of_a_long_value(console, host):
    ExtensionRecord.objects.filter(key="alpha").update(value='"' + "x" * 5000 + '"')
    page, _ = _list(console, "extensions_host_extensionrecord", {"q": "alpha"})
    html = page.content.decode()
    assert "&quot;" + "x" * 118 + "…" in html  # 120 characters, the quote included
    assert "x" * 119 not in html
    record = ExtensionRecord.objects.get(key="alpha")
    change = console.get(reverse("admin:extensions_host_extensionrecord_change", args=[record.pk]))
    assert "x" * 5000 in change.content.decode()  # the record's page shows all of it


# --- order: what an index serves --------------------------------------------------------------


def test_the_lifecycle_delivery_list_orders_by_what_one_of_its_indexes_serves():
    ordering = [f.lstrip("-") for f in admin.site._registry[LifecycleDelivery].ordering]
    prefixes = [list(index.fields[: len(ordering)]) for index in LifecycleDelivery._meta.indexes]
    assert ordering in prefixes


# --- queries: a fixed number per page ---------------------------------------------------------


def test_the_settled_cursor_list_takes_as_many_queries_for_30_rows_as_for_3(console, host):
    SettledCursor.objects.bulk_create(
        SettledCursor(extension_id=f"few-{i}", position=0) for i in range(2)
    )
    page, few = _list(console, "ext_background_settledcursor")
    assert len(_shown(page)) == 3
    SettledCursor.objects.bulk_create(
        SettledCursor(extension_id=f"many-{i}", position=0) for i in range(27)
    )
    page, many = _list(console, "ext_background_settledcursor")
    assert len(_shown(page)) == 30
    assert len(many) == len(few)
