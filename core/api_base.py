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
            # DRF's CharField turns 102 into "102"; the schema says string, so a number is a 400
            not_text = {
                name: ["Not a valid string."]
                for name, field in self.fields.items()
                if isinstance(field, serializers.CharField)
                and data.get(name) is not None
                and not isinstance(data.get(name), str)
            }
            if not_text:
                raise serializers.ValidationError(not_text)
        return super().to_internal_value(data)


class Pagination(CursorPagination):
    """Cursor pagination, `limit` ≤ 100."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 100
    ordering = "-id"
