"""Plain Django error handlers: API paths get the host error body, never an HTML page."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from inspect import iscoroutinefunction
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

from core.errors import MSG_METHOD, MSG_NOT_FOUND, HostError
from core.middleware import json_error

SAFE_METHODS = ("GET", "HEAD")


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/v1/") or request.path in {"/healthz", "/readyz", "/metrics"}


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return json_error(HostError("store", "not_found", MSG_NOT_FOUND))
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    if _is_api(request):
        return json_error(HostError("runtime", "unavailable", "Internal error", status=500))
    return defaults.server_error(request)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return json_error(HostError("contract", "invalid", "Bad request"))
    return defaults.bad_request(request, exception)  # type: ignore[arg-type]


def _method_not_allowed() -> HttpResponse:
    response = json_error(HostError("contract", "invalid", MSG_METHOD, status=405))
    response["Allow"] = ", ".join(SAFE_METHODS)
    return response


def read_only_api_view(view: Callable[..., Any]) -> Callable[..., Any]:
    """A plain (non-DRF) API view that only reads (`/metrics`, the SSE stream): GET and HEAD;
    any other method answers the error model's 405, as DRF views do.

    CSRF-exempt: these views are authenticated by token (or network), never change anything,
    and Django's CSRF check would answer an unsafe method before the view with its HTML 403
    page. DRF views are exempt the same way (`APIView.as_view`)."""
    if iscoroutinefunction(view):

        @wraps(view)
        async def async_view(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            if request.method not in SAFE_METHODS:
                return _method_not_allowed()
            return await view(request, *args, **kwargs)

        return csrf_exempt(async_view)

    @wraps(view)
    def sync_view(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if request.method not in SAFE_METHODS:
            return _method_not_allowed()
        return view(request, *args, **kwargs)

    return csrf_exempt(sync_view)
