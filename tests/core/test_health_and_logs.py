"""What an operator sees: /readyz when a dependency is down, and the plain log lines."""

from __future__ import annotations

import logging
from logging.config import DictConfigurator

import pytest
from rest_framework.test import APIClient

from core import services
from core.logging import PlainFormatter

pytestmark = pytest.mark.django_db

NOTHING_LISTENS = "redis://127.0.0.1:1/0"


def test_readyz_answers_503_naming_the_cache_when_redis_is_down(settings, caplog):
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": NOTHING_LISTENS,
        }
    }
    with caplog.at_level(logging.INFO):
        response = APIClient().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "not_ready"
    assert body["checks"]["cache"] is False
    assert body["checks"]["beat"] is False  # its mark lives in the cache
    assert body["checks"]["database"] is True
    assert body["beat_age_seconds"] is None
    # an expected probe answer: one warning naming the failing checks, no ERROR with a traceback
    assert not [r for r in caplog.records if r.name == "django.request"]
    (warning,) = [r for r in caplog.records if r.getMessage() == "not_ready"]
    assert warning.levelno == logging.WARNING
    assert warning.failing == ["beat", "cache"]


def test_readyz_reports_the_cache_as_a_check_when_everything_is_up(fake_clock):
    services.beat_tick()
    response = APIClient().get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {
        "database": True,
        "broker": True,
        "cache": True,
        "beat": True,
    }


def test_a_stale_beat_is_logged_as_a_warning_not_a_request_error(fake_clock, settings, caplog):
    from django.core.cache import cache

    cache.delete(services.BEAT_KEY)
    with caplog.at_level(logging.INFO):
        response = APIClient().get("/readyz")
    assert response.status_code == 503
    assert not [r for r in caplog.records if r.name == "django.request"]
    assert [r.failing for r in caplog.records if r.getMessage() == "not_ready"] == [["beat"]]


def plain_formatter(settings) -> logging.Formatter:
    """The plain formatter exactly as the LOGGING setting builds it."""
    config = settings.LOGGING["formatters"]["plain"]
    return DictConfigurator({"version": 1}).configure_formatter(dict(config))


def test_plain_log_lines_carry_the_structured_fields_of_an_extension_stop(settings, caplog):
    from extensions_host.runtime import stops

    cause = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: boom'
    with caplog.at_level(logging.ERROR, logger=stops.logger.name):
        stops._log(
            "chaos", "command poke", "command poke defect: boom", "ev-1", cause, durable=True
        )
    (record,) = caplog.records
    record.request_id = "req-1"  # the handler's RequestIdFilter sets it
    text = plain_formatter(settings).format(record)
    first, *rest = text.splitlines()
    assert "ERROR extensions_host.stops [req-1] extension_stopped" in first
    assert "extension_id=chaos" in first
    assert "event_id=ev-1" in first
    assert 'reason="command poke defect: boom"' in first
    assert 'hook="command poke"' in first
    assert "durable=True" in first
    # the multi-line cause follows the line, readable as it was
    assert rest == ["cause:", *cause.splitlines()]


def test_plain_log_lines_quote_values_and_skip_what_the_message_already_holds():
    formatter = PlainFormatter(fmt="%(levelname)s %(message)s")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "Task %(name)s ok", None, None)
    context = {"name": "fire_timers"}
    record.args = context
    record.data = context  # Celery passes its context as both the args and `data`
    record.empty = ""
    record.counts = {"a": 1}
    record.failing = ["beat", "cache"]
    record.path = "a=b"
    assert formatter.format(record) == (
        'INFO Task fire_timers ok empty="" counts={"a":1} failing=["beat","cache"] path="a=b"'
    )


def test_a_plain_record_without_extra_fields_is_unchanged():
    formatter = PlainFormatter(fmt="%(levelname)s %(name)s %(message)s")
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "hello %s", ("you",), None)
    assert formatter.format(record) == "WARNING x hello you"
