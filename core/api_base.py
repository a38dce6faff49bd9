"""Shared pieces for the DRF layer: strict serializers and cursor pagination."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

from core.db import BIGINT_MAX
from core.errors import MSG_UNKNOWN_FIELDS, HostError

MSG_CURSOR = "Cursor is invalid"


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
    """Cursor pagination, `limit` ≤ 100. A cursor the server did not issue is a 400 (never a
    404, and never a 500 from a position the ordering column cannot compare with): subclasses
    say what a position of their ordering looks like (`position_valid`)."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 100
    ordering = "-id"

    def position_valid(self, position: str) -> bool:
        """A text ordering column: anything but a NUL (which PostgreSQL text cannot hold)."""
        return "\x00" not in position

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            cursor = super().decode_cursor(request)
        except NotFound as exc:
            raise HostError(
                "contract", "invalid", MSG_CURSOR, details={"cursor": [MSG_CURSOR]}
            ) from exc
        if cursor is not None and cursor.position is not None:
            try:
                valid = self.position_valid(cursor.position)
            except (ValueError, TypeError, OverflowError):
                valid = False
            if not valid:
                raise HostError("contract", "invalid", MSG_CURSOR, details={"cursor": [MSG_CURSOR]})
        return cursor


class IdPagination(Pagination):
    """Ordered by an integer id (a bigint)."""

    def position_valid(self, position: str) -> bool:
        return position.isascii() and 0 <= int(position) <= BIGINT_MAX


class ListQuerySerializer(serializers.Serializer):
    cursor = serializers.CharField(required=False, help_text="Opaque cursor from `next`.")
    limit = serializers.IntegerField(required=False, min_value=1, max_value=100)


def paginated(serializer: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    """The cursor page envelope around `serializer`, as its own schema component."""

    @extend_schema_serializer(component_name=name)
    class Page(serializers.Serializer):
        next = serializers.URLField(allow_null=True)
        previous = serializers.URLField(allow_null=True)
        results = serializer(many=True)

    return Page
