"""Plain Django error handlers: API paths get the host error body, never an HTML page."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views import defaults

from core.errors import MSG_NOT_FOUND, HostError
from core.middleware import json_error


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/v1/") or request.path in {"/healthz", "/readyz", "/metrics"}


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return json_error(HostError("store", "not_found", MSG_NOT_FOUND))
    return defaults.page_not_found(request, exception)  # type: ignore[arg-type]


def server_error(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    if _is_api(request):
        return json_error(HostError("runtime", "unavailable", "Internal error", status=500))
    return defaults.server_error(request)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return json_error(HostError("contract", "invalid", "Bad request"))
    return defaults.bad_request(request, exception)  # type: ignore[arg-type]
