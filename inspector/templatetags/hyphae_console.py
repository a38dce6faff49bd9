"""`{% console_dashboard %}`: the figures of the admin index (templates/admin/index.html)."""

from __future__ import annotations

from typing import Any

from django import template

from inspector.console import dashboard_read

register = template.Library()


@register.inclusion_tag("admin/hyphae/dashboard.html")
def console_dashboard() -> dict[str, Any]:
    return {"dash": dashboard_read()}
