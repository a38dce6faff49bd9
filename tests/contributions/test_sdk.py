"""Contribution declarations: what is refused at load, and what stays stable."""

from __future__ import annotations

import pytest

from extensions_host import registry
from extensions_host.sdk import (
    DefinitionError,
    Extension,
    Notifier,
    Provider,
    Route,
    SlashCommand,
    WebUIBundle,
)

from .exts import make_routes_ext


def _noop(*args, **kwargs):
    return None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("fork", "shadows the core command fork"),
        ("help", "shadows the core command help"),
        ("share", "shadows the core command share"),
        ("Bad_Name", r"must match \^\[a-z\]\[a-z0-9-\]\*\$"),
        ("9lives", "must match"),
        ("with space", "must match"),
    ],
)
def test_a_slash_command_with_a_reserved_or_bad_name_is_refused_with_a_clear_error(name, message):
    with pytest.raises(DefinitionError, match=message):
        SlashCommand(name, run=_noop)


def test_an_extension_module_shadowing_fork_fails_to_load_naming_the_command(settings):
    settings.HOST_EXTENSIONS = ["tests.contributions.bad_slash:bad"]
    registry.reset()
    try:
        with pytest.raises(DefinitionError, match="'fork' shadows the core command fork"):
            registry.loaded()
    finally:
        registry.reset()


def test_two_extensions_declaring_one_slash_name_fail_to_load_naming_both():
    def ext(ext_id):
        return Extension(
            id=ext_id,
            version="1",
            grants={"commands"},
            slash_commands=[SlashCommand("todo", run=_noop)],
        )

    with pytest.raises(registry.ExtensionLoadError, match="by extension a and by extension b"):
        registry.load([("t", ext("a")), ("t", ext("b"))])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"method": "TRACE"}, "method must be one of"),
        ({"path": "../escape"}, "no '..'"),
        ({"path": "/abs"}, "relative path"),
        ({"path": "a//b"}, "relative path"),
        ({"auth": "root"}, "auth must be"),
        ({"body_limit": 64 * 1024 * 1024}, "body_limit"),
        ({"body_limit": -1}, "body_limit"),
    ],
)
def test_impossible_routes_are_refused_at_import(kwargs, message):
    fields = {"method": "GET", "path": "ok", "handler": _noop} | kwargs
    with pytest.raises(DefinitionError, match=message):
        Route(**fields)


def test_a_contribution_without_its_grant_is_refused_naming_the_grant():
    with pytest.raises(DefinitionError, match="declares routes but does not request the routes"):
        Extension(id="x", version="1", routes=[Route("GET", "a", _noop)])
    with pytest.raises(DefinitionError, match="does not request the notify grant"):
        Extension(id="x", version="1", notifiers=[Notifier("push", _noop)])
    with pytest.raises(DefinitionError, match="does not request the providers grant"):
        Extension(id="x", version="1", providers=[Provider("p")])
    ext = Extension(id="x", version="1")
    with pytest.raises(DefinitionError, match="does not request the commands grant"):
        ext.slash("todo")(_noop)


def test_duplicate_contributions_are_refused():
    with pytest.raises(DefinitionError, match="declared twice"):
        Extension(
            id="x",
            version="1",
            grants={"routes"},
            routes=[Route("GET", "a", _noop), Route("GET", "a", _noop)],
        )


def test_decorators_declare_routes_slash_commands_and_notifiers():
    ext = Extension(id="deco", version="1", grants={"routes", "commands", "notify"})
    ext.route("POST", "in", auth="public", body_limit=10)(_noop)
    ext.slash("note", description="Take a note")(_noop)
    ext.notifier("push")(_noop)
    contributions = ext.contributions
    assert [(r.method, r.path, r.auth, r.body_limit) for r in contributions.routes] == [
        ("POST", "in", "public", 10)
    ]
    assert [c.name for c in contributions.slash_commands] == ["note"]
    assert [n.name for n in contributions.notifiers] == ["push"]


def test_an_extension_without_contributions_keeps_its_revision_and_contributions_change_it():
    plain = registry.load_one(Extension(id="same", version="1", grants={"routes"}), "t")
    again = registry.load_one(Extension(id="same", version="1", grants={"routes"}), "t")
    assert plain.revision == again.revision
    assert "routes" not in plain.contract
    with_routes = registry.load_one(make_routes_ext("same"), "t")
    assert with_routes.revision != plain.revision


def test_a_contributor_only_extension_is_identified_by_name():
    ext = Extension(name="ui-only", webui_bundles=[WebUIBundle("ui", "webui")])
    assert ext.id == "ui-only"
    assert ext.contributor_only


def test_a_contributor_only_extension_with_hooks_is_a_load_error():
    ext = Extension(name="confused", webui_bundles=[WebUIBundle("ui2", "webui")])
    ext.activate(_noop)
    with pytest.raises(registry.ExtensionLoadError, match="contributor-only"):
        registry.load([("t", ext)])


def test_bad_bundle_and_provider_names_are_refused():
    with pytest.raises(DefinitionError, match="Web UI bundle name"):
        WebUIBundle("Bad Name", "webui")
    with pytest.raises(DefinitionError, match="Provider name"):
        Provider("Bad Name")
