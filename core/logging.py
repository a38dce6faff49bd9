"""Structured logging: request ids on every record, JSON lines in production, and the same
structured fields as key=value in the plain format; expected states logged as warnings."""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
from typing import Any

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}

# what `core.middleware.RequestIdMiddleware` sets on the request: its id, and the HostError a
# 503 answered (`{"category", "cause", "message"}`)
REQUEST_ID_ATTR = "hyphae_request_id"
HOST_ERROR_ATTR = "hyphae_host_error"


class RequestIdFilter(logging.Filter):
    """The record's `request_id`: the one of the request being served, else the one of the
    record's request (Django logs a response after every middleware has returned, the request
    id's middleware included), else `-`."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = request_id_var.get()
        if rid == "-":
            rid = getattr(getattr(record, "request", None), REQUEST_ID_ATTR, "-")
        record.request_id = rid
        return True


class ExpectedErrorFilter(logging.Filter):
    """Expected states are warnings, not errors (on the `django.request` and
    `django.security.DisallowedHost` loggers):

    - a 503 answering a HostError (a stopped extension, a store unavailable, the database down):
      a state the error body names, so the line gets its `error` (category/cause) and
      `error_message`; a 500 (a defect) stays an error;
    - a request for a host not in ALLOWED_HOSTS: a probe or a misrouted request, answered 400;
      the line names the host, without a traceback.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        if record.name == "django.security.DisallowedHost":
            _demote(record)
            record.exc_info = record.exc_text = None
        elif getattr(record, "status_code", None) == 503:
            error = getattr(getattr(record, "request", None), HOST_ERROR_ATTR, None)
            if error is not None:
                _demote(record)
                record.error = f"{error['category']}/{error['cause']}"
                record.error_message = error["message"]
        return True


def _demote(record: logging.LogRecord) -> None:
    record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)


def host_error_of(body: bytes) -> dict[str, Any] | None:
    """The `{category, cause, message}` of an error body (spec 07), or None for any other
    body."""
    try:
        error = json.loads(body)["error"]
        return {key: str(error[key]) for key in ("category", "cause", "message")}
    except (ValueError, KeyError, TypeError):
        return None


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            # ISO 8601 in UTC with its offset: lines from machines in other zones sort and compare
            "at": dt.datetime.fromtimestamp(record.created, tz=dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", "-"),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in payload:
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


class PlainFormatter(logging.Formatter):
    """The plain format, then the record's structured `extra` fields as key=value on the same
    line; a multi-line value (a stop's cause, a traceback) follows on lines of its own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        fields: list[str] = []
        blocks: list[str] = []
        for key, value in record.__dict__.items():
            if key in _STANDARD or key == "request_id" or key.startswith("_"):
                continue
            if value is record.args:
                continue  # already in the message (Celery passes its context as both)
            if isinstance(value, str) and "\n" in value:
                blocks.append(f"{key}:\n{value.rstrip()}")
            else:
                fields.append(f"{key}={_plain_value(value)}")
        return "\n".join([" ".join([line, *fields]), *blocks])


def _plain_value(value: object) -> str:
    """A value an operator can read and a tool can split on: containers as compact JSON, text
    quoted when it is empty or holds a space, a quote or an equals sign."""
    if isinstance(value, dict | list | tuple):
        text = json.dumps(value, default=str, separators=(",", ":"))
        return json.dumps(text) if any(c.isspace() for c in text) else text
    text = str(value)
    if text == "" or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text)
    return text
