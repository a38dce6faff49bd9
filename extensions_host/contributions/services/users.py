"""Users: the directory the host API reads, and deletion with a required transfer target.

Deleting a user is never a cascade (`Conversation.owner` and `ApiToken.user` are PROTECT; the
admin's plain delete is disabled). `user_delete` does it in one transaction: ownership moves to
the transfer target, the user's tokens are revoked (and their rows removed with the user), any
other protected reference moves too, the user is removed, and `user_deleted {user,
transfer_to}` goes into the lifecycle outbox (delivered once by the outbox worker).
"""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth import get_user_model
from django.db import models, transaction

from conversations.models import Conversation
from core.auth import SERVICE_USERNAME, user_is_admin, username_valid
from core.errors import MSG_NOT_FOUND, HostError
from core.models import ApiToken
from core.services import audit_record, lifecycle_record, tokens_revoke_for_user

logger = logging.getLogger("extensions_host.contributions.users")

MSG_TRANSFER_REQUIRED = "A user to transfer ownership to is required"
MSG_TRANSFER_SELF = "Ownership cannot be transferred to the user being deleted"
MSG_TRANSFER_INACTIVE = "Ownership can only be transferred to an active user"
MSG_PROTECTED_USER = "The service user cannot be deleted"
DIRECTORY_MAX = 1000


def user_wire(user: Any) -> dict[str, Any]:
    """The directory form of a user (admin material: it carries the email)."""
    return {
        "username": user.get_username(),
        "name": user.get_full_name() or user.get_username(),
        "email": user.email or "",
        "admin": user_is_admin(user),
        "active": bool(user.is_active),
    }


def _directory() -> models.QuerySet[Any]:
    # extension service users (`ext:<id>`) and the host's own service user are not people
    return (
        get_user_model()
        .objects.exclude(username__startswith="ext:")
        .exclude(username=SERVICE_USERNAME)
        .order_by("username")
    )


def users_list(*, limit: int = DIRECTORY_MAX) -> list[dict[str, Any]]:
    return [user_wire(user) for user in _directory()[: max(1, min(limit, DIRECTORY_MAX))]]


def user_get(*, username: str) -> dict[str, Any] | None:
    if not username_valid(username):
        return None
    user = _directory().filter(username=username).first()
    return None if user is None else user_wire(user)


def user_delete(*, user_id: int, transfer_to_id: int | None, actor: str) -> dict[str, Any]:
    """Delete a user, transferring what they own to `transfer_to_id` (see module docstring).

    Returns `{user, transfer_to, conversations, tokens_revoked}`.
    """
    if transfer_to_id is None:
        raise HostError(
            "contract",
            "invalid",
            MSG_TRANSFER_REQUIRED,
            details={"transfer_to": [MSG_TRANSFER_REQUIRED]},
        )
    if transfer_to_id == user_id:
        raise HostError(
            "contract", "invalid", MSG_TRANSFER_SELF, details={"transfer_to": [MSG_TRANSFER_SELF]}
        )
    user_model = get_user_model()
    with transaction.atomic(durable=True):
        # lock both rows in id order: two deletions transferring to each other cannot deadlock
        locked = {
            u.pk: u
            for u in user_model.objects.select_for_update()
            .filter(pk__in=[user_id, transfer_to_id])
            .order_by("pk")
        }
        user, target = locked.get(user_id), locked.get(transfer_to_id)
        if user is None or target is None:
            raise HostError("store", "not_found", MSG_NOT_FOUND)
        if user.get_username() == SERVICE_USERNAME:
            raise HostError("contract", "conflict", MSG_PROTECTED_USER)
        if not target.is_active:
            raise HostError(
                "contract",
                "invalid",
                MSG_TRANSFER_INACTIVE,
                details={"transfer_to": [MSG_TRANSFER_INACTIVE]},
            )
        conversations = Conversation.objects.filter(owner_id=user.pk).update(owner_id=target.pk)
        revoked = tokens_revoke_for_user(user_id=user.pk)
        # revoked tokens die with their user (the FK is PROTECT so no deletion is implicit)
        ApiToken.objects.filter(user_id=user.pk).delete()
        moved = _transfer_protected(user, target)
        username, target_name = user.get_username(), target.get_username()
        user.delete()
        lifecycle_record(
            kind="user_deleted", payload={"user": username, "transfer_to": target_name}
        )
        audit_record(
            actor=actor,
            action="user_deleted",
            target=username,
            detail={
                "transfer_to": target_name,
                "conversations": conversations,
                "tokens_revoked": revoked,
                **({"other": moved} if moved else {}),
            },
        )
    logger.info(
        "user_deleted",
        extra={"event": "user_deleted", "user": username, "transfer_to": target_name},
    )
    return {
        "user": username,
        "transfer_to": target_name,
        "conversations": conversations,
        "tokens_revoked": revoked,
    }


def _transfer_protected(user: Any, target: Any) -> dict[str, int]:
    """Any other PROTECT reference to the user (apps added later) moves to the target too,
    so deletion never fails half-way on a reference nobody thought of."""
    moved: dict[str, int] = {}
    for relation in type(user)._meta.related_objects:
        if relation.many_to_many or relation.on_delete is not models.PROTECT:
            continue
        model = relation.related_model
        if model in (Conversation, ApiToken):
            continue
        count = model._default_manager.filter(**{relation.field.name: user}).update(
            **{relation.field.name: target}
        )
        if count:
            moved[model._meta.label] = count
    return moved
