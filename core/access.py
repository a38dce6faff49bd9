"""Conversation access: `access_of(principal, owner, sharing)` → owner | read | none (spec 01)."""

from __future__ import annotations

from typing import Literal

from core.auth import Principal

Access = Literal["owner", "read", "none"]


def access_of(principal: Principal, *, owner_id: int | None, sharing: str) -> Access:
    """The owner and admins get `owner`; `users` sharing gives any authenticated user `read`;
    `public` gives everyone `read`."""
    if principal.is_authenticated and (principal.admin or principal.user_id == owner_id):
        return "owner"
    if sharing == "public":
        return "read"
    if sharing == "users" and principal.is_authenticated:
        return "read"
    return "none"
