"""What the request log says: Django's response lines carry the request id, expected states
(a 503 answering a HostError, a host not in ALLOWED_HOSTS) are warnings naming their cause,
defects stay errors, JSON lines are stamped in UTC, a busy worker's routine lines stay quiet."""

from __future__ import annotations

import datetime as dt
import json
import logging

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from core.errors import HostError
from core.logging import JsonFormatter, RequestIdFilter

pytestmark = pytest.mark.django_db


def request_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(("django.request", "django.security"))]


def as_json(record: logging.LogRecord) -> dict:
    """The line the console handler writes with LOG_JSON: its filter, then the JSON format."""
    RequestIdFilter().filter(record)
    return json.loads(JsonFormatter().format(record))


def test_a_django_response_line_carries_the_request_id(caplog):
    with caplog.at_level(logging.INFO):
        response = APIClient().get("/v1/meta", HTTP_X_REQUEST_ID="trace-401")
    assert response.status_code == 401
    # Django logs the response after every middleware returned, the request id's included
    [record] = [r for r in request_lines(caplog) if r.getMessage() == "Unauthorized: /v1/meta"]
    assert as_json(record)["request_id"] == "trace-401"


def test_a_generated_request_id_is_the_one_on_the_response(caplog):
    with caplog.at_level(logging.INFO):
        response = APIClient().get("/v1/meta")
    [record] = request_lines(caplog)
    assert as_json(record)["request_id"] == response["X-Request-Id"] != "-"


def test_a_503_answering_a_host_error_is_a_warning_naming_the_error(
    monkeypatch, api, member, caplog
):
    from extensions_host.contributions import api as views

    def unavailable() -> dict:
        raise HostError("store", "unavailable", "Store is unavailable")

    monkeypatch.setattr(views, "meta_build", unavailable)
    client = api(member)
    with caplog.at_level(logging.INFO):
        response = client.get("/v1/meta", HTTP_X_REQUEST_ID="trace-503")
    assert response.status_code == 503
    [record] = request_lines(caplog)
    assert record.levelno == logging.WARNING
    line = as_json(record)
    assert line["level"] == "WARNING"
    assert line["message"] == "Service Unavailable: /v1/meta"
    assert (line["error"], line["error_message"]) == ("store/unavailable", "Store is unavailable")
    assert line["request_id"] == "trace-503"


def test_a_500_stays_an_error_with_its_traceback(monkeypatch, api, member, caplog):
    from extensions_host.contributions import api as views

    def broken() -> dict:
        raise RuntimeError("a defect")

    monkeypatch.setattr(views, "meta_build", broken)
    client = api(member)
    client.raise_request_exception = False
    with caplog.at_level(logging.INFO):
        response = client.get("/v1/meta")
    assert response.status_code == 500
    [record] = request_lines(caplog)
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert "error" not in as_json(record)


def test_a_host_not_in_allowed_hosts_is_a_warning_without_a_traceback(caplog):
    with caplog.at_level(logging.INFO):
        response = APIClient().get("/healthz", HTTP_HOST="evil.example")
    assert response.status_code == 400
    [security] = [r for r in request_lines(caplog) if r.name.startswith("django.security")]
    assert security.name == "django.security.DisallowedHost"
    assert security.levelno == logging.WARNING
    assert "evil.example" in security.getMessage()
    assert security.exc_info is None
    assert "exc" not in as_json(security)
    assert all(r.levelno < logging.ERROR for r in request_lines(caplog))


def test_json_lines_are_stamped_in_utc_with_the_offset():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    at = dt.datetime.fromisoformat(as_json(record)["at"])
    assert at.utcoffset() == dt.timedelta(0)
    assert abs(at.timestamp() - record.created) < 0.001


def test_a_worker_at_info_logs_no_line_per_task_but_still_says_it_is_ready():
    assert settings.LOGGING["loggers"]["celery.app.trace"]["level"] == "WARNING"
    assert settings.LOGGING["loggers"]["celery.worker.strategy"]["level"] == "WARNING"
    assert logging.getLogger().getEffectiveLevel() == logging.INFO  # LOG_LEVEL's default
    for routine in ("celery.app.trace", "celery.worker.strategy"):
        assert not logging.getLogger(routine).isEnabledFor(logging.INFO)
        assert logging.getLogger(routine).isEnabledFor(logging.WARNING)
    assert logging.getLogger("celery.apps.worker").isEnabledFor(logging.INFO)  # "… ready."
