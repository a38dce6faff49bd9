"""What the staff console's lists over big tables read: filters that never read the table
they filter for their choices, and lists that leave out the big columns they never show.

Django's filter on a plain column (`list_filter = ["kind"]`, its `AllValuesFieldListFilter`)
finds its choices by `SELECT DISTINCT kind` over the whole table, and a `date_hierarchy`
truncates the timestamp of every row: both on every view of the list, whatever its filters.
On a table of millions that is a scan per page view. The filters here take their choices from
a small source instead (the roster, the loaded extensions' declarations, a code constant, a
fixed set of time windows), so the big table only sees the chosen value, as a `WHERE`.

An admin declares one in a line: `list_filter = [value_filter("kind", lambda: KINDS)]`.

`ListDefersAdmin` (and `on_changelist`) is the other half of what a list reads: the columns.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest

from core import clock


class ValueFilter(admin.SimpleListFilter):
    """Rows whose `field` equals the chosen value. The choices come from `source()`, never from
    the filtered table; a value that is not among them (a link from elsewhere, an uninstalled
    extension's rows) still filters and is shown as chosen."""

    field: ClassVar[str]
    source: ClassVar[Callable[[], Iterable[str]]]

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        values = list(dict.fromkeys(type(self).source()))
        chosen = self.value()
        if chosen is not None and chosen not in values:
            values.append(chosen)
        return [(value, value) for value in values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        chosen = self.value()
        return queryset if chosen is None else queryset.filter(**{self.field: chosen})


def value_filter(
    field: str, source: Callable[[], Iterable[str]], *, title: str | None = None
) -> type[ValueFilter]:
    """A `ValueFilter` on `field` with the choices `source()` gives (read on each list view, so
    keep it small: a constant, the registry, a table of one row per extension). The query
    parameter is the field's name, as Django's own filter on the column had it, so links into
    the list keep working."""
    return type(
        f"{field.title().replace('_', '')}Filter",
        (ValueFilter,),
        {
            "field": field,
            "source": staticmethod(source),
            "parameter_name": field,
            "title": title or field.replace("_", " "),
        },
    )


# the windows a time filter offers, newest first: (parameter value, label, length)
WINDOWS: tuple[tuple[str, str, dt.timedelta], ...] = (
    ("hour", "Last hour", dt.timedelta(hours=1)),
    ("day", "Last 24 hours", dt.timedelta(days=1)),
    ("week", "Last 7 days", dt.timedelta(days=7)),
    ("month", "Last 30 days", dt.timedelta(days=30)),
)


class RecentFilter(admin.SimpleListFilter):
    """Rows whose datetime `field` falls in the last hour, day, week or month: a range on the
    column (served by its index), where a `date_hierarchy` truncates every row's timestamp to
    find which years, months and days to offer. The field is stamped with the host clock."""

    field: ClassVar[str]

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, label) for value, label, _ in WINDOWS]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        chosen = self.value()
        if chosen is None:
            return queryset
        length = next((length for value, _, length in WINDOWS if value == chosen), None)
        if length is None:
            raise IncorrectLookupParameters(f"no such time window: {chosen}")
        return queryset.filter(**{f"{self.field}__gte": clock.now() - length})


def recent_filter(field: str, *, title: str | None = None) -> type[RecentFilter]:
    """A `RecentFilter` on the datetime `field` (query parameter `<field>__within`)."""
    return type(
        f"Recent{field.title().replace('_', '')}Filter",
        (RecentFilter,),
        {
            "field": field,
            "parameter_name": f"{field}__within",
            "title": title or field.replace("_", " "),
        },
    )


def on_changelist(request: HttpRequest) -> bool:
    """Whether `request` is for a model's list page (`get_queryset` serves the row's own page,
    the delete pages and the actions too)."""
    match = request.resolver_match
    return bool(match and match.url_name and match.url_name.endswith("_changelist"))


class ListDefersAdmin(admin.ModelAdmin):
    """A list that leaves out the big columns it never shows (`list_defer`: a run's capture,
    an entry's content), which may be megabytes a row; the row's own page loads them."""

    list_defer: tuple[str, ...] = ()

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        return queryset.defer(*self.list_defer) if on_changelist(request) else queryset
