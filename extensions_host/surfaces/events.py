"""`GET /v1/conversations/{id}/events`: the Server-Sent Events stream of one conversation.

An async view, served by the ASGI process (`uvicorn config.asgi`, spec 08 process layout) so
an open stream never ties up an API worker. Every event is

    id: <version>
    event: change
    data: {"conversation_id", "version", "changed": [kinds…], "roster": "<token>"}

sent soon after the commit that moved the version: on PostgreSQL a `NOTIFY` wakes the stream
at once (polling every `HOST_SSE_POLL_HINTED_SECONDS` is the fallback); on SQLite it polls
every `HOST_SSE_POLL_SECONDS`. A comment line keeps idle connections alive; the stream ends
after `HOST_SSE_LIFETIME_SECONDS` and the client reconnects with `Last-Event-ID` (the last
version it saw). The first event always states the current version and roster token, with
`changed` naming every kind when `Last-Event-ID` is older (everything may have changed) and empty
otherwise (the client compares the roster token with its own). Access is checked at connect and
on every poll: a conversation that is deleted or no longer readable ends the stream with an
`event: gone`.

A stream holds a database connection only while it reads when the process pools connections, as
the ASGI process does by default (`DATABASE_POOL_SIZE`); otherwise it keeps one open.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.request import Request
from rest_framework.settings import api_settings

from conversations.selectors import conversation_get
from core.auth import Principal, principal_of
from core.errors import MSG_BAD_CREDENTIALS, MSG_UNAUTHENTICATED, HostError, as_host_error
from core.middleware import json_error
from core.validation import decimal_number
from core.views import read_only_api_view
from extensions_host.surfaces.live import (
    KINDS,
    change_hub,
    changed_kinds,
    conversation_digests,
    conversation_version,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")
VERSION_MAX = 2**63 - 1


class _Unavailable(Exception):
    """The database did not answer this poll; the stream keeps going."""


def _authenticate(request: HttpRequest) -> Principal:
    """The DRF authentication classes, as every API view runs them."""
    # `api_settings` imports the classes the setting names: the stubs type them as the strings
    classes = api_settings.DEFAULT_AUTHENTICATION_CLASSES
    authenticators = [cls() for cls in classes]  # type: ignore[operator]
    drf_request = Request(request, authenticators=authenticators)
    try:
        drf_request.auth  # noqa: B018 (the property authenticates)
    except drf_exceptions.APIException as exc:
        raise HostError("auth", "unauthenticated", MSG_BAD_CREDENTIALS) from exc
    return principal_of(drf_request)


def _open(request: HttpRequest, conversation_id: str) -> Principal:
    """Authenticate and check read access (404 for what the principal cannot read; 401 for an
    anonymous caller, who learns nothing about what exists). A plain Django view: the DRF
    exception handler that applies this rule to the API views never sees its errors."""
    close_old_connections()
    try:
        principal = _authenticate(request)
        try:
            conversation_get(principal=principal, conversation_id=conversation_id)
        except HostError as exc:
            if exc.cause == "not_found" and not principal.is_authenticated:
                raise HostError("auth", "unauthenticated", MSG_UNAUTHENTICATED) from exc
            raise
        return principal
    finally:
        _release()


def _release() -> None:
    """Hand this stream's connection back to the process's pool (the ASGI process pools them,
    config/asgi.py): an open stream then holds no connection between its polls. Without a pool
    the stream keeps its one connection, as persistent connections do."""
    if getattr(connection, "pool", None) is not None:
        connection.close()


def _db(fn: Callable[..., T]) -> Callable[..., T]:
    """A database read of the stream, which releases its connection after (`_release`). A
    failure closes the connection (the next poll reconnects) and is reported as `_Unavailable`
    instead of ending the stream."""

    def run(**kwargs: Any) -> T:
        try:
            return fn(**kwargs)
        except DatabaseError as exc:
            connection.close()
            raise _Unavailable from exc
        finally:
            _release()

    return run


_version = sync_to_async(_db(conversation_version), thread_sensitive=False)
_digests = sync_to_async(_db(conversation_digests), thread_sensitive=False)


def last_event_id(request: HttpRequest) -> int | None:
    raw = request.headers.get("Last-Event-ID") or request.GET.get("last_event_id") or ""
    return decimal_number(raw.strip(), maximum=VERSION_MAX)


def sse(event: str, data: dict[str, Any], event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _change(conversation_id: str, version: int, changed: list[str], roster: str) -> str:
    return sse(
        "change",
        {
            "conversation_id": conversation_id,
            "version": version,
            "changed": changed,
            "roster": roster,
        },
        event_id=version,
    )


@read_only_api_view
async def conversation_events(request: HttpRequest, conversation_id: str) -> HttpResponseBase:
    try:
        principal = await sync_to_async(_open)(request, conversation_id)
    except Exception as exc:
        # the API's vocabulary, as DRF's handler gives it: a database outage while opening is
        # 503 with Retry-After, not the 500 of an unexpected error
        error = as_host_error(exc)
        if error is None:
            raise
        refused = json_error(error)
        if error.cause == "unauthenticated":
            refused["WWW-Authenticate"] = 'Bearer realm="hyphae"'
        return refused
    stream = event_stream(
        conversation_id=conversation_id, principal=principal, last_seen=last_event_id(request)
    )
    response = StreamingHttpResponse(stream, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies must not buffer the stream
    return response


async def event_stream(
    *, conversation_id: str, principal: Principal, last_seen: int | None
) -> AsyncIterator[str]:
    """The stream body (see the module docstring)."""
    loop = asyncio.get_running_loop()
    hub = change_hub()
    wake = hub.subscribe(conversation_id)
    lifetime = float(settings.HOST_SSE_LIFETIME_SECONDS)
    keepalive = float(settings.HOST_SSE_KEEPALIVE_SECONDS)
    started = last_sent = loop.time()
    try:
        yield f"retry: {int(settings.HOST_SSE_RETRY_MS)}\n\n"
        try:
            # digests first: a change committed between the two reads then shows as a newer
            # version against older digests (reported in full), never as a version whose
            # digests already include it (its kinds would be lost)
            digests = await _digests(conversation_id=conversation_id)
            seen = await _version(conversation_id=conversation_id, principal=principal)
        except _Unavailable:
            yield sse("unavailable", {"conversation_id": conversation_id})
            return
        if seen is None:
            yield sse("gone", {"conversation_id": conversation_id})
            return
        version, roster = seen
        # the first event states where the stream starts: a client compares its roster token
        # (a roster move during a reconnect leaves the version alone)
        behind = last_seen is not None and last_seen != version
        yield _change(conversation_id, version, list(KINDS) if behind else [], roster)
        while True:
            now = loop.time()
            if now - started >= lifetime:
                return  # bounded lifetime: the client reconnects with Last-Event-ID
            interval = float(
                settings.HOST_SSE_POLL_HINTED_SECONDS
                if hub.listening
                else settings.HOST_SSE_POLL_SECONDS
            )
            timeout = min(interval, keepalive - (now - last_sent), lifetime - (now - started))
            try:
                await asyncio.wait_for(wake.wait(), timeout=max(timeout, 0.01))
            except TimeoutError:
                pass
            wake.clear()
            try:
                current = await _version(conversation_id=conversation_id, principal=principal)
                if current is None:
                    yield sse("gone", {"conversation_id": conversation_id})
                    return
                if current.version != version:
                    fresh = await _digests(conversation_id=conversation_id)
                    changed = changed_kinds(digests, fresh)
                    if current.roster != roster and "projection" not in changed:
                        changed.append("projection")
                    (version, roster), digests = current, fresh
                    yield _change(conversation_id, version, changed, roster)
                    last_sent = loop.time()
                    continue
                if current.roster != roster:
                    # an extension stopped, resumed or had its grants changed: the projection
                    # slots, under the same version (the event id stays)
                    roster = current.roster
                    yield _change(conversation_id, version, ["projection"], roster)
                    last_sent = loop.time()
                    continue
            except _Unavailable:
                logger.warning("event stream of %s: database unavailable", conversation_id)
            if loop.time() - last_sent >= keepalive:
                yield ": keep-alive\n\n"
                last_sent = loop.time()
    finally:
        hub.unsubscribe(conversation_id, wake)
