"""Extension HTTP routes at `/v1/ext/<extension-id>/<path>` (spec 05, grant `routes`).

Order of checks, every one before the handler runs: the route (unknown extension or path →
404, unknown method → 405); its auth level (`public`: anyone, and credentials that are not
Hyphae's — a webhook's own bearer secret — are the handler's to read; `user`: 401 anonymous or
with rejected credentials, 403 a read-only token writing; `admin`: 401/403); the extension
(stopped → 503 `extensions/unavailable`, the grant not admitted → 503); the body limit (413).
A body over the largest limit of its path's methods never gets that far: the body-limit
middleware answers 413 before any of these checks, as it does for every API path.

The handler then runs outside any frame with the rules of `outside.run_outside`; its result
becomes the response (a Django response as it is, JSON data → 200, None → 204, anything else is
a defect).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponseBase, JsonResponse, RawPostDataException
from django.http.response import HttpResponse

from core.auth import Principal
from core.errors import (
    MSG_BAD_CREDENTIALS,
    MSG_FORBIDDEN,
    MSG_METHOD,
    MSG_NOT_FOUND,
    MSG_TOO_LARGE,
    MSG_UNAUTHENTICATED,
    HostError,
)
from extensions_host import registry
from extensions_host.contributions.loading import route_prefix
from extensions_host.contributions.outside import extension_available, run_outside
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.registry import LoadedExtension
from extensions_host.runtime import InvalidResult, detached_context
from extensions_host.runtime.frames import hook_deadline
from extensions_host.runtime.hooks import encode_json
from extensions_host.sdk import Caller, Route

MSG_RESULT_INVALID = "Extension route result is not a response or JSON"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def route_hook_name(route: Route) -> str:
    return f"route {route.method} {route.path}"


def route_find(*, extension_id: str, path: str, method: str) -> tuple[LoadedExtension, Route]:
    """The route for `method path` of the extension: 404 for an unknown extension or path,
    405 (with the allowed methods in `details`) for a known path without that method."""
    loaded = registry.get(extension_id)
    if (
        loaded is None
        or not RosterEntry.objects.filter(pk=extension_id)
        .exclude(status=ExtensionStatus.UNINSTALLED)
        .exists()
    ):
        raise HostError("store", "not_found", MSG_NOT_FOUND)
    matching = [r for r in loaded.definition.contributions.routes if r.path == path]
    if not matching:
        raise HostError("store", "not_found", MSG_NOT_FOUND)
    for route in matching:
        if route.method == method:
            return loaded, route
    allowed = sorted(r.method for r in matching)
    raise HostError("contract", "invalid", MSG_METHOD, status=405, details={"allow": allowed})


def route_authorize(
    *, route: Route, principal: Principal, method: str, credentials_rejected: bool = False
) -> None:
    """The route's auth level. `credentials_rejected`: the request carried credentials that
    failed authentication (`principal` is then anonymous) — a 401 unless the route is public."""
    if route.auth == "public":
        return
    if credentials_rejected:
        raise HostError("auth", "unauthenticated", MSG_BAD_CREDENTIALS)
    if not principal.is_authenticated:
        raise HostError("auth", "unauthenticated", MSG_UNAUTHENTICATED)
    if route.auth == "admin" and not principal.admin:
        raise HostError("auth", "forbidden", MSG_FORBIDDEN)
    if method not in SAFE_METHODS and not principal.can_write:
        raise HostError("auth", "forbidden", MSG_FORBIDDEN)


def _body_check(request: HttpRequest, limit: int) -> None:
    """413 before the handler: the declared length first, then what was actually sent (the
    middleware buffered a chunked body up to the path's registered limit)."""
    raw = request.headers.get("content-length") or ""
    try:
        declared = int(raw) if raw else 0
    except ValueError:
        declared = 0
    if declared > limit:
        raise HostError("limit", "too_large", MSG_TOO_LARGE)
    if request.method in SAFE_METHODS:
        return
    try:
        size = len(request.body)
    except RawPostDataException:
        # a multipart body already parsed from the stream (a session CSRF check read
        # request.POST): the declared length above was checked against the route's limit
        return
    if size > limit:
        raise HostError("limit", "too_large", MSG_TOO_LARGE)


def as_response(result: Any) -> HttpResponseBase:
    if isinstance(result, HttpResponseBase):
        return result
    if result is None:
        return HttpResponse(status=204)
    return JsonResponse(encode_json(result, MSG_RESULT_INVALID), safe=False)


def route_dispatch(
    *,
    request: HttpRequest,
    principal: Principal,
    extension_id: str,
    path: str,
    credentials_rejected: bool = False,
) -> HttpResponseBase:
    """Answer one request to an extension route (see the module docstring). `principal` is
    anonymous when the request's credentials failed authentication (`credentials_rejected`)."""
    method = (request.method or "").upper()
    loaded, route = route_find(extension_id=extension_id, path=path, method=method)
    route_authorize(
        route=route, principal=principal, method=method, credentials_rejected=credentials_rejected
    )
    _, row = extension_available(extension_id=extension_id, grant="routes")
    _body_check(request, route.body_limit)
    caller = Caller(
        username=principal.user.get_username() if principal.is_authenticated else "",
        admin=principal.admin,
        service=principal.service,
    )
    hook = route_hook_name(route)
    ctx = detached_context(extension_id=extension_id, hook=hook, caller=caller, boundary="request")
    if ctx is None:
        raise HostError("extensions", "unavailable", "Extension is unavailable")
    request.principal = principal  # type: ignore[attr-defined]

    def call() -> HttpResponseBase:
        result = route.handler(ctx, request)
        if hasattr(result, "__await__"):
            return result  # the runner stops it as an async crossing
        try:
            return as_response(result)
        except InvalidResult:
            raise
        except (TypeError, ValueError) as exc:
            raise InvalidResult(MSG_RESULT_INVALID) from exc

    return run_outside(
        loaded=loaded, hook=hook, limit=hook_deadline(row, loaded, route.deadline_s), call=call
    )


def routes_list() -> list[dict[str, Any]]:
    """Every route of an installed extension (for `/v1/meta`)."""
    rows = {
        row.id: row
        for row in RosterEntry.objects.exclude(status=ExtensionStatus.UNINSTALLED).only(
            "id", "status", "admitted_grants"
        )
    }
    result = []
    for extension_id, loaded in registry.loaded().items():
        row = rows.get(extension_id)
        if row is None:
            continue
        for route in loaded.definition.contributions.routes:
            result.append(
                {
                    "extension_id": extension_id,
                    "method": route.method,
                    "path": route.path,
                    "url": route_prefix(extension_id, route.path),
                    "auth": route.auth,
                    "body_limit": route.body_limit,
                    "available": row.status == ExtensionStatus.RUNNING
                    and "routes" in row.admitted_grants,
                }
            )
    return result
