"""The event stream in the OpenAPI schema: a plain async Django view (not DRF), added by a
drf-spectacular post-processing hook and marked `x-streaming` so a fuzzer can exclude it.

The hook (the one the settings register) also documents the error responses' headers for
every operation (`core.schema.document_response_headers`)."""

from __future__ import annotations

from typing import Any

from core.schema import document_response_headers
from extensions_host.surfaces.live import KINDS

EVENTS_PATH = "/v1/conversations/{conversation_id}/events"
# its access is the conversation view's (read access; anonymous for a public conversation)
SECURITY_LIKE = ("/v1/conversations/{conversation_id}", "get")

EVENTS_DESCRIPTION = f"""A `text/event-stream` of one conversation (served by the ASGI process).

Events:

- first a `retry: <ms>` line (the reconnect delay the client should use);
- `event: change`, `id: <version>`, data
  `{{"conversation_id", "version", "changed", "roster"}}`: sent at connect (`changed` is `[]`;
  every kind if `Last-Event-ID` names another version) and after each change; `changed`
  lists what changed, among {", ".join(f"`{k}`" for k in KINDS)}:
  re-read those parts (e.g. the conversation, its entries page, its projection). `roster` is
  an opaque token that moves when any extension stops, resumes or has its grants changed, which
  moves no conversation's version: when the connect event's token differs from the one you
  last saw, re-read the projection;
- `event: gone`, data `{{"conversation_id"}}`: the conversation was deleted or is no longer
  readable; the stream ends (do not reconnect);
- `event: unavailable`, data `{{"conversation_id"}}`: the database did not answer at connect;
  the stream ends (reconnect after the `retry` delay);
- `: keep-alive` comment lines while idle.

The stream ends after a bounded lifetime: reconnect with `Last-Event-ID: <version>` (browsers'
`EventSource` sends it by itself on reconnect; the `last_event_id` query parameter does the same
for a first connect): the connect event then has `changed: []` at an unchanged version, so
compare its `roster` token with yours.

Authentication is the API's (read access to the conversation): an `Authorization: Bearer`
token, the session cookie, or a trusted proxy's `X-Forwarded-User`. A browser's `EventSource`
cannot send an `Authorization` header: use the session cookie (same origin, logged in through
the admin) or put a proxy in front that authenticates the user; never put a token in the URL.
"""


def add_event_stream(result: dict[str, Any], generator: Any, request: Any, public: bool) -> Any:
    error = {"$ref": "#/components/schemas/Error"}
    has_error = "Error" in result.get("components", {}).get("schemas", {})
    errors = {
        str(code): {
            "description": text,
            **({"content": {"application/json": {"schema": error}}} if has_error else {}),
        }
        for code, text in (
            (401, "Authentication required"),
            (404, "Not found"),
            (503, "The database is unavailable while opening the stream: retry after Retry-After"),
        )
    }
    paths = result.setdefault("paths", {})
    path, method = SECURITY_LIKE
    security = paths.get(path, {}).get(method, {}).get("security")
    paths[EVENTS_PATH] = {
        "get": {
            "operationId": "conversations_events",
            "summary": "Live updates of a conversation (Server-Sent Events)",
            "description": EVENTS_DESCRIPTION,
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
                {
                    "name": "last_event_id",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "`Last-Event-ID` for a client that cannot set headers.",
                },
            ],
            "responses": {
                "200": {
                    "description": "The event stream.",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                **errors,
            },
            **({"security": security} if security is not None else {}),
        }
    }
    return document_response_headers(result)
