"""Ambient surfaces: declared keys, first writer owns, set replaces, clear keeps ownership
(spec 04, Ambient surfaces)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from extensions_host.runtime import extension_stop
from extensions_host.surfaces.models import AmbientSurface
from extensions_host.surfaces.selectors import ambient_visible

from .conftest import in_frame
from .exts import captured, make_ext


def panel(key: str = "status", **extra: Any) -> dict[str, Any]:
    return {"key": key, "place": "header", **extra}


def ext(ext_id: str = "amb") -> Any:
    return make_ext(ext_id, grants={"attention"}, ambient_kinds=("status", "progress"))


def test_set_replaces_the_whole_surface(install, conversation):
    install(ext())
    conversation("c1")
    first = panel(body=["step 1"], details={"eta": 5}, max_rows=3, overflow="wrap")
    assert in_frame("amb", lambda ctx: ctx.set_ambient("c1", first)).ok

    assert in_frame("amb", lambda ctx: ctx.set_ambient("c1", panel(body=["step 2"]))).ok

    (surface,) = ambient_visible(conversation_id="c1")
    assert surface["body"] == ["step 2"]
    assert surface["details"] is None  # replaced, not merged
    assert (surface["max_rows"], surface["overflow"]) == (None, "drop")


def test_the_first_writer_owns_the_key_and_another_extension_gets_a_conflict(install, conversation):
    install(ext("amb"), ext("rival"))
    conversation("c1")
    assert in_frame("amb", lambda ctx: ctx.set_ambient("c1", panel(body="mine"))).ok

    error = in_frame("rival", captured(lambda ctx: ctx.set_ambient("c1", panel(body="x")))).value

    assert error.kind == "conflict"
    assert ambient_visible(conversation_id="c1")[0]["body"] == "mine"
    # the key is per conversation: the rival may own it elsewhere
    conversation("c2")
    assert in_frame("rival", lambda ctx: ctx.set_ambient("c2", panel(body="x"))).ok


def test_clear_empties_the_surface_and_keeps_ownership(install, conversation):
    install(ext("amb"), ext("rival"))
    conversation("c1")
    assert in_frame("amb", lambda ctx: ctx.set_ambient("c1", panel(body="mine"))).ok

    assert in_frame("amb", lambda ctx: ctx.clear_ambient("c1", "status")).ok

    assert ambient_visible(conversation_id="c1") == []
    stored = AmbientSurface.objects.get()
    assert (stored.extension_id, stored.cleared, stored.body) == ("amb", True, None)
    error = in_frame("rival", captured(lambda ctx: ctx.set_ambient("c1", panel()))).value
    assert error.kind == "conflict"
    assert in_frame("amb", lambda ctx: ctx.set_ambient("c1", panel(body="back"))).ok
    assert ambient_visible(conversation_id="c1")[0]["body"] == "back"


def test_writing_an_undeclared_key_is_a_bound_error(install, conversation):
    install(ext())
    conversation("c1")

    error = in_frame("amb", captured(lambda ctx: ctx.set_ambient("c1", panel("weather")))).value

    assert (error.kind, error.message) == ("bound", "Ambient key is not declared")
    assert not AmbientSurface.objects.exists()


@pytest.mark.parametrize(
    "bad",
    [
        panel(place="middle"),
        panel(overflow="scroll"),
        panel(max_rows=0),
        panel(refresh_ms=-1),
        panel(colour="red"),
        panel(body="x" * 40_000),
        {"place": "header"},
    ],
)
def test_an_invalid_surface_is_a_bound_error(install, conversation, bad):
    install(ext())
    conversation("c1")

    error = in_frame("amb", captured(lambda ctx: ctx.set_ambient("c1", bad))).value

    assert error.kind == "bound"
    assert not AmbientSurface.objects.exists()


def test_body_and_details_together_are_bounded_at_32_kib_of_json_whatever_the_key(
    install, conversation
):
    key = "k" * 64
    install(make_ext("amb", grants={"attention"}, ambient_kinds=(key,)))
    conversation("c1")
    details = {"eta": 5}  # {"eta":5}: 9 bytes of compact JSON
    body = "x" * (32 * 1024 - 9 - 2)  # with its quotes: the rest of the 32 KiB
    assert sum(len(json.dumps(v, separators=(",", ":"))) for v in (body, details)) == 32 * 1024

    at_bound = in_frame("amb", captured(lambda ctx: ctx.ambient.set("c1", panel(key, body=body))))
    both = panel(key, body=body, details=details)
    together = in_frame("amb", captured(lambda ctx: ctx.ambient.set("c1", both)))
    over = panel(key, body=body + "x", details=details)
    one_more = in_frame("amb", captured(lambda ctx: ctx.ambient.set("c1", over)))

    assert (at_bound.value, together.value) == (None, None)
    assert (one_more.value.kind, one_more.value.message) == ("bound", "Ambient surface is invalid")
    assert AmbientSurface.objects.get().details == details


def test_a_stopped_extensions_surfaces_are_hidden(install, conversation):
    install(ext())
    conversation("c1")
    assert in_frame("amb", lambda ctx: ctx.ambient.set("c1", panel(body="on"))).ok

    extension_stop(extension_id="amb", hook="test", reason="stopped by the test")

    assert ambient_visible(conversation_id="c1") == []


def test_the_conversation_view_shows_ambient_surfaces(install, conversation, api, owner):
    install(ext())
    conversation("c1")
    assert in_frame("amb", lambda ctx: ctx.set_ambient("c1", panel(body=["a", "b"]))).ok

    view = api(owner).get("/v1/conversations/c1").json()

    assert [(s["key"], s["body"]) for s in view["ambient"]] == [("status", ["a", "b"])]
