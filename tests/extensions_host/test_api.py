"""The projection endpoint and the roster endpoints (spec 04 projection, spec 07)."""

from __future__ import annotations

from typing import Any

import pytest

from core.models import AuditEntry
from extensions_host import registry
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import pages
from extensions_host.sdk import CatalogEntry

from .conftest import fire_timer, roster
from .exts import AddInput, AddOutput, Board, Item, add_command, count_items, make_ext


def failing(ctx: Any, timer: Any) -> None:
    raise RuntimeError("boom")


def board_ext(ext_id: str = "board", **kw: Any):
    commands = {
        "add": ({"scope": "conversation", "input": AddInput, "output": AddOutput}, add_command),
        "clear": (
            {"scope": "conversation", "description": "Clear the board"},
            lambda ctx, cid, data: None,
        ),
    }
    kw.setdefault("project", count_items)
    return make_ext(ext_id, commands=commands, **kw)


def projection(client: Any, cid: str = "c1") -> Any:
    return client.get(f"/v1/conversations/{cid}/projection")


@pytest.fixture
def seeded(install, conversation, owner, api):
    install(board_ext(), make_ext("quiet", grants={"state"}))
    conversation("c1")
    api(owner).post(
        "/v1/conversations/c1/extensions/board/commands/add", {"key": "a", "n": 1}, format="json"
    )
    return owner


def test_a_running_slot_has_revision_value_and_catalog(seeded, api):
    response = projection(api(seeded))

    assert response.status_code == 200
    body = response.json()
    assert body["conversation_id"] == "c1"
    assert body["attention"] == []
    assert list(body["slots"]) == ["board"]  # `quiet` has neither projection nor commands
    slot = body["slots"]["board"]
    assert slot["status"] == "running"
    assert slot["revision"] == registry.get("board").revision
    assert slot["value"] == {"count": 1}
    assert [entry["name"] for entry in slot["catalog"]] == ["add", "clear"]
    assert slot["catalog"][0]["input_schema"]["properties"]["key"]["type"] == "string"
    assert slot["catalog"][1]["description"] == "Clear the board"


def test_project_catalog_adapts_the_catalog_to_the_value(install, conversation, owner, api):
    def adapt(value: Board, catalog: list[CatalogEntry]) -> list[CatalogEntry]:
        return [entry for entry in catalog if value.count or entry.name != "clear"]

    install(board_ext(project_catalog=adapt))
    conversation("c1")

    slot = projection(api(owner)).json()["slots"]["board"]

    assert slot["value"] == {"count": 0}
    assert [entry["name"] for entry in slot["catalog"]] == ["add"]


def test_a_stopped_extension_has_a_stopped_slot_with_its_reason(install, conversation, owner, api):
    install(board_ext(on_timer=failing))
    conversation("c1")
    fire_timer("board")

    slot = projection(api(owner)).json()["slots"]["board"]

    assert slot == {
        "status": "stopped",
        "revision": roster("board").revision,
        "reason": "on_timer defect: boom",
    }


def test_a_write_in_project_stops_that_slot_only_in_the_same_response(
    install, conversation, owner, api
):
    def writes(ctx: Any, conversation_id: str) -> Board:
        ctx.collection("item").put(Item(key="sneaky"))
        return Board(count=0)

    install(board_ext("bad", project=writes), board_ext("good"))
    conversation("c1")

    slots = projection(api(owner)).json()["slots"]

    reason = "project defect: Extension write used in a read-only hook"
    assert slots["bad"] == {
        "status": "stopped",
        "revision": registry.get("bad").revision,
        "reason": reason,
    }
    assert slots["good"]["status"] == "running"
    assert roster("bad").status == ExtensionStatus.STOPPED
    assert roster("bad").reason == reason
    assert roster("good").status == ExtensionStatus.RUNNING
    assert not roster("bad").records.exists()


@pytest.mark.parametrize(
    ("project", "reason"),
    [
        (
            lambda ctx, cid: {"count": "many"},
            "project defect: Extension projection is invalid: count: Input should be a valid"
            " integer, unable to parse string as an integer",
        ),
        (lambda ctx, cid: 1 / 0, "project defect: division by zero"),
    ],
)
def test_a_project_hook_that_raises_or_returns_an_invalid_value_stops(
    install, conversation, owner, api, project, reason
):
    install(board_ext(project=project))
    conversation("c1")

    slot = projection(api(owner)).json()["slots"]["board"]

    assert slot["status"] == "stopped"
    assert slot["reason"] == reason
    assert roster("board").reason == reason


def test_an_invalid_catalog_stops_naming_project_catalog(install, conversation, owner, api):
    install(board_ext(project_catalog=lambda value, catalog: [{"name": ""}]))
    conversation("c1")

    slot = projection(api(owner)).json()["slots"]["board"]

    assert slot["reason"] == "project_catalog defect: Extension catalog is invalid"
    assert roster("board").failing_hook == "project_catalog"


def test_a_projection_grant_without_project_hook_stops(install, conversation, owner, api):
    install(make_ext("alpha", grants={"projection"}))
    conversation("c1")

    slot = projection(api(owner)).json()["slots"]["alpha"]

    assert slot["reason"] == "projection: granted capability has no handler"


def test_projection_access_follows_the_conversation(seeded, api, outsider, conversation, owner):
    assert projection(api(outsider)).status_code == 404
    assert projection(api(None)).status_code == 401
    conversation("pub", who=owner, sharing="public")
    assert projection(api(None), "pub").status_code == 200


# --- the roster endpoints ---------------------------------------------------------------------


def test_the_roster_lists_every_extensions_status(seeded, api):
    response = api(seeded).get("/v1/extensions")

    assert response.status_code == 200
    rows = response.json()["results"]
    assert [row["id"] for row in rows] == ["board", "quiet"]
    assert set(rows[0]) == {
        "id",
        "version",
        "revision",
        "status",
        "reason",
        "stopped_at",
        "failing_hook",
        "restart_count",
    }


def test_one_extension_shows_grants_revision_restart_data_and_usage(seeded, api):
    body = api(seeded).get("/v1/extensions/board").json()

    assert body["status"] == "running"
    assert body["revision"] == body["loaded_revision"] == registry.get("board").revision
    assert body["grants"]["admitted"] == sorted(body["grants"]["requested"])
    assert body["grants"]["pending"] == []
    assert body["usage"]["records"] == 1
    assert body["usage"]["max_records"] == 100_000
    assert body["usage"]["max_bytes"] == 256 * 1024 * 1024
    assert body["restart_count"] == 0
    assert body["next_auto_resume_at"] is None
    assert api(seeded).get("/v1/extensions/ghost").status_code == 404


def test_auto_resume_shows_what_a_stop_would_get_and_why(install, api, owner, settings):
    """The chaos example declares `auto_resume=False`: staff's switch (on by default) does not
    make it auto-resume, and the detail must not say it does."""
    install(make_ext("faulty", auto_resume=False), make_ext("steady"))
    faulty = api(owner).get("/v1/extensions/faulty").json()
    assert (
        faulty["auto_resume"],
        faulty["auto_resume_declared"],
        faulty["auto_resume_staff"],
    ) == (False, False, True)
    assert api(owner).get("/v1/extensions/steady").json()["auto_resume"] is True
    RosterEntry.objects.filter(pk="steady").update(auto_resume=False)  # staff turn it off
    steady = api(owner).get("/v1/extensions/steady").json()
    assert (steady["auto_resume"], steady["auto_resume_declared"]) == (False, True)
    RosterEntry.objects.filter(pk="steady").update(auto_resume=True)
    settings.HOST_AUTO_RESUME = False  # the host holds every auto-resume back
    assert api(owner).get("/v1/extensions/steady").json()["auto_resume"] is False


def test_resume_is_admin_only_and_resumes(install, api, owner, staff):
    install(make_ext("alpha", on_timer=failing))
    fire_timer("alpha")

    assert api(owner).post("/v1/extensions/alpha/resume").status_code == 403
    assert api(None).post("/v1/extensions/alpha/resume").status_code == 401
    response = api(staff).post("/v1/extensions/alpha/resume")

    assert response.status_code == 200
    assert response.json()["status"] == "running"
    assert response.json()["last_error"] == "on_timer defect: boom"
    assert roster("alpha").status == ExtensionStatus.RUNNING
    assert api(staff).post("/v1/extensions/ghost/resume").status_code == 404
    assert (
        api(staff).post("/v1/extensions/alpha/resume", {"x": 1}, format="json").status_code == 400
    )


def test_resuming_an_uninstalled_extension_is_a_409_and_changes_nothing(install, api, staff):
    alpha = make_ext("alpha", on_timer=failing)
    install(alpha, make_ext("beta"))
    fire_timer("alpha")  # stopped, then uninstalled: its stop is kept for a reinstall
    install(make_ext("beta"))
    before = roster("alpha")
    assert before.status == ExtensionStatus.UNINSTALLED

    response = api(staff).post("/v1/extensions/alpha/resume")

    assert response.status_code == 409
    assert response.json()["error"] == {
        "category": "contract",
        "cause": "conflict",
        "message": "Extension is uninstalled",
    }
    after = roster("alpha")
    assert (after.status, after.reason, after.stopped_at, after.activation_epoch) == (
        ExtensionStatus.UNINSTALLED,
        before.reason,
        before.stopped_at,
        before.activation_epoch,
    )
    assert after.updated_at == before.updated_at
    assert not AuditEntry.objects.filter(action="extension_resumed").exists()


class PageClock:
    """The monotonic clock of frame pages, advanced by the hooks instead of by sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_projection_hooks_share_one_page_and_a_slot_without_time_left_is_not_stopped(
    install, conversation, owner, api, settings, monkeypatch
):
    settings.HOST_HOOK_DEADLINE_REQUEST_MS = 1_000  # the page has 2 s; each hook needs 1 s
    clock = PageClock()
    monkeypatch.setattr(pages, "time", clock)
    calls: list[str] = []

    def slow(ext_id: str) -> Any:
        def project(ctx: Any, conversation_id: str) -> Board:
            calls.append(ext_id)
            clock.now += 0.6
            return Board(count=1)

        return project

    install(
        board_ext("a1", project=slow("a1")),
        board_ext("a2", project=slow("a2")),
        board_ext("c3", project=slow("c3")),
    )
    conversation("c1")

    slots = projection(api(owner)).json()["slots"]

    assert calls == ["a1", "a2"]  # after 1.2 s, less than c3's 1 s deadline was left
    assert slots["a1"]["value"] == slots["a2"]["value"] == {"count": 1}
    assert slots["c3"]["status"] == "running"
    assert slots["c3"]["value"] is None
    assert [e["name"] for e in slots["c3"]["catalog"]] == ["add", "clear"]
    assert roster("c3").status == ExtensionStatus.RUNNING


def test_a_projection_hook_with_a_deadline_longer_than_the_page_runs_first(
    install, conversation, owner, api, settings, monkeypatch
):
    # an extension given 30 s (past the page's 2 s) still projects: the page lasts its
    # deadline, and it goes first so the others start with whatever time it leaves
    settings.HOST_HOOK_DEADLINE_REQUEST_MS = 1_000
    clock = PageClock()
    monkeypatch.setattr(pages, "time", clock)
    calls: list[str] = []

    def tracked(ext_id: str, takes: float) -> Any:
        def project(ctx: Any, conversation_id: str) -> Board:
            calls.append(ext_id)
            clock.now += takes
            return Board(count=3)

        return project

    install(
        board_ext("a1", project=tracked("a1", 0.5)),
        board_ext("c3", project=tracked("c3", 0.5)),
        board_ext("z9", project=tracked("z9", 27.0), deadline_s=30),
    )
    RosterEntry.objects.filter(pk="c3").update(deadline_seconds=2)  # staff: 2 s for c3
    conversation("c1")

    slots = projection(api(owner)).json()["slots"]

    # z9 (30 s) first, then c3 (2 s, staff's override) in the 3 s it left, then a1 (1 s)
    assert calls == ["z9", "c3", "a1"]
    assert slots["z9"]["value"] == slots["c3"]["value"] == slots["a1"]["value"] == {"count": 3}
    assert list(slots) == ["a1", "c3", "z9"]  # shown by id, whatever order they ran in


def test_a_failing_projection_hook_runs_once_and_the_others_still_project(
    install, conversation, owner, api
):
    calls: list[str] = []

    def tracked(ext_id: str, fail: bool = False) -> Any:
        def project(ctx: Any, conversation_id: str) -> Board:
            calls.append(ext_id)
            if fail:
                raise RuntimeError("no")
            return Board(count=2)

        return project

    install(
        board_ext("a1", project=tracked("a1")),
        board_ext("b2", project=tracked("b2", fail=True)),
        board_ext("c3", project=tracked("c3")),
    )
    conversation("c1")

    slots = projection(api(owner)).json()["slots"]

    assert calls.count("b2") == 1  # the page ran again without calling it a second time
    assert slots["b2"]["status"] == "stopped"
    assert slots["b2"]["reason"] == "project defect: no"
    assert slots["a1"]["value"] == slots["c3"]["value"] == {"count": 2}
    assert roster("a1").status == roster("c3").status == ExtensionStatus.RUNNING


def test_the_schema_declares_the_detail_settled_and_timers_sections():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    detail = components["ExtensionDetail"]["properties"]

    def section(name: str) -> dict[str, Any]:
        ref = next(item["$ref"] for item in detail[name]["allOf"])
        assert detail[name]["nullable"] is True  # null without the grant
        return components[ref.rsplit("/", 1)[-1]]

    settled = section("settled")
    assert set(settled["properties"]) == {"cursor", "core_cursor", "lag"}
    assert settled["properties"]["lag"]["nullable"] is True
    timers = section("timers")
    assert set(timers["properties"]) == {"pending", "due", "oldest_due_age_ms", "max_timers"}
    assert timers["properties"]["oldest_due_age_ms"]["nullable"] is True


def test_the_detail_sections_are_what_the_schema_declares(seeded, api):
    body = api(seeded).get("/v1/extensions/board").json()
    assert set(body["settled"]) == {"cursor", "core_cursor", "lag"}
    assert body["settled"]["lag"] == body["settled"]["core_cursor"] - body["settled"]["cursor"]
    assert body["timers"] == {
        "pending": 0,
        "due": 0,
        "oldest_due_age_ms": None,
        "max_timers": 10_000,
    }
    quiet = api(seeded).get("/v1/extensions/quiet").json()
    assert quiet["settled"] is None
    assert quiet["timers"] is None
