"""Host-core services: API tokens, the audit log, beat liveness and readiness, housekeeping."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from core import clock
from core.auth import Principal, sign_in_refused, token_new
from core.errors import MSG_FORBIDDEN, MSG_NOT_FOUND, HostError
from core.models import ApiToken, AuditEntry, IdempotencyResult, LifecycleEvent, TokenScope

BEAT_KEY = "hyphae:beat:last_tick_ms"


MSG_EXPIRY_NOT_FUTURE = "Token expiry must be in the future"
MSG_RUNTIME_SCOPE = "Only staff or the runtime may create a token with scope runtime"
MSG_NO_SIGN_IN = "This user cannot sign in"
MSG_OUTLIVES_TOKEN = "A token cannot create a token that expires after it does"  # noqa: S105

SCOPE_RANK: dict[str, int] = {TokenScope.READ: 0, TokenScope.WRITE: 1, TokenScope.RUNTIME: 2}


def token_expiry_check(*, expires_at: dt.datetime | None) -> None:
    """A token's expiry, if any, is in the future on the host clock (spec 02 §6)."""
    if expires_at is not None and expires_at <= clock.now():
        raise HostError(
            "contract",
            "invalid",
            MSG_EXPIRY_NOT_FUTURE,
            details={"expires_at": ["Must be in the future."]},
        )


def token_create(
    *, user: Any, name: str, scope: str, expires_at: dt.datetime | None, actor: str = ""
) -> tuple[ApiToken, str]:
    """Create a token for `user`; returns the row and the raw token (shown once). Staff
    creating one for a user name themselves as `actor`: the creation is audited. A user who
    may never sign in (an extension's own, `sign_in_refused`) gets none."""
    if sign_in_refused(user.get_username()):
        raise HostError("auth", "forbidden", MSG_NO_SIGN_IN)
    token_expiry_check(expires_at=expires_at)
    raw, prefix, digest = token_new()
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user, name=name, scope=scope, prefix=prefix, digest=digest, expires_at=expires_at
        )
        if actor:
            audit_record(
                actor=actor,
                action="token_created",
                target=_token_target(token),
                detail={"token_id": token.pk, "scope": scope, "name": name},
            )
    return token, raw


def token_scope_check(
    *, principal: Principal, scope: str, expires_at: dt.datetime | None = None
) -> None:
    """Who may mint a token of `scope` for themselves (403 `auth/forbidden` otherwise).

    A token never mints a token wider than itself: not of a wider scope, and not one that
    outlives it (else a stolen short-lived token would buy a permanent one). Scope `runtime`
    acts for the platform (the runtime endpoints ignore conversation sharing, spec 07), so only
    staff (admins) and principals that already hold it (the service principal, a `runtime`
    token) may mint it: a plain user's session or forward-auth login may not."""
    if scope == TokenScope.RUNTIME and not (principal.admin or principal.is_runtime):
        raise HostError("auth", "forbidden", MSG_RUNTIME_SCOPE)
    if principal.method == "token" and SCOPE_RANK[scope] > SCOPE_RANK[principal.scope]:
        raise HostError("auth", "forbidden", MSG_FORBIDDEN)
    if principal.expires_at is not None and (
        expires_at is None or expires_at > principal.expires_at
    ):
        raise HostError("auth", "forbidden", MSG_OUTLIVES_TOKEN)


def token_mint(
    *, principal: Principal, name: str, scope: str, expires_at: dt.datetime | None
) -> tuple[ApiToken, str]:
    """`POST /v1/auth/tokens`: a token for the principal's own user, within what it may mint
    (`token_scope_check`); nothing is written when it may not."""
    token_scope_check(principal=principal, scope=scope, expires_at=expires_at)
    return token_create(user=principal.user, name=name, scope=scope, expires_at=expires_at)


def token_revoke(
    *, principal: Principal, token_id: int, after_access: Callable[[], object] | None = None
) -> ApiToken:
    """Revoke one of the principal's tokens (staff may revoke anyone's). Idempotent; a
    revocation by staff is audited (once: revoking a revoked token records nothing).
    `after_access()` runs once the token is found and the principal's, before anything is
    written (the API checks the request's body there: the 404 decides before a 400)."""
    with transaction.atomic():
        token = ApiToken.objects.select_for_update().filter(pk=token_id).first()
        if token is None or (token.user_id != principal.user_id and not principal.admin):
            raise HostError("store", "not_found", MSG_NOT_FOUND)
        if after_access is not None:
            after_access()
        if token.revoked_at is None:
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at", "updated_at"])
            if principal.admin:
                audit_record(
                    actor=principal.user.get_username(),
                    action="token_revoked",
                    target=_token_target(token),
                    detail={"token_id": token.pk},
                )
    return token


def _token_target(token: ApiToken) -> str:
    """How the audit log names a token: its owner and prefix, never the digest."""
    return f"{token.user.get_username()}:{token.prefix}"


def tokens_revoke_for_user(*, user_id: int) -> int:
    return ApiToken.objects.filter(user_id=user_id, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )


def audit_record(*, actor: str, action: str, target: str = "", detail: dict | None = None) -> None:
    AuditEntry.objects.create(
        actor=actor[:150], action=action, target=target[:256], detail=detail or {}
    )


def beat_tick() -> None:
    """Mark beat alive now (host clock): written by the beat process's scheduler itself
    (core/beat.py), every BEAT_MARK_SECONDS; read by /readyz."""
    cache.set(BEAT_KEY, clock.now_ms(), timeout=None)


def beat_age_seconds() -> float | None:
    """Seconds since beat last ticked (host clock), or None if it never did. Raises whatever the
    cache backend raises when it is unreachable."""
    last = cache.get(BEAT_KEY)
    if last is None:
        return None
    return max(0.0, (clock.now_ms() - int(last)) / 1000)


@dataclass(frozen=True)
class Readiness:
    """What /readyz reports: each check by name, and beat's age (None: unknown)."""

    checks: dict[str, bool]
    beat_age_seconds: float | None

    @property
    def ready(self) -> bool:
        return all(self.checks.values())


def readiness_check() -> Readiness:
    """The database answers, the broker and the cache accept a connection, and beat (the beat
    process, not a worker) marked itself alive within BEAT_STALE_SECONDS. A failing dependency
    is a failed check, never an exception."""
    checks = {"database": _database_ok(), "broker": _broker_ok()}
    try:
        age = beat_age_seconds()
    except Exception:
        # the cache (Redis in production) is down: beat's mark cannot be read either
        checks["cache"] = False
        age = None
    else:
        checks["cache"] = True
    checks["beat"] = age is not None and age <= settings.BEAT_STALE_SECONDS
    return Readiness(checks=checks, beat_age_seconds=age)


def _database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except Exception:
        return False


def _broker_ok() -> bool:
    from config.celery import app

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return True
    except Exception:
        return False


def delete_page(rows: QuerySet[Any], *, order: tuple[str, ...], limit: int) -> tuple[int, bool]:
    """The prunes' step: delete the first `limit` of `rows` in `order`. `rows` is applied again
    in the DELETE, so a row that stopped matching meanwhile stays. Returns (deleted, more may
    remain): a prune's task re-enqueues itself while pages are full, so a backlog drains without
    one unbounded DELETE."""
    page = list(rows.order_by(*order).values_list("pk", flat=True)[:limit])
    if page:
        rows.filter(pk__in=page).delete()
    return len(page), len(page) == limit


IDEMPOTENCY_TTL = dt.timedelta(hours=24)
IDEMPOTENCY_PRUNE_PAGE = 1000


def idempotency_prune(*, limit: int = IDEMPOTENCY_PRUNE_PAGE) -> tuple[int, bool]:
    """Delete one page of stored idempotency results older than 24 hours (host clock), oldest
    first. Returns (deleted, more may remain)."""
    expired = IdempotencyResult.objects.filter(created_at__lt=clock.now() - IDEMPOTENCY_TTL)
    return delete_page(expired, order=("created_at", "pk"), limit=limit)  # the created_at index


SESSIONS_PRUNE_PAGE = 1000


def sessions_clear_expired(*, limit: int = SESSIONS_PRUNE_PAGE) -> tuple[int, bool]:
    """Delete one page of expired sessions of the configured SESSION_ENGINE, oldest first (what
    `manage.py clearsessions` does, in pages). Returns (deleted, more may remain).

    Database-backed engines (`db`, `cached_db`) are paged here: a first run can meet months of
    sessions, too many for one DELETE. Other engines expire on their own and get their own
    `clear_expired()` (a no-op for cache and signed-cookie sessions)."""
    store = import_module(settings.SESSION_ENGINE).SessionStore
    if not hasattr(store, "get_model_class"):
        store.clear_expired()
        return 0, False
    model = store.get_model_class()
    # Django stamps expire_date with its own clock (timezone.now), so it is compared with that
    # one, as clearsessions does; served by expire_date's index
    expired = model.objects.filter(expire_date__lt=timezone.now())
    return delete_page(expired, order=("expire_date", "pk"), limit=limit)


# the audit actions of extension host-API calls (`_Area._audit` in contributions.hostapi adds
# it): the only audit entries HOST_AUDIT_HOST_CALLS_RETENTION_DAYS may delete
HOST_CALL_ACTION_PREFIX = "host."
AUDIT_PRUNE_PAGE = 1000


def audit_host_calls_prune(*, limit: int = AUDIT_PRUNE_PAGE) -> tuple[int, bool]:
    """Delete one page of host-API call entries (`host.*`) older than
    HOST_AUDIT_HOST_CALLS_RETENTION_DAYS (host clock), oldest first; nothing when it is unset
    (the default: kept forever). Staff actions, stops and resumes are never deleted. Returns
    (deleted, more may remain)."""
    days = settings.HOST_AUDIT_HOST_CALLS_RETENTION_DAYS
    if days is None:
        return 0, False
    cutoff = clock.now() - dt.timedelta(days=days)
    host_calls = AuditEntry.objects.filter(
        action__startswith=HOST_CALL_ACTION_PREFIX, at__lt=cutoff
    )
    # served by the `at` index (oldest first); the few old staff rows are filtered out
    return delete_page(host_calls, order=("at", "pk"), limit=limit)


def lifecycle_record(*, kind: str, conversation_id: str = "", payload: dict) -> LifecycleEvent:
    """Record a lifecycle event in the caller's transaction (the outbox of spec 03)."""
    return LifecycleEvent.objects.create(
        kind=kind, conversation_id=conversation_id, payload=payload
    )
