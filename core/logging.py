"""Structured logging: request ids on every record, JSON lines in production, and the same
structured fields as key=value in the plain format."""

from __future__ import annotations

import contextvars
import json
import logging

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id_var.get()
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "at": self.formatTime(record),
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
