"""The JSON renderer for every API view."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.renderers import JSONRenderer


class HostJSONRenderer(JSONRenderer):
    """DRF's JSON, UTF-8 as usual. A body holding a lone surrogate (a client's invalid string
    that a 400 names back: an unknown key, a refused choice) cannot be UTF-8: that body is
    written with ASCII escapes instead, still the same JSON, rather than failing as a 500."""

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            return _AsciiJSONRenderer().render(data, accepted_media_type, renderer_context)


class _AsciiJSONRenderer(JSONRenderer):
    ensure_ascii = True
