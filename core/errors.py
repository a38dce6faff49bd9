"""The one error vocabulary: `HostError(category, cause, message)` and its HTTP rendering.

Every error response body is `{"error": {"category", "cause", "message", "details"?}}` with the
status that follows the cause (spec 07). Messages are constants that tests assert on; they never
carry secrets or stack traces.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Literal

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework.response import Response

from core.db import is_transient

logger = logging.getLogger(__name__)

Category = Literal["contract", "store", "runtime", "extensions", "auth", "limit"]
Cause = Literal[
    "invalid",
    "conflict",
    "rejected",
    "unavailable",
    "closed",
    "not_found",
    "unauthenticated",
    "forbidden",
    "too_large",
    "throttled",
]

STATUS_BY_CAUSE: dict[str, int] = {
    "invalid": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "closed": 409,
    "too_large": 413,
    "rejected": 422,
    "throttled": 429,
    "unavailable": 503,
}

MESSAGE_MAX = 512


class HostError(Exception):
    """A typed, client-safe failure. The status follows the cause."""

    def __init__(
        self,
        category: Category,
        cause: Cause,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.category = category
        self.cause = cause
        self.message = bound_text(message, MESSAGE_MAX)
        self.details = details
        self.retry_after = retry_after
        self._status = status

    @property
    def status(self) -> int:
        if self._status is not None:
            return self._status
        # runtime/closed is the host shutting down: 503. Every other `closed` is 409.
        if self.category == "runtime" and self.cause == "closed":
            return 503
        return STATUS_BY_CAUSE[self.cause]

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {
            "category": self.category,
            "cause": self.cause,
            "message": self.message,
        }
        if self.details:
            error["details"] = self.details
        return {"error": error}

    def __repr__(self) -> str:
        return f"HostError({self.category}/{self.cause}: {self.message})"


def bound_text(text: str, limit: int) -> str:
    """Cut `text` to at most `limit` characters, ending in `…` when cut."""
    if len(text) <= limit:
        return text
    return text[: limit - 1] + "…"


# Constants for messages that clients and tests rely on.
MSG_INVALID_BODY = "Request body is invalid"
MSG_INVALID_QUERY = "Query parameters are invalid"
MSG_MALFORMED_JSON = "Request body is not valid JSON"
MSG_UNKNOWN_FIELDS = "Request body has unknown fields"
MSG_NOT_FOUND = "Not found"
MSG_UNAUTHENTICATED = "Authentication required"
MSG_BAD_CREDENTIALS = "Credentials are invalid"
MSG_FORBIDDEN = "Not allowed"
MSG_TOO_LARGE = "Request body is too large"
MSG_THROTTLED = "Too many requests"
MSG_METHOD = "Method not allowed"
MSG_MEDIA_TYPE = "Unsupported media type"
MSG_DATABASE_UNAVAILABLE = "The database is unavailable; try again"


def error_response(error: HostError, headers: dict[str, str] | None = None) -> Response:
    response = Response(error.body(), status=error.status)
    if error.retry_after is not None:
        response["Retry-After"] = str(error.retry_after)
    if error.cause == "unauthenticated":
        response["WWW-Authenticate"] = 'Bearer realm="hyphae"'
    for key, value in (headers or {}).items():
        response[key] = value
    return response


def as_host_error(exc: Exception) -> HostError | None:
    """Translate framework exceptions into the host vocabulary (None: not ours to render)."""
    if isinstance(exc, HostError):
        return exc
    if isinstance(exc, drf.ValidationError):
        detail = exc.detail
        details = detail if isinstance(detail, dict) else {"non_field_errors": detail}
        return HostError("contract", "invalid", MSG_INVALID_BODY, details=_plain(details))
    if isinstance(exc, drf.ParseError):
        return HostError("contract", "invalid", MSG_MALFORMED_JSON)
    if isinstance(exc, drf.UnsupportedMediaType):
        return HostError("contract", "invalid", MSG_MEDIA_TYPE, status=415)
    if isinstance(exc, drf.MethodNotAllowed):
        return HostError("contract", "invalid", MSG_METHOD, status=405)
    if isinstance(exc, drf.NotAcceptable):
        return HostError("contract", "invalid", str(exc.detail), status=406)
    if isinstance(exc, drf.NotAuthenticated):
        return HostError("auth", "unauthenticated", MSG_UNAUTHENTICATED)
    if isinstance(exc, drf.AuthenticationFailed):
        return HostError("auth", "unauthenticated", MSG_BAD_CREDENTIALS)
    if isinstance(exc, (drf.PermissionDenied, DjangoPermissionDenied)):
        return HostError("auth", "forbidden", MSG_FORBIDDEN)
    if isinstance(exc, (drf.NotFound, Http404)):
        return HostError("store", "not_found", MSG_NOT_FOUND)
    if isinstance(exc, drf.Throttled):
        # whole seconds, rounded up: never earlier than the window allows, never a second late
        seconds = exc.wait  # type: ignore[attr-defined]  # set in Throttled.__init__; unstubbed
        wait = max(1, math.ceil(seconds)) if seconds is not None else 1
        return HostError("limit", "throttled", MSG_THROTTLED, retry_after=wait)
    if isinstance(exc, RequestDataTooBig):
        return HostError("limit", "too_large", MSG_TOO_LARGE)
    if is_transient(exc):
        # a restart, a lost connection, a deadlock: nothing the client did, worth a retry
        logger.warning("request failed on transient database trouble: %s", exc)
        return HostError("store", "unavailable", MSG_DATABASE_UNAVAILABLE, retry_after=1)
    return None


def query_error(exc: drf.ValidationError | HostError) -> HostError:
    """A list's query parameters failed their serializer (bad values, unknown names): the same
    400 as a body's, worded for the query string (`core.api_base.Pagination.query`)."""
    if isinstance(exc, HostError):
        details = {
            name: ["Unknown query parameter." if p == "Unknown field." else p for p in problems]
            for name, problems in (exc.details or {}).items()
        }
        return HostError("contract", "invalid", MSG_INVALID_QUERY, details=details)
    detail = exc.detail
    tree = detail if isinstance(detail, dict) else {"non_field_errors": detail}
    return HostError("contract", "invalid", MSG_INVALID_QUERY, details=_plain(tree))


def _plain(value: Any) -> Any:
    """ErrorDetail trees → plain JSON (lists of strings)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return str(value)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler rendering every error in the host's error model."""
    error = as_host_error(exc)
    if error is None:
        return None  # a real defect: Django's 500 handling and logging take over
    return error_response(_hidden_from_anonymous(error, context))


def _hidden_from_anonymous(error: HostError, context: dict[str, Any]) -> HostError:
    """On a view open to anonymous reads (public conversations), an anonymous caller who finds
    nothing gets 401, never 404: authentication comes first, and a 401 says nothing about what
    exists. Every such view then agrees, whether or not it remembered to translate."""
    from core.auth import principal_of
    from core.permissions import AllowAnonymousReads

    request, view = context.get("request"), context.get("view")
    if error.cause != "not_found" or request is None or view is None:
        return error
    if principal_of(request).is_authenticated:
        return error
    if not any(isinstance(p, AllowAnonymousReads) for p in view.get_permissions()):
        return error
    return HostError("auth", "unauthenticated", MSG_UNAUTHENTICATED)
