"""Reads of conversations with access checks (spec 01, access)."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from core.access import Access, access_of
from core.auth import Principal
from core.errors import MSG_FORBIDDEN, HostError
from conversations.models import Conversation, Sharing

MSG_CONVERSATION_NOT_FOUND = "Conversation not found"


def conversation_access(*, principal: Principal, conversation: Conversation) -> Access:
    return access_of(principal, owner_id=conversation.owner_id, sharing=conversation.sharing)


def conversation_get(
    *, principal: Principal, conversation_id: str, write: bool = False
) -> Conversation:
    """The conversation if the principal may read it (and write it, with `write=True`).

    Order of checks: a conversation the principal cannot read answers 404 (no existence leak),
    before any other check; then a readable one the principal may not write answers 403.
    Unauthenticated writes are refused by the view's permission before this runs.
    """
    conversation = Conversation.objects.filter(pk=conversation_id).first()
    if conversation is None:
        raise HostError("store", "not_found", MSG_CONVERSATION_NOT_FOUND)
    access = conversation_access(principal=principal, conversation=conversation)
    if access == "none":
        raise HostError("store", "not_found", MSG_CONVERSATION_NOT_FOUND)
    if write and (access != "owner" or not principal.can_write):
        raise HostError("auth", "forbidden", MSG_FORBIDDEN)
    return conversation


def conversations_visible(*, principal: Principal) -> QuerySet[Conversation]:
    """Every conversation the principal can read; lists never contain anything else."""
    qs = Conversation.objects.all()
    if principal.is_authenticated and principal.admin:
        return qs
    if principal.is_authenticated:
        return qs.filter(
            Q(owner_id=principal.user_id) | Q(sharing__in=[Sharing.USERS, Sharing.PUBLIC])
        )
    return qs.filter(sharing=Sharing.PUBLIC)


__all__ = ["conversation_access", "conversation_get", "conversations_visible"]
