"""Shared pieces for the DRF layer: strict serializers and cursor pagination."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.pagination import CursorPagination

from core.errors import MSG_UNKNOWN_FIELDS, HostError


class StrictSerializer(serializers.Serializer):
    """A plain Serializer that rejects unknown fields (400) instead of ignoring them."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise HostError(
                    "contract",
                    "invalid",
                    MSG_UNKNOWN_FIELDS,
                    details={field: ["Unknown field."] for field in unknown},
                )
        return super().to_internal_value(data)


class Pagination(CursorPagination):
    """Cursor pagination, `limit` ≤ 100."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 100
    ordering = "-id"
