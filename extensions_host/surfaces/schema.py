"""The event stream in the OpenAPI schema: a plain async Django view (not DRF), added by a
drf-spectacular post-processing hook and marked `x-streaming` so a fuzzer can exclude it."""

from __future__ import annotations

from typing import Any

EVENTS_PATH = "/v1/conversations/{conversation_id}/events"


def add_event_stream(result: dict[str, Any], generator: Any, request: Any, public: bool) -> Any:
    error = {"$ref": "#/components/schemas/Error"}
    has_error = "Error" in result.get("components", {}).get("schemas", {})
    errors = {
        str(code): {
            "description": text,
            **({"content": {"application/json": {"schema": error}}} if has_error else {}),
        }
        for code, text in ((401, "Authentication required"), (404, "Not found"))
    }
    result.setdefault("paths", {})[EVENTS_PATH] = {
        "get": {
            "operationId": "conversations_events",
            "summary": "Live updates of a conversation (Server-Sent Events)",
            "description": (
                "A `text/event-stream`: `event: change` with `id: <version>` and data "
                "`{conversation_id, version, changed}` after each change; comment keep-alives; "
                "a bounded lifetime (reconnect with `Last-Event-ID`). Served by the ASGI "
                "process."
            ),
            "tags": ["conversations"],
            "x-streaming": True,
            "parameters": [
                {
                    "name": "conversation_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                },
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "The last version seen; resume from it.",
                },
            ],
            "responses": {
                "200": {
                    "description": "The event stream.",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                **errors,
            },
        }
    }
    return result
