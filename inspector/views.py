"""The inspector page: `/inspect/<conversation>` (login, access-checked), its JSON fragments
for live updates, and the frame of a scripted HTML artifact.

Everything a conversation shows is model- or extension-produced, so the page runs under a
strict Content-Security-Policy of its own: scripts only from this origin (never inline), no
plugins, nothing may frame it; HTML artifacts live in sandboxed iframes (which inherit the
policy). The header is set here, so it holds whether or not the CSP middleware is installed.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from artifacts.choices import ContentType
from artifacts.selectors import artifacts_version, projection_read
from conversations.models import Conversation
from core.auth import Principal
from core.db import BIGINT_MAX
from core.errors import MSG_UNAUTHENTICATED, HostError
from core.middleware import json_error
from core.validation import decimal_number
from extensions_host.surfaces.live import roster_token
from inspector.selectors import (
    KIND_PARTS,
    PARTS,
    inspector_conversation,
    inspector_principal,
    part_context,
)

MSG_UNKNOWN_PART = "Unknown inspector part"
MSG_BAD_VERSION = "since and artifacts_since must be non-negative integers"

INSPECTOR_CSP = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        # styles cannot run code; HTML artifacts (srcdoc frames inherit this policy) keep theirs
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "frame-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
# A scripted artifact runs in a unique (opaque) origin: it cannot read the page, the session
# or the API, and may load nothing from anywhere.
ARTIFACT_FRAME_CSP = "; ".join(
    [
        "sandbox allow-scripts",
        "default-src 'none'",
        "script-src 'unsafe-inline'",
        "style-src 'unsafe-inline'",
        "img-src data:",
        "frame-ancestors 'self'",
    ]
)


def _strict(response: HttpResponse, policy: str = INSPECTOR_CSP) -> HttpResponse:
    response["Content-Security-Policy"] = policy
    response["X-Content-Type-Options"] = "nosniff"
    response["Referrer-Policy"] = "same-origin"
    return response


def _open(request: HttpRequest, conversation_id: str) -> tuple[Principal, Conversation]:
    principal = inspector_principal(request.user)
    try:
        conversation = inspector_conversation(principal=principal, conversation_id=conversation_id)
    except HostError as exc:
        if exc.cause == "not_found":
            raise Http404(exc.message) from exc
        raise
    return principal, conversation


def render_parts(
    request: HttpRequest, names: list[str], *, principal: Principal, conversation: Conversation
) -> dict[str, str]:
    # mark_safe: the templates escaped every value; strip() would drop the safe marker
    return {
        name: mark_safe(  # noqa: S308
            render_to_string(
                f"inspector/parts/{name}.html",
                part_context(name, principal=principal, conversation=conversation),
                request=request,
            ).strip()
        )
        for name in names
    }


@never_cache
@require_GET
@login_required
def inspector_page(request: HttpRequest, conversation_id: str) -> HttpResponse:
    principal, conversation = _open(request, conversation_id)
    parts = render_parts(request, list(PARTS), principal=principal, conversation=conversation)
    context: dict[str, Any] = {
        "conversation": conversation,
        "parts": parts,
        "can_write": conversation.access == "owner" and principal.can_write,
        "kind_parts": json.dumps(KIND_PARTS, separators=(",", ":")),
        "events_url": reverse("conversation-events", args=[conversation.pk]),
        "fragments_url": reverse("inspector:fragments", args=[conversation.pk]),
        "artifacts_version": artifacts_version(world_id=conversation.pk),
        "roster": roster_token(),
        "submit_url": reverse("conversation-submissions", args=[conversation.pk]),
    }
    return _strict(render(request, "inspector/page.html", context))


@never_cache
@require_GET
def inspector_fragments(request: HttpRequest, conversation_id: str) -> HttpResponse:
    """`{version, artifacts_version, roster, parts: {name: html}}` for the live page.
    `parts=a,b` picks parts (default all); `since=<version>` answers no parts when the
    conversation has not moved (polling), but the projection when the roster's token moved
    from `roster=<token>` (a stop or a resume moves no conversation's version);
    `artifacts_since=<n>` leaves out the artifacts part while the world's artifact sequence has
    not moved (the page's cheap poll of it, a backstop beside the stream, which names artifact
    changes too)."""
    if not request.user.is_authenticated:
        return json_error(HostError("auth", "unauthenticated", MSG_UNAUTHENTICATED))
    raw = request.GET.get("parts", "")
    names = [name for name in raw.split(",") if name] if raw else list(PARTS)
    if len(names) > len(PARTS) or any(name not in PARTS for name in names):
        return json_error(HostError("contract", "invalid", MSG_UNKNOWN_PART))
    since = _counter(request.GET.get("since"))
    artifacts_since = _counter(request.GET.get("artifacts_since"))
    if since == -1 or artifacts_since == -1:
        return json_error(HostError("contract", "invalid", MSG_BAD_VERSION))
    try:
        principal, conversation = _open(request, conversation_id)
    except Http404 as exc:
        return json_error(HostError("store", "not_found", str(exc)))
    if since is not None and since == conversation.version:
        names = []
    roster = roster_token()
    if request.GET.get("roster", roster) != roster:
        names.append("projection")
    world_version = artifacts_version(world_id=conversation.pk)
    if artifacts_since is not None and artifacts_since != world_version:
        names.append("artifacts")
    elif artifacts_since is not None:
        names = [name for name in names if name != "artifacts"]
    body = {
        "version": conversation.version,
        "artifacts_version": world_version,
        "roster": roster,
        "parts": render_parts(
            request, sorted(set(names)), principal=principal, conversation=conversation
        ),
    }
    return _strict(JsonResponse(body))


def _counter(raw: str | None) -> int | None:
    """A version query parameter: None when absent, -1 when malformed."""
    if raw is None:
        return None
    value = decimal_number(raw, maximum=BIGINT_MAX)
    return -1 if value is None else value


@never_cache
@require_GET
@login_required
def artifact_frame(request: HttpRequest, conversation_id: str, record_id: str) -> HttpResponse:
    """The document of an active HTML artifact whose preset enabled scripts, for a sandboxed
    iframe (`allow-scripts` without `allow-same-origin`). Anything else is not found: HTML of
    presets without scripts is only ever shown inline in a script-less sandbox."""
    _open(request, conversation_id)
    for item in projection_read(world_id=conversation_id):
        if (
            item["record_id"] == record_id
            and item["content_type"] == ContentType.TEXT_HTML
            and item["preset_scripts_enabled"]
        ):
            response = HttpResponse(str(item["payload"]), content_type="text/html; charset=utf-8")
            response["X-Frame-Options"] = "SAMEORIGIN"
            return _strict(response, ARTIFACT_FRAME_CSP)
    raise Http404("Artifact not found")
