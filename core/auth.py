"""Principals and the authentication methods that produce them (spec 05, first section).

Every authenticated request carries a `Principal` in `request.auth`. Methods, in order:
service tokens (`HOST_API_TOKEN`), per-user API tokens, trusted forward-auth headers, the Django
session (with CSRF), and `HOST_AUTH=none` for local development.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import DEFAULT_DB_ALIAS
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from core import clock
from core.models import ApiToken, TokenScope
from core.validation import text_problem

SERVICE_USERNAME = "hyphae-service"
DEV_USERNAME = "dev"
TOKEN_PREFIX = "hy_"  # noqa: S105  (a public prefix, not a secret)
# Extensions' own users are `ext:<id>` (spec 04: "without a password or login"). Django's
# username validator refuses ":", so no person's account is in this namespace.
EXTENSION_USERNAME_PREFIX = "ext:"


def username_valid(value: object) -> bool:
    """Whether `value` could be a username: text of 1–150 characters the database can hold.
    Check before any query: a name no user can have is simply nobody (a NUL in it would be a
    driver error on PostgreSQL)."""
    return isinstance(value, str) and 1 <= len(value) <= 150 and text_problem(value) is None


def sign_in_refused(username: str) -> bool:
    """Whether a user of this name may never authenticate, by any method: an extension's own
    user (it owns what its extension creates; signing in as it would take all of that)."""
    return username.startswith(EXTENSION_USERNAME_PREFIX)


@dataclass(frozen=True)
class Principal:
    """Who is acting: a user, with how they authenticated and what they may do."""

    user: Any
    name: str
    email: str
    admin: bool
    service: bool
    method: str  # token | service | proxy | session | none
    scope: str = TokenScope.WRITE  # tokens narrow this; other methods act with full rights
    expires_at: dt.datetime | None = None  # a token's own expiry (a minted token can't outlive it)

    @property
    def user_id(self) -> int | None:
        return getattr(self.user, "pk", None)

    @property
    def is_authenticated(self) -> bool:
        return self.user is not None and self.user.is_authenticated

    @property
    def can_write(self) -> bool:
        return self.is_authenticated and self.scope != TokenScope.READ

    @property
    def is_runtime(self) -> bool:
        return self.service or (self.method == "token" and self.scope == TokenScope.RUNTIME)


ANONYMOUS = Principal(
    user=AnonymousUser(),
    name="",
    email="",
    admin=False,
    service=False,
    method="anonymous",
    scope=TokenScope.READ,
)


def principal_of(request: Request) -> Principal:
    auth = getattr(request, "auth", None)
    return auth if isinstance(auth, Principal) else ANONYMOUS


def user_is_admin(user: AbstractBaseUser) -> bool:
    """An admin of the API: staff or superuser (the admin console admits staff only)."""
    return bool(getattr(user, "is_staff", False) or getattr(user, "is_superuser", False))


def user_principal(
    user: AbstractBaseUser,
    method: str,
    scope: str = TokenScope.WRITE,
    expires_at: dt.datetime | None = None,
) -> Principal:
    return Principal(
        user=user,
        name=user.get_full_name() or user.get_username(),  # type: ignore[attr-defined]
        email=getattr(user, "email", "") or "",
        admin=user_is_admin(user),
        service=False,
        method=method,
        scope=scope,
        expires_at=expires_at,
    )


_service_users: dict[str, AbstractBaseUser] = {}  # per database alias, for this process


def service_user() -> AbstractBaseUser:
    """The service principal's user: created on first use, then kept for the process (every
    service-token request needs it; a deleted one is forgotten by `forget_service_user`)."""
    user = _service_users.get(DEFAULT_DB_ALIAS)
    if user is None:
        user, _ = get_user_model().objects.get_or_create(
            username=SERVICE_USERNAME, defaults={"first_name": "Hyphae service"}
        )
        _service_users[DEFAULT_DB_ALIAS] = user
    return user


def service_principal() -> Principal:
    """The principal of a service-token request: the runtime, with staff access."""
    return Principal(
        user=service_user(),
        name="service",
        email="",
        admin=True,
        service=True,
        method="service",
        scope=TokenScope.RUNTIME,
    )


def forget_service_user(**_: Any) -> None:
    """Drop the kept service user (connected to the user model's `post_delete`; tests call it
    when their database is rolled back)."""
    _service_users.clear()


def _bearer(request: Request) -> str | None:
    header = authentication.get_authorization_header(request).decode("latin-1", "replace")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def secret_matches(given: str, expected: str) -> bool:
    """A constant-time comparison of a credential a client sent with a configured one, as
    UTF-8 bytes: `hmac.compare_digest` refuses `str`s outside ASCII (a header's bytes above 0x7F
    arrive as Latin-1 characters), and that must read as a wrong credential, never a 500."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


def token_digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def token_new() -> tuple[str, str, str]:
    """Return (raw token, its prefix for display, its digest for storage)."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return raw, raw[:10], token_digest(raw)


class _Authentication(authentication.BaseAuthentication):
    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="hyphae"'


class ServiceTokenAuthentication(_Authentication):
    """`Authorization: Bearer <one of HOST_API_TOKEN>` → the service principal."""

    def authenticate(self, request: Request) -> tuple[Any, Principal] | None:
        raw = _bearer(request)
        if raw is None or not settings.HOST_API_TOKEN:
            return None
        # compare against every configured token (constant time each) so rotation is seamless
        if not any(secret_matches(raw, t) for t in settings.HOST_API_TOKEN):
            return None
        principal = service_principal()
        return principal.user, principal


class ApiTokenAuthentication(_Authentication):
    """`Authorization: Bearer hy_…` → the token's user, narrowed to the token's scope."""

    def authenticate(self, request: Request) -> tuple[Any, Principal] | None:
        raw = _bearer(request)
        if raw is None:
            return None
        token = (
            ApiToken.objects.select_related("user")
            .filter(digest=token_digest(raw), revoked_at__isnull=True)
            .first()
        )
        now = clock.now()  # spec 02 §6: expiry is a due time on the one host clock
        if token is None or (token.expires_at is not None and token.expires_at <= now):
            raise exceptions.AuthenticationFailed()
        if not token.user.is_active or sign_in_refused(token.user.get_username()):
            raise exceptions.AuthenticationFailed()
        if token.last_used_at is None or (now - token.last_used_at).total_seconds() > 60:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, user_principal(token.user, "token", token.scope, token.expires_at)


def trusted_proxy(remote_addr: str | None) -> bool:
    if not remote_addr:
        return False
    try:
        address = ipaddress.ip_address(remote_addr)
    except ValueError:
        return False
    return any(address in network for network in settings.HOST_TRUSTED_PROXIES)


class ProxyAuthentication(_Authentication):
    """Forward-auth headers, trusted only with HOST_PROXY_AUTH and from HOST_TRUSTED_PROXIES.

    From anywhere else the same headers are ignored entirely.
    """

    def authenticate(self, request: Request) -> tuple[Any, Principal] | None:
        if not settings.HOST_PROXY_AUTH or not trusted_proxy(request.META.get("REMOTE_ADDR")):
            return None
        username = request.headers.get("X-Forwarded-User", "").strip()
        if not username:
            return None
        # refused before the lookup: a proxy must not create a user in the extensions'
        # namespace either (a later extension of that id would inherit it)
        if len(username) > 150 or sign_in_refused(username):
            raise exceptions.AuthenticationFailed()
        email = request.headers.get("X-Forwarded-Email", "").strip()[:254]
        name = request.headers.get("X-Forwarded-Preferred-Username", "").strip()[:150]
        groups = {g.strip() for g in request.headers.get("X-Forwarded-Groups", "").split(",")}
        user, _ = get_user_model().objects.get_or_create(
            username=username, defaults={"email": email, "first_name": name}
        )
        if not user.is_active:
            raise exceptions.AuthenticationFailed()
        admin = settings.HOST_PROXY_ADMIN_GROUP in groups or user_is_admin(user)
        principal = Principal(
            user=user,
            name=name or username,
            email=email or user.email,
            admin=admin,
            service=False,
            method="proxy",
        )
        return user, principal


class SessionPrincipalAuthentication(authentication.SessionAuthentication):
    """Django session login (admin, inspector page). Unsafe methods require CSRF."""

    def authenticate(self, request: Request) -> tuple[Any, Principal] | None:
        result = super().authenticate(request)
        if result is None:
            return None
        user, _ = result
        if sign_in_refused(user.get_username()):
            return None  # as DRF answers for an inactive user: anonymous
        return user, user_principal(user, "session")


class NoAuthDevelopmentAuthentication(_Authentication):
    """`HOST_AUTH=none`: every request acts as the local `dev` admin. Development only."""

    def authenticate(self, request: Request) -> tuple[Any, Principal] | None:
        if settings.HOST_AUTH != "none":
            return None
        user, _ = get_user_model().objects.get_or_create(
            username=DEV_USERNAME, defaults={"is_staff": True, "is_superuser": True}
        )
        return user, user_principal(user, "none")
