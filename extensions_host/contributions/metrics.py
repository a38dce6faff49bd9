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
and a counter must never go down. Their growth (`deriv`, `delta`) tells the claim, settle and
emit rates between retention sweeps.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from core.auth import secret_matches
from core.models import AuditEntry
from extensions_host.contributions.models import NotificationDelivery
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
        deliveries = GaugeMetricFamily(
            "hyphae_notification_deliveries", "Notifier deliveries by status", labels=["status"]
        )
        for name, n in (
            NotificationDelivery.objects.values_list("status").annotate(n=Count("id")).order_by()
        ):
            deliveries.add_metric([name], n)
        yield deliveries
        yield from _runs()
        yield from _artifacts()
        yield from _lag()


def _runs() -> Iterator[Metric]:
    from conversations.models import Run, RunStatus

    runs = GaugeMetricFamily(
        "hyphae_runs", "Runs stored by status (every claim makes one)", labels=["status"]
    )
    counts = dict(Run.objects.values_list("status").annotate(n=Count("id")).order_by())
    for name in RunStatus.values:
        runs.add_metric([name], counts.get(name, 0))
    yield runs


def _artifacts() -> Iterator[Metric]:
    from django.apps import apps

    try:
        model = apps.get_model("artifacts", "Record")
    except LookupError:
        return
    records = GaugeMetricFamily(
        "hyphae_artifact_records", "Artifact records stored (every emit makes one)"
    )
    records.add_metric([], model._default_manager.count())
    yield records


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
