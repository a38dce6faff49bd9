"""Shared pieces for the DRF layer: strict serializers and cursor pagination."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

from core.db import BIGINT_MAX
from core.errors import MSG_UNKNOWN_FIELDS, HostError, query_error

MSG_CURSOR = "Cursor is invalid"


# A serializer field may carry a name the API needs that is also a Field or Serializer attribute
# (`source`, `context`, `save`): DRF's metaclass moves declared fields out of the class body, so
# nothing is shadowed at runtime, but the stubs see a clash. Such a field carries
# `# type: ignore[assignment]  # field name`.


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


@extend_schema_serializer(component_name="EmptyInput")
class EmptyInputSerializer(StrictSerializer):
    """No fields (unknown ones are refused): the body of a write that takes none, such as a
    heartbeat or a DELETE (an empty body, or `{}`)."""


class ListQuerySerializer(serializers.Serializer):
    cursor = serializers.CharField(required=False, help_text="Opaque cursor from `next`.")
    limit = serializers.IntegerField(required=False, min_value=1, max_value=100)


class Pagination(CursorPagination):
    """Cursor pagination, `limit` ≤ 100. A cursor the server did not issue is a 400 (never a
    404, and never a 500 from a position the ordering column cannot compare with): subclasses
    say what a position of their ordering looks like (`position_valid`). A list view calls
    `paginate` (and `query` first when it takes more parameters than `cursor` and `limit`)."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 100
    ordering: str | tuple[str, ...] = "-id"
    _query: dict[str, Any] | None = None

    def query(
        self, request: Request, serializer_class: type[serializers.Serializer] = ListQuerySerializer
    ) -> dict[str, Any]:
        """The list's query parameters, checked (a 400 names each bad one): `cursor`, `limit`
        and the fields `serializer_class` adds."""
        # a plain dict: DRF reads "" in a QueryDict as "absent"; here it is an invalid value
        serializer = serializer_class(data=request.query_params.dict())
        try:
            serializer.is_valid(raise_exception=True)
        except ValidationError as exc:
            raise query_error(exc) from exc
        except HostError as exc:  # a strict serializer's unknown names
            if exc.cause != "invalid":
                raise
            raise query_error(exc) from exc
        self._query = dict(serializer.validated_data)
        return self._query

    def paginate(self, request: Request, rows: Any, view: Any = None) -> list[Any]:
        """The page of `rows` (a queryset) the request asks for, its query checked first unless
        `query` did already."""
        if self._query is None:
            self.query(request)
        return self.paginate_queryset(rows, request, view) or []

    def links(self) -> dict[str, str | None]:
        """`next` and `previous` of the page `paginate` returned, for a page body with more
        fields than `get_paginated_response` gives."""
        return {"next": self.get_next_link(), "previous": self.get_previous_link()}

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
                # decoded from the query string: text (the stubs say int)
                valid = self.position_valid(cast(str, cursor.position))
            except (ValueError, TypeError, OverflowError):
                valid = False
            if not valid:
                raise HostError("contract", "invalid", MSG_CURSOR, details={"cursor": [MSG_CURSOR]})
        return cursor


class IdPagination(Pagination):
    """Ordered by an integer id (a bigint)."""

    def position_valid(self, position: str) -> bool:
        return position.isascii() and 0 <= int(position) <= BIGINT_MAX


class RowsPagination(Pagination):
    """Cursor pagination over rows computed in memory (declared jobs, slash commands: nothing
    to query), with the same cursors, `limit` and page shape as the database lists. Each row
    has a unique text position (`position_of`); the page is cut by comparing positions, as a
    queryset is filtered by its ordering column."""

    ordering = "position"

    def position_of(self, row: Any) -> str:
        raise NotImplementedError

    def paginate(self, request: Request, rows: Any, view: Any = None) -> list[Any]:
        """The page of `rows` (a list) the request asks for, its query checked first."""
        return super().paginate(request, _Rows(rows, self.position_of), view)

    def _get_position_from_instance(self, instance: Any, ordering: Any) -> str:
        # DRF's one hook for "the position of this row" (it would read the ordering field)
        return self.position_of(instance)


class _Rows:
    """The three queryset calls DRF's `CursorPagination` makes, over a list: `order_by` the one
    position, `filter(position__gt|__lt=…)`, and slicing."""

    def __init__(self, rows: list[Any], position_of: Callable[[Any], str]) -> None:
        self.rows = rows
        self.position_of = position_of

    def order_by(self, *ordering: str) -> _Rows:
        descending = ordering[0].startswith("-")
        return _Rows(sorted(self.rows, key=self.position_of, reverse=descending), self.position_of)

    def filter(self, **lookup: str) -> _Rows:
        ((name, position),) = lookup.items()
        if name.endswith("__gt"):
            kept = [row for row in self.rows if self.position_of(row) > position]
        else:
            kept = [row for row in self.rows if self.position_of(row) < position]
        return _Rows(kept, self.position_of)

    def __getitem__(self, index: slice) -> list[Any]:
        return self.rows[index]


def paginated(serializer: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    """The cursor page envelope around `serializer`, as its own schema component."""

    @extend_schema_serializer(component_name=name)
    class Page(serializers.Serializer):
        next = serializers.URLField(allow_null=True)
        previous = serializers.URLField(allow_null=True)
        results = serializer(many=True)

    return Page
