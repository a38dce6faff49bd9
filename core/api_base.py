"""Shared pieces for the DRF layer: strict serializers and cursor pagination."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Any, cast
from urllib import parse

from django.db.models import Q
from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request
from rest_framework.utils.urls import replace_query_param

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
            if unknown and self.parent is not None:
                # nested (a content part in `parts`): a ValidationError, which DRF reports under
                # the enclosing field (`{"parts": {"0": {"bogus": …}}}`) like the part's other
                # problems; a HostError would escape as if the body had a field `bogus`
                raise serializers.ValidationError({field: ["Unknown field."] for field in unknown})
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


def _cursor_invalid() -> HostError:
    return HostError("contract", "invalid", MSG_CURSOR, details={"cursor": [MSG_CURSOR]})


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
            raise _cursor_invalid() from exc
        if cursor is not None and cursor.position is not None:
            try:
                # decoded from the query string: text (the stubs say int)
                valid = self.position_valid(cast(str, cursor.position))
            except (ValueError, TypeError, OverflowError):
                valid = False
            if not valid:
                raise _cursor_invalid()
        return cursor


class KeysetPagination(Pagination):
    """Cursor pagination on a key of several columns: `ordering` lists them, the first ones
    may tie and the whole is unique (the last column breaks ties), in the order of the index
    the list reads. DRF's cursor keeps only the first column as its position and counts the
    rows that tie with it in an offset, which is wrong going backwards (`previous`) and for
    rows inserted meanwhile; here a cursor carries every column's value of the row it starts
    after (`p` once per column, still opaque base64), so `next` and `previous` are exact and
    no offset is ever issued.

    `position_valid` checks the first column's value, `key_valid` the rest (text by default).
    A cursor may carry fewer values than columns (a prefix: the page starts after every row
    that shares it); never more, and never an offset."""

    def key_valid(self, key: Sequence[str]) -> bool:
        """The values after the first: text columns by default (anything but a NUL)."""
        return all("\x00" not in value for value in key)

    def decode_cursor(self, request: Request) -> Cursor | None:
        cursor = super().decode_cursor(request)  # readable, its first value checked
        if cursor is None:
            return None
        encoded = request.query_params[self.cursor_query_param]
        try:
            text = base64.b64decode(encoded.encode("ascii")).decode("ascii")
            key = tuple(parse.parse_qs(text, keep_blank_values=True).get("p", []))
        except ValueError as exc:  # super() has read it already: not expected
            raise _cursor_invalid() from exc
        if cursor.offset or len(key) > len(self.ordering) or not self.key_valid(key[1:]):
            raise _cursor_invalid()
        # the whole key rides in `position` (the stubs say int: DRF never looks inside)
        return Cursor(offset=0, reverse=cursor.reverse, position=cast(Any, key or None))

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> list[Any]:
        self.request = request
        page_size = self.get_page_size(request) or type(self).page_size
        self.page_size = page_size
        self.base_url = request.build_absolute_uri()
        self.ordering = self.get_ordering(request, queryset, view)
        self.cursor = self.decode_cursor(request)
        reverse = self.cursor is not None and self.cursor.reverse
        key = cast(tuple[str, ...] | None, self.cursor.position) if self.cursor else None
        ordering = tuple(self.ordering)
        if reverse:  # `previous`: read backwards from the key, then turn the page around
            ordering = tuple(c[1:] if c.startswith("-") else f"-{c}" for c in ordering)
        queryset = queryset.order_by(*ordering)
        if key:
            queryset = queryset.filter(_after(ordering, key))
        rows = list(queryset[: page_size + 1])
        page = rows[:page_size]
        more = len(rows) > len(page)
        if reverse:
            page.reverse()
        self.page = page
        # `next` starts after the page's last row, `previous` before its first; an empty page
        # (its rows deleted meanwhile) keeps the cursor's key both ways
        first = self._key_of(page[0]) if page else key
        last = self._key_of(page[-1]) if page else key
        self.has_next = more if not reverse else key is not None
        self.has_previous = more if reverse else key is not None
        self.next_position = last  # type: ignore[assignment]  # a key, as the cursor's
        self.previous_position = first  # type: ignore[assignment]  # a key, as the cursor's
        return page

    def get_next_link(self) -> str | None:
        if not self.has_next:
            return None
        return self._link(cast(Any, self.next_position), reverse=False)

    def get_previous_link(self) -> str | None:
        if not self.has_previous:
            return None
        return self._link(cast(Any, self.previous_position), reverse=True)

    def _link(self, key: tuple[str, ...], *, reverse: bool) -> str:
        tokens: dict[str, Any] = {"p": list(key)}
        if reverse:
            tokens["r"] = "1"
        querystring = parse.urlencode(tokens, doseq=True)
        encoded = base64.b64encode(querystring.encode("ascii")).decode("ascii")
        return replace_query_param(cast(str, self.base_url), self.cursor_query_param, encoded)

    def _key_of(self, row: Any) -> tuple[str, ...]:
        return tuple(str(getattr(row, column.lstrip("-"))) for column in self.ordering)


def _after(ordering: Sequence[str], key: Sequence[str]) -> Q:
    """The rows strictly after `key` (the values of the first columns of `ordering`) in that
    order: `c0 ≷ k0 OR (c0 = k0 AND (c1 ≷ k1 OR …))`, with `c0 ≷= k0` in front so the index
    the ordering follows bounds the scan."""
    columns = [(name.lstrip("-"), "lt" if name.startswith("-") else "gt") for name in ordering]
    after: Q | None = None
    for (name, op), value in reversed(list(zip(columns, key, strict=False))):
        beyond = Q(**{f"{name}__{op}": value})
        after = beyond if after is None else beyond | (Q(**{name: value}) & after)
    name, op = columns[0]
    return Q(**{f"{name}__{op}e": key[0]}) & cast(Q, after)


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
