"""`project_catalog` in both documented forms: `(value, catalog)` and `(value)` (spec 02 §1)."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from extensions_host.models import ExtensionStatus
from extensions_host.runtime.hooks import catalog_takes_catalog
from extensions_host.sdk import CatalogEntry

from .conftest import roster
from .exts import Board
from .test_api import board_ext, projection


def value_only(value: Board) -> list[CatalogEntry]:
    return [CatalogEntry(name=f"count{value.count}", scope="conversation")]


def value_and_catalog(value: Board, catalog: list[CatalogEntry]) -> list[CatalogEntry]:
    return [entry for entry in catalog if entry.name != "clear"]


def with_default(value: Board, catalog: Any = None) -> list[CatalogEntry]:
    return list(catalog)


class Adapter:
    def __call__(self, value: Board) -> list[dict[str, Any]]:
        return [{"name": "only", "scope": "global"}]


def test_a_one_argument_project_catalog_gets_the_value(install, conversation, owner, api):
    install(board_ext(project_catalog=value_only))
    conversation("c1")

    slot = projection(api(owner)).json()["slots"]["board"]

    assert slot["status"] == "running"
    assert [entry["name"] for entry in slot["catalog"]] == ["count0"]
    assert roster("board").status == ExtensionStatus.RUNNING


def test_a_two_argument_project_catalog_gets_the_value_and_the_catalog(
    install, conversation, owner, api
):
    install(board_ext(project_catalog=value_and_catalog))
    conversation("c1")

    slot = projection(api(owner)).json()["slots"]["board"]

    assert [entry["name"] for entry in slot["catalog"]] == ["add"]


def test_a_type_error_inside_a_one_argument_project_catalog_is_a_defect(
    install, conversation, owner, api
):
    def broken(value: Board) -> list[CatalogEntry]:
        return len(value)  # type: ignore[arg-type,return-value]  # TypeError: not retried

    install(board_ext(project_catalog=broken))
    conversation("c1")

    slot = projection(api(owner)).json()["slots"]["board"]

    assert slot["status"] == "stopped"
    assert slot["reason"] == "project_catalog defect: object of type 'Board' has no len()"


@pytest.mark.parametrize(
    ("adapt", "takes_catalog"),
    [
        (value_only, False),
        (value_and_catalog, True),
        (with_default, True),
        (lambda *args: [], True),
        (Adapter(), False),
        (functools.partial(value_and_catalog), True),
        (functools.partial(value_and_catalog, catalog=[]), False),
        (lambda: [], True),  # neither form: called with both, it fails as a defect
        (len, False),
    ],
)
def test_the_form_is_read_from_the_signature(adapt, takes_catalog):
    assert catalog_takes_catalog(adapt) is takes_catalog
    assert catalog_takes_catalog(adapt) is takes_catalog  # the second call reads the cache
