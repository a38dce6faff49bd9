"""Observability: /readyz beat liveness, /metrics (restricted), request ids, the strict CSP."""

from __future__ import annotations

from django.core.cache import cache
from rest_framework.test import APIClient

from core import services as core_services
from extensions_host.models import ExtensionStatus, RosterEntry

from .exts import make_routes_ext


def test_readyz_is_not_ready_when_beat_has_not_ticked_for_a_while(db, fake_clock, settings):
    settings.BEAT_STALE_SECONDS = 60
    cache.delete(core_services.BEAT_KEY)
    core_services.beat_tick()
    client = APIClient()
    assert client.get("/readyz").json()["checks"]["beat"] is True
    fake_clock.advance(seconds=59)
    assert client.get("/readyz").json()["checks"]["beat"] is True
    fake_clock.advance(seconds=2)
    stale = client.get("/readyz")
    assert stale.status_code == 503
    assert stale.json()["status"] == "not_ready"
    assert stale.json()["checks"]["beat"] is False
    assert stale.json()["beat_age_seconds"] == 61


def test_metrics_are_served_to_loopback_in_prometheus_format(install):
    install(make_routes_ext())
    RosterEntry.objects.filter(pk="web").update(status=ExtensionStatus.STOPPED)
    client = APIClient()
    client.get("/healthz")  # one observed request
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert 'hyphae_extensions{status="stopped"} 1.0' in text
    assert 'hyphae_extensions{status="running"} 0.0' in text
    assert "hyphae_timers_due" in text
    assert 'hyphae_runs{status="settled"} 0.0' in text
    assert "hyphae_notification_deliveries" in text
    assert "hyphae_metrics_collection_ok 1.0" in text
    assert 'hyphae_http_request_duration_seconds_count{method="GET",route="healthz"' in text


def test_metrics_are_refused_elsewhere_unless_the_token_matches(db, settings):
    settings.HOST_METRICS_TOKEN = "metrics-secret-token"
    client = APIClient()
    outside = client.get("/metrics", REMOTE_ADDR="203.0.113.9")
    assert outside.status_code == 401
    assert outside.json()["error"]["cause"] == "unauthenticated"
    wrong = client.get(
        "/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer not-the-token"
    )
    assert wrong.status_code == 401
    allowed = client.get(
        "/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer metrics-secret-token"
    )
    assert allowed.status_code == 200
    settings.HOST_METRICS_NETWORKS = []
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 401


def test_responses_carry_a_request_id_and_the_strict_csp(db):
    response = APIClient().get("/v1/meta", HTTP_X_REQUEST_ID="trace-123")
    assert response["X-Request-Id"] == "trace-123"
    policy = response["Content-Security-Policy"]
    assert "default-src 'self'" in policy
    assert "script-src 'self'" in policy
    assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]


def test_the_admin_renders_under_the_csp(client, staff):
    client.force_login(staff)
    response = client.get("/admin/")
    assert response.status_code == 200
    assert "Content-Security-Policy" in response


def test_metrics_report_hook_durations_per_extension_and_hook(install):
    from extensions_host.runtime import run_frame

    install(make_routes_ext())
    assert run_frame(extension_id="web", hook="probe_hook", call=lambda ctx: None).ok
    text = APIClient().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert (
        'hyphae_hook_duration_seconds_count{extension="web",hook="probe_hook",status="ok"}' in text
    )


def test_metrics_say_when_the_database_figures_could_not_be_read(install, monkeypatch, caplog):
    from django.db import OperationalError

    from extensions_host.contributions import metrics

    def database_down() -> dict:
        raise OperationalError("connection refused")

    install(make_routes_ext())
    monkeypatch.setattr(metrics, "grants_waiting", database_down)
    response = APIClient().get("/metrics", REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 200  # the scrape answers: the request durations are there
    text = response.content.decode()
    assert "hyphae_metrics_collection_ok 0.0" in text  # what an alert fires on
    assert "hyphae_extensions{" not in text  # no database figure, not a half-read set
    assert "metrics collection failed" in caplog.messages


def test_stored_runs_and_artifact_records_are_gauges_not_counters(db):
    """Retention deletes rows: a count of rows can go down, which a counter never does."""
    text = APIClient().get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert "# TYPE hyphae_runs gauge" in text
    assert "# TYPE hyphae_artifact_records gauge" in text
    counters = {
        line.split()[2]
        for line in text.splitlines()
        if line.startswith("# TYPE") and line.endswith(" counter")
    }
    # the counters count what is never deleted nor moved back: stop and resume audit entries,
    # the settled sequence, the notifiers' health rows
    assert counters == {
        "hyphae_extension_stops_total",
        "hyphae_extension_auto_resumes_total",
        "hyphae_runs_settled_total",
        "hyphae_notifier_failed_deliveries_total",
    }
