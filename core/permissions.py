"""DRF permission classes. Every view declares its own; the default denies everything."""

from __future__ import annotations

from typing import Any

from rest_framework import permissions
from rest_framework.request import Request

from core.auth import principal_of
from core.errors import MSG_FORBIDDEN, HostError


class DenyAll(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return False


class Authenticated(permissions.BasePermission):
    """Any authenticated principal; a `read` token may only use safe methods.

    On a conversation-scoped endpoint (a `conversation_id` in the URL) a `read` token's write is
    refused by `conversation_get(write=True)` instead, which the view calls first: a
    conversation the principal cannot read answers 404 before that 403 (spec 01, access).
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = principal_of(request)
        if not principal.is_authenticated:
            return False
        if (
            request.method not in permissions.SAFE_METHODS
            and not principal.can_write
            and not _conversation_scoped(view)
        ):
            raise HostError("auth", "forbidden", MSG_FORBIDDEN)
        return True


def _conversation_scoped(view: Any) -> bool:
    return "conversation_id" in (getattr(view, "kwargs", None) or {})


class AllowAnonymousReads(permissions.BasePermission):
    """Reads pass through (the view checks conversation access: public ones are readable
    anonymously); writes need an authenticated principal that can write."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return True
        return Authenticated().has_permission(request, view)


class Runtime(permissions.BasePermission):
    """The agent runtime: the service principal or a token with scope `runtime`."""

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = principal_of(request)
        if not principal.is_authenticated:
            return False
        if not principal.is_runtime:
            raise HostError("auth", "forbidden", MSG_FORBIDDEN)
        return True


class Admin(permissions.BasePermission):
    """Staff and the service principal."""

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = principal_of(request)
        if not principal.is_authenticated:
            return False
        if not principal.admin:
            raise HostError("auth", "forbidden", MSG_FORBIDDEN)
        return True


class RuntimeOrAdmin(permissions.BasePermission):
    """The agent runtime (service or `runtime` token) or staff."""

    def has_permission(self, request: Request, view: Any) -> bool:
        principal = principal_of(request)
        if not principal.is_authenticated:
            return False
        if not (principal.is_runtime or principal.admin):
            raise HostError("auth", "forbidden", MSG_FORBIDDEN)
        return True


class Public(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return True
