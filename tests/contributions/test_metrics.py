"""/metrics' database figures: right on a small data set, and bounded by what is live (a scrape
never scans a table of history)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from conversations.models import Conversation, Run, RunStatus, SettledCounter
from core import clock
from extensions_host.contributions.metrics import DatabaseCollector
from extensions_host.contributions.models import (
    DeliveryStatus,
    Notification,
    NotificationDelivery,
    NotifierHealth,
)

# the tables that only grow (until retention): no scrape query may read them whole
HISTORY_TABLES = {
    Run._meta.db_table,
    NotificationDelivery._meta.db_table,
}


def samples(name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The values of one metric family of a scrape, by their labels."""
    families = {family.name: family for family in DatabaseCollector().collect()}
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for sample in families[name].samples
        if not sample.name.endswith("_created")
    }


def by_status(name: str) -> dict[str, float]:
    return {dict(labels)["status"]: value for labels, value in samples(name).items()}


@pytest.fixture
def history(owner: Any) -> None:
    """A small stored history: runs and deliveries in every status, two notifiers' health."""
    now = clock.now()
    runs = []
    for n in range(9):
        status = [RunStatus.CLAIMED] * 2 + [RunStatus.SETTLED] * 5 + [RunStatus.RELEASED] * 2
        conversation = Conversation.objects.create(id=f"m{n}", owner=owner, last_activity_at=now)
        runs.append(
            Run(
                conversation=conversation,
                status=status[n],
                claimed_at=now,
                lease_expires_at=now,
                settled_sequence=n if status[n] == RunStatus.SETTLED else None,
            )
        )
    Run.objects.bulk_create(runs)
    SettledCounter.objects.update_or_create(id=1, defaults={"value": 7})
    statuses = (
        [DeliveryStatus.PENDING] * 3
        + [DeliveryStatus.IN_FLIGHT]
        + [DeliveryStatus.DELIVERED] * 6
        + [DeliveryStatus.FAILED] * 2
        + [DeliveryStatus.SKIPPED] * 4
    )
    for status in statuses:
        notification = Notification.objects.create(type="job.failed", title="t")
        NotificationDelivery.objects.create(
            notification=notification, extension_id="ntfy", notifier="push", status=status
        )
    NotifierHealth.objects.create(extension_id="ntfy", notifier="push", failed_deliveries=2)
    NotifierHealth.objects.create(extension_id="mail", notifier="smtp", failed_deliveries=0)
    if connection.vendor == "postgresql":
        # the statistics the estimates read; on tables this small ANALYZE reads every row (and
        # counts the rows this test's transaction inserted), so the estimates are exact
        with connection.cursor() as cursor:
            for table in HISTORY_TABLES | {"artifacts_record"}:
                cursor.execute(f"ANALYZE {connection.ops.quote_name(table)}")


def test_runs_are_reported_by_status_with_the_settle_counter(db, history):
    assert by_status("hyphae_runs") == {"claimed": 2, "settled": 5, "released": 2}
    assert samples("hyphae_runs_settled") == {(): 7}


def test_deliveries_are_reported_by_status_and_failures_per_notifier(db, history):
    assert by_status("hyphae_notification_deliveries") == {
        "pending": 3,
        "in_flight": 1,
        "delivered": 6,
        "failed": 2,
        "skipped": 4,
    }
    assert samples("hyphae_notifier_failed_deliveries") == {
        (("extension", "mail"), ("notifier", "smtp")): 0,
        (("extension", "ntfy"), ("notifier", "push")): 2,
    }


def test_an_empty_database_reports_zeros(db):
    assert by_status("hyphae_runs") == {"claimed": 0, "settled": 0, "released": 0}
    assert set(by_status("hyphae_notification_deliveries").values()) == {0}
    assert samples("hyphae_artifact_records") == {(): 0}


def test_a_scrape_makes_the_same_number_of_queries_whatever_is_stored(db, owner, history):
    with CaptureQueriesContext(connection) as few:
        list(DatabaseCollector().collect())
    more = []
    for n in range(20):
        conversation = Conversation.objects.create(
            id=f"more{n}", owner=owner, last_activity_at=clock.now()
        )
        more.append(
            Run(
                conversation=conversation,
                status=RunStatus.CLAIMED,
                claimed_at=clock.now(),
                lease_expires_at=clock.now(),
            )
        )
    Run.objects.bulk_create(more)
    NotifierHealth.objects.create(extension_id="chat", notifier="hook")
    with CaptureQueriesContext(connection) as many:
        list(DatabaseCollector().collect())
    assert len(many) == len(few)
    assert by_status("hyphae_runs")["claimed"] == 22


def _plan_scans(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a JSON plan that reads a relation, a bitmap heap scan with its index's."""
    found = []
    if "Relation Name" in node:
        bitmap = [child for child in node.get("Plans", []) if "Index Name" in child]
        found.append(
            node
            | {
                key: bitmap[0][key]
                for key in ("Index Name", "Index Cond")
                if bitmap and key in bitmap[0]
            }
        )
    for child in node.get("Plans", []):
        found += _plan_scans(child)
    return found


@pytest.mark.postgres
def test_no_scrape_query_reads_a_history_table_whole(db, history):
    """Every query a scrape sends that reads runs or deliveries reads only a part of them: with
    sequential scans priced out, the planner picks a partial index (live rows only) or an index
    condition, never a whole table or a whole index of every row (as a `GROUP BY status` or a
    `count()` over every run would)."""
    with CaptureQueriesContext(connection) as scrape:
        list(DatabaseCollector().collect())
    assert by_status("hyphae_runs")["claimed"] == 2  # the scrape read the figures
    reads = []
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        for query in scrape.captured_queries:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {query['sql']}")
            plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            reads += [
                node
                for node in _plan_scans(plan[0]["Plan"])
                if node["Relation Name"] in HISTORY_TABLES
            ]
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = ANY(%s) AND indexdef LIKE %s",
            [sorted(HISTORY_TABLES), "% WHERE %"],
        )
        partial = {name for (name,) in cursor.fetchall()}
    # the live counts read both tables, through their partial indexes
    assert {node["Relation Name"] for node in reads} == HISTORY_TABLES
    whole = [
        (node["Node Type"], node["Relation Name"], node.get("Index Name"))
        for node in reads
        if node.get("Index Name") not in partial and "Index Cond" not in node
    ]
    assert whole == []
