"""`core.validation`: the one answer to "can this JSON be stored?", and the extension settings
that now use it (a lone surrogate used to reach PostgreSQL's jsonb: a DataError, a 500)."""

from __future__ import annotations

import math

import pytest

from core.errors import HostError
from core.validation import (
    PROBLEM_NOT_FINITE,
    PROBLEM_NOT_JSON,
    PROBLEM_NOT_UNICODE,
    PROBLEM_NUL,
    json_problem,
    json_size,
    problem_too_deep,
    problem_too_large,
    text_problem,
)
from extensions_host.contributions.models import ExtensionSettings
from extensions_host.contributions.services import stores
from extensions_host.runtime import detached_context
from extensions_host.sdk import Extension, StateError


def nested(depth: int) -> object:
    """A value whose innermost item sits at `depth` (the top level is 0)."""
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


# --- the check -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -(2**70), 1.5, "", "text ü €", "C:\\u0000 is a path", [], {}, (1, "a")],
)
def test_plain_json_values_are_storable(value):
    assert json_problem(value) is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("a\x00b", PROBLEM_NUL),
        ({"k\x00": 1}, PROBLEM_NUL),
        ("\ud800", PROBLEM_NOT_UNICODE),
        ({"nested": ["ok", {"\udc00": 1}]}, PROBLEM_NOT_UNICODE),
        (math.nan, PROBLEM_NOT_FINITE),
        ({"x": [math.inf]}, PROBLEM_NOT_FINITE),
        ({1: "int key"}, PROBLEM_NOT_JSON),
        ({"a": {1, 2}}, PROBLEM_NOT_JSON),
        (object(), PROBLEM_NOT_JSON),
    ],
)
def test_what_the_database_cannot_store_is_named(value, problem):
    assert json_problem(value) == problem


def test_depth_is_bounded_at_the_callers_limit():
    assert json_problem(nested(32)) is None
    assert json_problem(nested(33)) == problem_too_deep(32)
    assert json_problem(nested(5), max_depth=4) == problem_too_deep(4)


def test_no_depth_bound_walks_any_nesting_without_recursing():
    assert json_problem(nested(50_000), max_depth=None) is None


def test_size_is_the_compact_utf8_encoding_and_bounded_on_request():
    value = {"k": ["é", 1]}
    assert json_size(value) == len('{"k":["é",1]}'.encode())
    assert json_problem(value, max_bytes=json_size(value)) is None
    assert json_problem(value, max_bytes=json_size(value) - 1) == problem_too_large(
        json_size(value) - 1
    )


def test_stored_as_text_a_nul_and_a_surrogate_are_left_to_the_caller():
    assert json_problem({"a\x00": "\ud800"}, check_text=False) is None
    assert json_problem({"a": math.nan}, check_text=False) == PROBLEM_NOT_FINITE


def test_text_problem_checks_one_string():
    assert text_problem("fine") is None
    assert text_problem("\x00") == PROBLEM_NUL
    assert text_problem("\udfff") == PROBLEM_NOT_UNICODE


# --- extension settings --------------------------------------------------------------------------


@pytest.fixture
def vault(install):
    install(Extension(id="vault", version="1.0.0", grants={"state"}))
    ctx = detached_context(extension_id="vault", hook="test")
    assert ctx is not None
    return ctx


@pytest.mark.parametrize("bad", [{"x": "\ud800"}, {"\udc00": 1}, {"x": ["ok", "a\udfffb"]}])
def test_a_lone_surrogate_in_settings_is_a_bound_error_and_nothing_is_stored(vault, bad):
    # On PostgreSQL this used to reach jsonb, which refuses it: a DataError (500) instead.
    vault.stores.settings.set({"channel": "#general"})
    with pytest.raises(StateError, match="settings are invalid") as raised:
        vault.stores.settings.set(bad)
    assert raised.value.kind == "bound"
    assert vault.stores.settings.get() == {"channel": "#general"}


def test_a_staff_edit_with_a_lone_surrogate_is_a_400_naming_the_problem(vault):
    with pytest.raises(HostError) as raised:
        stores.settings_edit(extension_id="vault", value={"x": "\ud800"}, actor="staff")
    assert raised.value.status == 400
    assert raised.value.details == {"value": [PROBLEM_NOT_UNICODE]}
    assert not ExtensionSettings.objects.filter(pk="vault").exists()


def test_settings_may_hold_the_text_of_an_escape_but_not_a_nul(vault):
    # the old check searched the encoding for "\\u0000", refusing this harmless text too
    vault.stores.settings.set({"path": "C:\\u0000"})
    assert vault.stores.settings.get() == {"path": "C:\\u0000"}
    with pytest.raises(StateError, match="settings are invalid"):
        vault.stores.settings.set({"path": "a\x00b"})


def test_settings_keep_their_bounds(vault):
    with pytest.raises(HostError) as raised:
        stores.settings_validate(extension_id="vault", value={"x": nested(32)})
    assert raised.value.details == {"value": [problem_too_deep(stores.SETTINGS_MAX_DEPTH)]}
    big = {"x": "a" * stores.SETTINGS_MAX_BYTES}
    with pytest.raises(HostError) as raised:
        stores.settings_validate(extension_id="vault", value=big)
    assert raised.value.details == {"value": [problem_too_large(stores.SETTINGS_MAX_BYTES)]}
