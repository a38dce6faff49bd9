"""The SDK's definition checks and the registry's discovery (spec 02 §1)."""

from __future__ import annotations

import importlib.metadata
from typing import Any

import pytest
from pydantic import BaseModel

from extensions_host import registry
from extensions_host.registry import ExtensionLoadError
from extensions_host.sdk import (
    SDK_VERSION,
    Collection,
    Command,
    DefinitionError,
    Document,
    Extension,
    Retry,
    StateError,
)

from .exts import make_ext


class M(BaseModel):
    k: str = ""


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"id": "Bad Id"}, "must match"),
        ({"grants": {"state", "teleport"}}, r"unknown grants \['teleport'\]"),
        ({"state_version": 0}, "state_version"),
        ({"deadline_s": 301}, "deadline_s"),
        ({"state_version": 2, "migrations": {2: lambda row: [row]}}, "migration keys"),
        ({"collections": {"Bad Name": Collection(M, key=lambda m: m.k)}}, "collection name"),
    ],
)
def test_impossible_definitions_fail_at_import_with_a_clear_message(kwargs, message):
    with pytest.raises(DefinitionError, match=message):
        Extension(**({"id": "ok", "version": "1"} | kwargs))


def test_declarations_check_their_own_bounds():
    with pytest.raises(DefinitionError, match="max_bytes"):
        Document(M, max_bytes=0)
    with pytest.raises(DefinitionError, match="exceeds its max_bytes"):
        Document(M, initial=M(k="x" * 50), max_bytes=10)
    with pytest.raises(DefinitionError, match="pydantic"):
        Collection(dict, key=lambda v: v)  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="scope"):
        Command(scope="everywhere")  # type: ignore[arg-type]


def test_typed_errors_have_closed_kinds_and_retry_is_bounded():
    assert StateError("bound", "too big").kind == "bound"
    with pytest.raises(ValueError, match="kind"):
        StateError("oops")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="after_seconds"):
        Retry(0)


def test_hook_decorators_fill_slots_once():
    ext = make_ext("alpha")

    @ext.on_timer
    def due(ctx: Any, timer: Any) -> None: ...

    with pytest.raises(DefinitionError, match="defined twice"):
        ext.on_timer(due)

    @ext.command("hello", scope="global")
    def hello(ctx: Any, data: Any) -> None: ...

    @ext.on_lifecycle("conversation_forked")
    def forked(ctx: Any, event: Any) -> None: ...

    assert ext.hooks.single["on_timer"] is due
    assert ext.hooks.commands["hello"] is hello
    assert ext.commands["hello"].scope == "global"
    assert ext.hooks.lifecycle["conversation_forked"] is forked
    with pytest.raises(DefinitionError, match="unknown lifecycle event"):
        ext.on_lifecycle("conversation_exploded")


def test_a_command_declared_in_the_contract_takes_its_handler_later():
    ext = Extension(id="x", version="1", commands={"go": Command(scope="global")})

    @ext.command("go")
    def go(ctx: Any, data: Any) -> None: ...

    assert ext.hooks.commands["go"] is go
    with pytest.raises(DefinitionError, match="declared twice"):
        ext.command("go", scope="conversation")


def test_the_revision_hashes_version_and_contract():
    base = registry.load_one(make_ext("alpha"), "test").revision

    assert registry.load_one(make_ext("alpha"), "test").revision == base
    assert registry.load_one(make_ext("alpha", version="1.0.1"), "test").revision != base
    assert registry.load_one(make_ext("alpha", grants={"state"}), "test").revision != base
    fingerprint = registry.load_one(make_ext("alpha"), "test").fingerprint
    assert len(fingerprint) == 64 and fingerprint != base


def test_duplicate_ids_are_a_startup_error_naming_both_sources():
    with pytest.raises(ExtensionLoadError) as raised:
        registry.load([("package one", make_ext("alpha")), ("package two", make_ext("alpha"))])

    assert (
        str(raised.value)
        == "Extension id 'alpha' is defined twice: by package one and by package two"
    )


def test_an_incompatible_sdk_range_is_refused_naming_both_versions():
    ext = Extension(id="future", version="1", sdk=">=2,<3")

    with pytest.raises(ExtensionLoadError) as raised:
        registry.load([("x", ext)])

    assert str(raised.value) == (
        f"Extension future supports SDK >=2,<3 but this host provides SDK {SDK_VERSION}"
    )


def test_host_extensions_accepts_module_attr_dotted_and_module_paths(settings, monkeypatch):
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [])
    for path in [
        "tests.extensions_host.installed:notes",
        "tests.extensions_host.installed.notes",
        "tests.extensions_host.installed",
    ]:
        settings.HOST_EXTENSIONS = [path]
        registry.reset()
        try:
            assert list(registry.loaded()) == ["notes"], path
        finally:
            registry.reset()


def test_entry_points_are_discovered_and_duplicates_with_settings_are_named(settings, monkeypatch):
    class EntryPoint:
        name = "notes-plugin"
        value = "notes_pkg:extension"

        def load(self) -> Extension:
            return make_ext("notes")

    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: [EntryPoint()])
    settings.HOST_EXTENSIONS = []
    registry.reset()
    try:
        assert list(registry.loaded()) == ["notes"]
        settings.HOST_EXTENSIONS = ["tests.extensions_host.installed:notes"]
        registry.reset()
        with pytest.raises(ExtensionLoadError, match=r"notes-plugin.*HOST_EXTENSIONS"):
            registry.loaded()
    finally:
        registry.reset()
