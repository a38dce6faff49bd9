"""`{% console_dashboard %}`: the figures of the admin index (templates/admin/index.html)."""

from __future__ import annotations

from typing import Any

from django import template

from inspector.console import dashboard_read

register = template.Library()


@register.inclusion_tag("admin/hyphae/dashboard.html", takes_context=True)
def console_dashboard(context: dict[str, Any]) -> dict[str, Any]:
    """The parts the signed-in staff user may view (`inspector.console.DASHBOARD_PARTS`)."""
    return {"dash": dashboard_read(user=context["request"].user)}
