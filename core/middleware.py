"""Request-scoped middleware: request ids, body limits (checked before anything parses) and
query strings the database could not store."""

from __future__ import annotations

import io
import json
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import IO, Any
from urllib.parse import unquote_to_bytes

from django.conf import settings
from django.core.exceptions import BadRequest
from django.core.handlers.asgi import ASGIRequest
from django.core.handlers.wsgi import WSGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse

from core.errors import MSG_INVALID_BODY, MSG_TOO_LARGE, HostError
from core.logging import HOST_ERROR_ATTR, REQUEST_ID_ATTR, host_error_of, request_id_var
from core.validation import PROBLEM_NOT_UNICODE, text_problem

# Paths with their own body limit, longest prefix first (the longest that matches wins).
# Extension routes declare theirs; the contributions loader sets them (`body_limits_replace`).
# The list is replaced whole, never changed in place, so a request reads one consistent list.
_BODY_LIMITS: list[tuple[str, int]] = []
_body_limits_lock = threading.Lock()


def body_limits_replace(under: str, limits: Mapping[str, int]) -> None:
    """Set the limits of the paths under `under` to `limits` (prefixes under it), dropping the
    ones set there before: an extension loaded again keeps only its routes' limits as they
    are now."""
    global _BODY_LIMITS
    with _body_limits_lock:
        kept = {prefix: limit for prefix, limit in _BODY_LIMITS if not prefix.startswith(under)}
        kept.update(limits)
        _BODY_LIMITS = sorted(kept.items(), key=lambda item: len(item[0]), reverse=True)


def body_limit_for(path: str) -> int:
    for prefix, limit in _BODY_LIMITS:
        if path.startswith(prefix):
            return limit
    return settings.HOST_MAX_BODY_BYTES


class RequestIdMiddleware:
    """Every request's id (the caller's `X-Request-Id` when usable, else a new one): on every
    log record while it is served, and on its response.

    Django logs a 4xx/5xx response (`django.request`) after every middleware has returned, so
    the id also stays on the request, where the log filter finds it (core.logging), with the
    HostError a 503 answered: that line is then a warning naming the error, not an ERROR.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        incoming = request.headers.get("X-Request-Id", "")
        # printable ASCII only: any other header text would be echoed MIME-encoded by Django,
        # so the caller's id would not match the response's or the logs'
        kept = 0 < len(incoming) <= 64 and incoming.isascii() and incoming.isprintable()
        rid = incoming if kept else uuid.uuid4().hex
        setattr(request, REQUEST_ID_ATTR, rid)
        token = request_id_var.set(rid)
        try:
            response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response["X-Request-Id"] = rid
        if response.status_code == 503 and not response.streaming:
            setattr(request, HOST_ERROR_ATTR, host_error_of(response.content))
        return response


def too_large_response() -> JsonResponse:
    return JsonResponse(HostError("limit", "too_large", MSG_TOO_LARGE).body(), status=413)


class BodyLimitMiddleware:
    """413 `limit/too_large` for a body over its path's limit, before any view parses it.

    A declared Content-Length is checked up front; a body without one (chunked) is read up to
    the limit + 1 byte and refused if it goes past.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method in {"GET", "HEAD", "OPTIONS"}:
            return self.get_response(request)
        limit = body_limit_for(request.path)
        raw_length = request.headers.get("content-length") or ""
        if raw_length:
            try:
                length = int(raw_length)
            except ValueError:
                return JsonResponse(
                    HostError("contract", "invalid", "Content-Length is invalid").body(),
                    status=400,
                )
            if length > limit:
                return too_large_response()
        else:
            source = _unsized_body(request)
            if source is not None:
                data = source.read(limit + 1)
                if len(data) > limit:
                    return too_large_response()
                # what the request reads from now on: the body read here, with its length
                # (without one, DRF would take the body as empty)
                request._stream = io.BytesIO(data)
                request.META["CONTENT_LENGTH"] = str(len(data))
                if isinstance(request, WSGIRequest):
                    request.META["wsgi.input"] = io.BytesIO(data)
        request.body_limit = limit  # type: ignore[attr-defined]
        return self.get_response(request)


def _unsized_body(request: HttpRequest) -> IO[bytes] | None:
    """The raw stream of a body sent without Content-Length (chunked), or None.

    WSGI (gunicorn): the server's input stream, only when a Transfer-Encoding says a body
    follows (the request's own stream is bounded by the missing length, i.e. empty). ASGI
    (uvicorn): the request's stream, which Django's handler has already spooled whole.
    """
    if isinstance(request, WSGIRequest):
        if request.headers.get("transfer-encoding") and "wsgi.input" in request.META:
            return request.META["wsgi.input"]
        return None
    if isinstance(request, ASGIRequest):
        return request._stream
    return None


def json_error(error: HostError) -> JsonResponse:
    """Render a HostError outside DRF (plain Django views, middleware)."""
    response = JsonResponse(
        error.body(),
        status=error.status,
    )
    if error.retry_after is not None:
        response["Retry-After"] = str(error.retry_after)
    return response


def query_problems(request: HttpRequest) -> dict[str, list[str]]:
    """What is wrong with the request's query string, by parameter (`{}`: nothing).

    Every name and value must be UTF-8 text without NUL characters: PostgreSQL refuses a NUL
    in any text it compares with (a 500 from every filter that reaches a query), and Django
    would decode invalid UTF-8 into replacement characters nobody sent. A problem in a name is
    reported under `query`.
    """
    raw = request.META.get("QUERY_STRING", "")
    if not raw:
        return {}
    # WSGI (PEP 3333) passes the bytes as latin-1 text; Django's ASGI request decodes them as
    # UTF-8: either way this gives the bytes back
    data = raw.encode("latin-1" if isinstance(request, WSGIRequest) else "utf-8", "replace")
    problems: dict[str, list[str]] = {}
    for field in data.split(b"&"):  # as `QueryDict` splits it (urllib's `parse_qsl`)
        raw_name, _, raw_value = field.partition(b"=")
        name, problem = _query_text(raw_name)
        if problem is not None:
            name = "query"
        else:
            problem = _query_text(raw_value)[1]
        if problem is not None and problem not in problems.get(name, []):
            problems.setdefault(name, []).append(problem)
    return problems


def _query_text(raw: bytes) -> tuple[str, str | None]:
    """A query name or value as text, and what the database would refuse in it (or None)."""
    try:
        text = unquote_to_bytes(raw.replace(b"+", b" ")).decode()
    except UnicodeDecodeError:
        return "", PROBLEM_NOT_UNICODE
    return text, text_problem(text)


# where extension routes are served (`/v1/ext/<extension>/<path>`)
EXTENSION_ROUTES = "/v1/ext/"


class QueryStringMiddleware:
    """400 for a query string with a NUL character or invalid UTF-8 in a name or value, before
    any view (or Django's admin filters) puts it into a query.

    API paths answer the error model (`contract/invalid`, the parameter in `details`: the body
    the API's own query validation gives); other paths Django's plain 400 page. Extension
    routes (`/v1/ext/…`) are left to their handlers: they get the request as it came (a
    webhook's query may well be Latin-1), and the host puts none of it into a query.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(EXTENSION_ROUTES):
            return self.get_response(request)
        problems = query_problems(request)
        if not problems:
            return self.get_response(request)
        from core.views import _is_api  # core.views imports this module

        if _is_api(request):
            return json_error(HostError("contract", "invalid", MSG_INVALID_BODY, details=problems))
        raise BadRequest("Query string is invalid")  # the handler400 page, logged as a 400


class _BodyTooLarge(Exception):
    """The ASGI request body went past its path's limit while it was being received."""


class AsgiBodyLimit:
    """ASGI: stop receiving a request body once it passes its path's limit, and answer 413.

    Django's ASGI handler receives the whole body (spooling it to a temporary file) before any
    middleware runs, so without this an oversized chunked body would be taken in full before
    `BodyLimitMiddleware` refused it. Bodies within their limit pass through untouched, and the
    middleware still makes every other check.
    """

    def __init__(self, app: Callable[..., Any]) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = body_limit_for(scope.get("path", ""))
        received = 0

        async def limited() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _BodyTooLarge:
            body = json.dumps(HostError("limit", "too_large", MSG_TOO_LARGE).body()).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 413,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
