"""`GET /metrics` (Prometheus text format), restricted to `HOST_METRICS_TOKEN` (bearer) or the
networks in `HOST_METRICS_NETWORKS` (loopback by default).

Figures that live in the database (extension statuses and pending grants, stops and
auto-resumes, timer backlog, settled lag, outbox backlog, notification deliveries, stored runs
by status, stored artifact records) are read at scrape time, so every process answers the same;
`hyphae_metrics_collection_ok` is 0 when they could not be read (the database down): the scrape
still answers 200, without them. Request durations are measured in process; with several
processes set `PROMETHEUS_MULTIPROC_DIR` (prometheus_client's multiprocess mode) to aggregate
them.

Runs and artifact records are gauges of the rows stored, not counters: retention deletes rows,
and a counter must never go down. The settle rate is `rate(hyphae_runs_settled_total)` (the
settled sequence: exact, never moved back).

A scrape costs the same after a year as on day one: every query is bounded by what is live,
never by history. Live figures are exact counts through partial indexes (claimed runs through
`run_lease_idx`, pending and in-flight deliveries through `delivery_due_idx`). Counters of
history come from rows kept as work happens (the settled sequence counter, notifier health).
Stored figures of history are, on PostgreSQL, the planner's statistics (`_estimated_counts`):
settled and released runs, delivered, failed and skipped deliveries and artifact records are
estimates there, as fresh as the table's last ANALYZE (autovacuum's) scaled to its current
size. SQLite counts them exactly: its tables are small.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Model
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from core.auth import secret_matches
from core.models import AuditEntry
from extensions_host.contributions.models import (
    DeliveryStatus,
    NotificationDelivery,
    NotifierHealth,
)
from extensions_host.models import RosterEntry
from extensions_host.selectors import grants_waiting

logger = logging.getLogger("extensions_host.contributions.metrics")

REGISTRY = CollectorRegistry(auto_describe=False)
HTTP_DURATION = Histogram(
    "hyphae_http_request_duration_seconds",
    "HTTP request durations by route and method",
    ["route", "method", "status"],
    registry=REGISTRY,
)

# Hook durations of the frames this process ran (each process exposes its own; the web
# process's /metrics shows request-time hooks).
HOOK_DURATION = Histogram(
    "hyphae_hook_duration_seconds",
    "Extension hook durations by extension, hook and outcome",
    ["extension", "hook", "status"],
    registry=REGISTRY,
)


def hook_observed(extension_id: str, outcome: Any) -> None:
    HOOK_DURATION.labels(extension_id, outcome.hook, outcome.status).observe(outcome.elapsed_s)


class DatabaseCollector(Collector):
    """Figures read from the database at scrape time (the same from every process)."""

    def collect(self) -> Iterator[Metric]:
        ok = GaugeMetricFamily(
            "hyphae_metrics_collection_ok",
            "1 when every database figure was read for this scrape, 0 when some are missing",
        )
        try:
            # read them all before answering: a scrape shows every database figure or none
            families = list(self._collect())
        except Exception:  # a scrape must answer even when a figure cannot be read
            logger.exception("metrics collection failed")
            ok.add_metric([], 0)
            yield ok
            return
        yield from families
        ok.add_metric([], 1)
        yield ok

    def _collect(self) -> Iterator[Metric]:
        status = GaugeMetricFamily(
            "hyphae_extensions", "Extensions in the roster by status", labels=["status"]
        )
        counts = dict(RosterEntry.objects.values_list("status").annotate(n=Count("id")).order_by())
        for name in ("running", "stopped", "uninstalled"):
            status.add_metric([name], counts.get(name, 0))
        yield status
        pending = GaugeMetricFamily(
            "hyphae_extensions_pending_grants",
            "Installed extensions with requested grants staff have not admitted yet",
        )
        pending.add_metric([], len(grants_waiting()))
        yield pending
        for action, metric, text in (
            ("extension_stopped", "hyphae_extension_stops", "Extension stops"),
            ("extension_auto_resumed", "hyphae_extension_auto_resumes", "Automatic resumes"),
        ):
            family = CounterMetricFamily(metric, text, labels=["extension"])
            rows = (
                AuditEntry.objects.filter(action=action)
                .values_list("target")
                .annotate(n=Count("id"))
                .order_by()
            )
            for target, n in rows:
                family.add_metric([target], n)
            yield family
        yield from _deliveries()
        yield from _runs()
        yield from _artifacts()
        yield from _lag()


# Statuses a row leaves: counted exactly, through the partial index that serves their
# consumer (it holds only the live rows, so the count stays small whatever the history).
LIVE_DELIVERY_STATUSES = (DeliveryStatus.PENDING, DeliveryStatus.IN_FLIGHT)  # delivery_due_idx


def _deliveries() -> Iterator[Metric]:
    deliveries = GaugeMetricFamily(
        "hyphae_notification_deliveries", "Notifier deliveries by status", labels=["status"]
    )
    counts: dict[str, int] = dict(
        NotificationDelivery.objects.filter(status__in=LIVE_DELIVERY_STATUSES)
        .values_list("status")
        .annotate(n=Count("id"))
        .order_by()
    )
    counts |= _counts_of_history(
        NotificationDelivery,
        "status",
        [DeliveryStatus.DELIVERED, DeliveryStatus.FAILED, DeliveryStatus.SKIPPED],
        exclude=LIVE_DELIVERY_STATUSES,
    )
    for name in DeliveryStatus.values:
        deliveries.add_metric([name], counts.get(name, 0))
    yield deliveries
    # An estimate misses a rare status (a few failures among millions of deliveries are not in
    # ANALYZE's sample): each notifier's health row counts its failures as they happen, one
    # row per notifier, never decremented (it outlives the notification prune).
    failures = CounterMetricFamily(
        "hyphae_notifier_failed_deliveries",
        "Deliveries that exhausted their retries, per notifier",
        labels=["extension", "notifier"],
    )
    for extension_id, notifier, n in NotifierHealth.objects.values_list(
        "extension_id", "notifier", "failed_deliveries"
    ).order_by("extension_id", "notifier"):
        failures.add_metric([extension_id, notifier], n)
    yield failures


def _runs() -> Iterator[Metric]:
    from conversations.models import Run, RunStatus, SettledCounter

    runs = GaugeMetricFamily(
        "hyphae_runs", "Runs stored by status (every claim makes one)", labels=["status"]
    )
    # claimed: exact, through run_lease_idx (only claimed runs are in it)
    counts: dict[str, int] = {
        RunStatus.CLAIMED: Run.objects.filter(status=RunStatus.CLAIMED).count()
    }
    counts |= _counts_of_history(
        Run, "status", [RunStatus.SETTLED, RunStatus.RELEASED], exclude=[RunStatus.CLAIMED]
    )
    for name in RunStatus.values:
        runs.add_metric([name], counts.get(name, 0))
    yield runs
    # Every settlement takes the next number of the gap-free settled sequence, and retention
    # never moves it back: an exact counter of settlements (the settle rate), unlike the
    # stored figure above.
    settled = CounterMetricFamily("hyphae_runs_settled", "Runs settled since the host began")
    value = SettledCounter.objects.filter(pk=1).values_list("value", flat=True).first()
    settled.add_metric([], value or 0)
    yield settled


def _artifacts() -> Iterator[Metric]:
    from django.apps import apps

    try:
        model = apps.get_model("artifacts", "Record")
    except LookupError:
        return
    records = GaugeMetricFamily(
        "hyphae_artifact_records", "Artifact records stored (every emit makes one)"
    )
    estimate = _estimated_counts(model) if connection.vendor == "postgresql" else None
    if estimate is None:
        records.add_metric([], model._default_manager.count())
    else:
        records.add_metric([], estimate.total)
    yield records


def _counts_of_history(
    model: type[Model], column: str, values: list[str], *, exclude: Sequence[str]
) -> dict[str, int]:
    """Rows by `column` for `values`, statuses of history: estimated on PostgreSQL, counted on
    SQLite (and on a PostgreSQL table not analyzed yet, which autovacuum does after its first
    50 rows). `exclude` names the other values, so the count needs no GROUP BY of them."""
    estimate = _estimated_counts(model, column) if connection.vendor == "postgresql" else None
    if estimate is not None:
        return {value: estimate.of(value) for value in values}
    rows = (
        model._default_manager.exclude(**{f"{column}__in": exclude})
        .values_list(column)
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {value: n for value, n in rows if value in values}


@dataclass(frozen=True)
class _Estimate:
    """A PostgreSQL table's row count and one column's common values, from its statistics."""

    total: int
    common: dict[str, float]  # value → fraction of the rows
    rest: float  # fraction of the rows per value that is not a common one

    def of(self, value: str) -> int:
        return round(self.total * self.common.get(value, self.rest))


# What the planner does: reltuples/relpages from the last VACUUM or ANALYZE, scaled to the
# table's current size (so the figure follows growth between analyses); the column's most
# common values and their frequencies from pg_stats. Reads catalogue rows only.
_ESTIMATE_SQL = """
SELECT c.reltuples,
       CASE WHEN c.relpages > 0
            THEN c.reltuples / c.relpages
                 * (pg_relation_size(c.oid) / current_setting('block_size')::int)
            ELSE c.reltuples END,
       s.most_common_vals::text::text[], s.most_common_freqs, s.n_distinct, s.null_frac
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stats s ON s.schemaname = n.nspname AND s.tablename = c.relname AND s.attname = %s
WHERE c.oid = to_regclass(%s)
"""


def _estimated_counts(model: type[Model], column: str = "") -> _Estimate | None:
    """The statistics' row count of `model`'s table (and `column`'s value frequencies when
    given); None when the table has none yet (never analyzed)."""
    table = connection.ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(_ESTIMATE_SQL, [column, table])
        row = cursor.fetchone()
    if row is None or row[0] < 0:  # reltuples -1: never vacuumed or analyzed
        return None
    _, scaled, values, freqs, distinct, nulls = row
    total = max(round(scaled), 0)
    if not column or total == 0:
        return _Estimate(total=total, common={}, rest=0.0)
    if distinct is None:  # vacuumed but not analyzed: no frequencies to go by
        return None
    common = dict(zip(values or [], freqs or [], strict=True))
    # the values outside the common list share what the list leaves (zero when the sample
    # saw every value: a status column's list holds them all)
    distinct = distinct if distinct > 0 else -distinct * total
    others = distinct - len(common)
    left = 1.0 - (nulls or 0.0) - sum(common.values())
    rest = left / others if others >= 1 and left > 0 else 0.0
    return _Estimate(total=total, common=common, rest=rest)


def _lag() -> Iterator[Metric]:
    from extensions_host.contributions.services.meta import lag_figures

    figures = lag_figures()
    timers = figures["timers"]
    backlog = GaugeMetricFamily("hyphae_timers_due", "Due timers not fired yet")
    backlog.add_metric([], timers["due"])
    yield backlog
    oldest = GaugeMetricFamily("hyphae_timer_oldest_due_age_seconds", "Age of the oldest due timer")
    oldest.add_metric([], (timers["oldest_due_age_ms"] or 0) / 1000)
    yield oldest
    lag = GaugeMetricFamily(
        "hyphae_settled_lag", "Settled runs not yet delivered, per consumer", labels=["consumer"]
    )
    for consumer, values in figures["settled"]["consumers"].items():
        lag.add_metric([consumer], values.get("lag") or 0)
    yield lag
    outbox = GaugeMetricFamily("hyphae_outbox_backlog", "Lifecycle events not fanned out")
    outbox.add_metric([], figures["outbox"].get("unfanned", 0))
    yield outbox


REGISTRY.register(DatabaseCollector())


def metrics_text() -> bytes:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        return generate_latest(REGISTRY)
    from prometheus_client import multiprocess

    registry = CollectorRegistry(auto_describe=False)
    multiprocess.MultiProcessCollector(registry, path=directory)
    registry.register(DatabaseCollector())
    return generate_latest(registry)


def metrics_allowed(request: HttpRequest) -> bool:
    """A matching `HOST_METRICS_TOKEN` bearer, or a caller in `HOST_METRICS_NETWORKS`."""
    token = settings.HOST_METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if token and scheme.lower() == "bearer" and secret_matches(value.strip(), token):
        return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in network for network in settings.HOST_METRICS_NETWORKS)


class MetricsMiddleware:
    """Observe every request's duration, labelled by its URL route (low cardinality)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        started = time.perf_counter()
        response = self.get_response(request)
        match = getattr(request, "resolver_match", None)
        route = getattr(match, "route", None) or "unmatched"
        HTTP_DURATION.labels(route, request.method or "", str(response.status_code)).observe(
            time.perf_counter() - started
        )
        return response
