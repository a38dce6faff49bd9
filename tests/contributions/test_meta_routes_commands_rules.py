"""Rules of `/v1/meta`, providers, skills, web UI bundles, the user directory, extension routes
and extension commands that a mutation sweep found unprotected."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from pydantic import BaseModel

from core.auth import SERVICE_USERNAME, user_principal
from core.errors import HostError
from core.models import AuditEntry
from extensions_host import registry
from extensions_host.contributions.models import NotifierHealth
from extensions_host.contributions.services.bundles import bundles_list
from extensions_host.contributions.services.meta import extension_health, meta_build
from extensions_host.contributions.services.providers import providers_catalog, providers_readiness
from extensions_host.contributions.services.routes import routes_list
from extensions_host.contributions.services.skills import skills_list
from extensions_host.contributions.services.users import DIRECTORY_MAX, user_delete, users_list
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.sdk import SDK_VERSION, Extension, Provider, Retry, Route, WebUIBundle
from extensions_host.services import commands as command_service
from extensions_host.services.commands import command_catalog

from .exts import make_bundle_ext, make_notifier_ext, make_provider_ext, make_routes_ext


def health_of(body: dict[str, Any]) -> dict[str, Any]:
    return {item["id"]: item["health"] for item in body["extensions"]}


def probed(ext_id: str, result: Any, calls: list[str] | None = None) -> Extension:
    """An extension whose `health()` hook returns (or raises) `result`, noting each call."""
    ext = Extension(id=ext_id, version="1")

    def health(ctx: Any) -> Any:
        if calls is not None:
            calls.append(ext_id)
        if isinstance(result, Exception):
            raise result
        return result

    ext.health(health)
    return ext


def notifier_ext(ext_id: str, *, health: Any = None) -> Extension:
    """A `push` notifier extension, with a `health()` hook returning `health` if given."""
    ext = make_notifier_ext(ext_id, notify=lambda ctx, event: None)
    if health is not None:
        ext.health(lambda ctx: health)
    return ext


def notifier_state(ext_id: str, status: str, last_error: str = "") -> None:
    NotifierHealth.objects.create(
        extension_id=ext_id, notifier="push", status=status, last_error=last_error
    )


# --- /v1/meta -------------------------------------------------------------------------------


def test_an_uninstalled_extension_reads_ok_uninstalled_without_running_its_health_hook(install):
    """An uninstalled extension is `ok` with the detail `uninstalled`; its code may still be
    loaded, but its `health()` hook is not run and it does not degrade the host."""
    calls: list[str] = []
    install(probed("gone", {"status": "degraded", "detail": "queue is long"}, calls))
    RosterEntry.objects.filter(pk="gone").update(status=ExtensionStatus.UNINSTALLED)

    body = meta_build()

    assert health_of(body) == {"gone": {"status": "ok", "detail": "uninstalled"}}
    assert body["health"] == {"status": "ok"}
    assert calls == []


def test_an_extension_stopped_after_its_roster_row_was_read_reads_degraded_with_the_reason(
    install,
):
    """The frame of the health hook finds the extension stopped meanwhile: it is reported
    degraded with its stop reason, not `ok`."""
    calls: list[str] = []
    install(probed("late", {"status": "ok"}, calls))
    row = RosterEntry.objects.get(pk="late")  # read while it was running
    RosterEntry.objects.filter(pk="late").update(status=ExtensionStatus.STOPPED, reason="halted")

    assert extension_health(row, []) == {"status": "degraded", "detail": "stopped: halted"}
    assert calls == []


def test_a_health_hook_asking_to_retry_is_neither_a_stop_nor_reported_as_one(install):
    """`Retry` from `health()` is not a defect: the extension keeps running and its health is
    not reported as stopped."""
    install(probed("busy", Retry(5, "upstream busy")))

    body = meta_build()

    assert health_of(body) == {"busy": {"status": "ok"}}
    assert RosterEntry.objects.get(pk="busy").status == ExtensionStatus.RUNNING


def test_a_degraded_notifier_degrades_its_own_extension_only_and_a_healthy_one_none(install):
    """Notifier health joins the extension that owns the notifier, and only a degraded one
    counts (with its last error)."""
    install(notifier_ext("loud"), notifier_ext("quiet"))
    notifier_state("loud", NotifierHealth.Status.DEGRADED, "HTTP 500")
    notifier_state("quiet", NotifierHealth.Status.OK)

    body = meta_build()

    assert health_of(body) == {
        "loud": {"status": "degraded", "detail": "notifier push degraded: HTTP 500"},
        "quiet": {"status": "ok"},
    }
    assert body["health"] == {"status": "degraded"}


def test_a_health_hooks_own_detail_comes_first_then_the_notifier_problems(install):
    """The hook's own detail is kept, ahead of the notifier problems, joined by `; `."""
    install(notifier_ext("both", health={"status": "degraded", "detail": "queue is long"}))
    notifier_state("both", NotifierHealth.Status.DEGRADED, "HTTP 500")

    assert health_of(meta_build()) == {
        "both": {
            "status": "degraded",
            "detail": "queue is long; notifier push degraded: HTTP 500",
        }
    }


def test_meta_lists_each_extensions_version_and_stop_reason_and_the_sdk_version(
    install, api, member
):
    """Each roster entry shows its version and the reason it stopped; the host shows the SDK
    version it provides."""
    install(Extension(id="old", version="2.3.4"), Extension(id="new", version="0.9.1"))
    RosterEntry.objects.filter(pk="old").update(status=ExtensionStatus.STOPPED, reason="halted")

    body = api(member).get("/v1/meta").json()

    assert body["sdk_version"] == SDK_VERSION
    assert {e["id"]: (e["version"], e["status"], e["reason"]) for e in body["extensions"]} == {
        "new": ("0.9.1", "running", ""),
        "old": ("2.3.4", "stopped", "halted"),
    }


@pytest.mark.skipif(
    not apps.is_installed("extensions_host.background"), reason="needs the background app"
)
def test_meta_lists_declared_workers_and_jobs_and_says_the_background_app_answers(
    install, api, member
):
    """With the background app installed, its declared workers and jobs are listed, and both
    `background_available` and the lag figures' `available` say the figures are real."""
    from extensions_host.background.declarations import Job, Worker, add_job, add_worker

    ext = Extension(id="bg", version="1", grants={"timers", "lifecycle", "state"})
    add_worker(ext, Worker("idle", wake_on=["conversation_idle"], run=lambda ctx, wake: None))
    add_job(ext, Job("tick", every_seconds=60, action=lambda ctx, run: None))
    install(ext)

    body = api(member).get("/v1/meta").json()

    assert [(w["extension_id"], w["name"]) for w in body["workers"]] == [("bg", "idle")]
    assert [(j["extension_id"], j["name"]) for j in body["jobs"]] == [("bg", "tick")]
    assert body["background_available"] is True
    assert body["lag"]["available"] is True


# --- providers ------------------------------------------------------------------------------


def test_providers_and_collisions_are_listed_by_name_with_their_models_and_defaults(
    install, settings
):
    """The catalog lists each provider (the winner's models and proposed default) and each
    collision in name order, whatever order the extensions declared them in."""
    settings.HOST_DEFAULT_MODEL = ""
    install(
        make_provider_ext("a", providers=[Provider("zeta", ["z1"]), Provider("alpha", ["a1"])]),
        make_provider_ext(
            "b",
            providers=[
                Provider("zeta", ["z2", "z3"], default_model="zeta/z3"),
                Provider("alpha", ["a2"]),
            ],
        ),
    )

    catalog = providers_catalog()

    assert catalog["providers"] == [
        {"name": "alpha", "extension_id": "b", "models": ["a2"], "default_model": None},
        {"name": "zeta", "extension_id": "b", "models": ["z2", "z3"], "default_model": "zeta/z3"},
    ]
    assert catalog["collisions"] == [
        {"name": "alpha", "extensions": ["a", "b"], "winner": "b"},
        {"name": "zeta", "extensions": ["a", "b"], "winner": "b"},
    ]


def no_key_file() -> Any:
    raise RuntimeError("no key file")


@pytest.mark.parametrize(
    ("readiness", "reason"),
    [
        (no_key_file, "readiness keys defect: no key file"),
        (
            lambda: {"status": "great"},
            "readiness keys defect: Provider readiness result is invalid",
        ),
    ],
    ids=["raises", "invalid"],
)
def test_a_readiness_tracker_that_raises_or_answers_nonsense_is_a_defect_reported_degraded(
    install, readiness, reason
):
    """The provider reads `degraded` with the stop reason as its detail, and the extension is
    stopped by its `readiness <provider>` hook."""
    install(make_provider_ext("vault", providers=[Provider("keys", readiness=readiness)]))

    [reported] = providers_readiness()

    assert reported == {
        "name": "keys",
        "extension_id": "vault",
        "readiness": {"status": "degraded", "detail": reason},
    }
    row = RosterEntry.objects.get(pk="vault")
    assert (row.status, row.reason, row.failing_hook) == (
        ExtensionStatus.STOPPED,
        reason,
        "readiness keys",
    )


# --- skills ---------------------------------------------------------------------------------


@pytest.fixture
def skill_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`skill_package({dir: SKILL.md text})`: an extension `pkgskills` whose package is a fresh
    directory holding those skill directories."""

    def make(manifests: dict[str, str]) -> Extension:
        for directory, text in manifests.items():
            (tmp_path / directory).mkdir()
            (tmp_path / directory / "SKILL.md").write_text(text, encoding="utf-8")
        module = types.ModuleType("pkgskills_module")
        module.__file__ = str(tmp_path / "extension.py")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        ext = Extension(id="pkgskills", version="1.0.0", skills=list(manifests))
        ext.module_name = module.__name__
        return ext

    return make


def front(**fields: str) -> str:
    return (
        "---\n" + "".join(f"{key}: {value}\n" for key, value in fields.items()) + "---\n# Skill\n"
    )


def listed(install: Any, ext: Extension) -> list[tuple[str, str]]:
    install(ext)
    return [(s["name"], s["description"]) for s in skills_list() if s["extension_id"] == ext.id]


def test_a_skill_is_named_by_its_front_matter_before_its_directory(install, skill_package):
    """`name` in the front matter names the skill; without it, the directory does (also when
    the front matter is not a mapping)."""
    ext = skill_package(
        {
            "one": front(name="renamed", description="Renamed skill"),
            "two": front(description="Unnamed skill"),
            "three": "---\n- a\n- list\n---\nbody\n",
        }
    )

    assert listed(install, ext) == [
        ("renamed", "Renamed skill"),
        ("two", "Unnamed skill"),
        ("three", ""),
    ]


def test_a_description_is_kept_up_to_1024_characters_and_may_hold_dashes(install, skill_package):
    """A longer description is cut at 1024 characters; `---` inside a value does not close the
    front matter (only a line starting with it does)."""
    ext = skill_package(
        {"long": front(description="x" * 1030), "dashes": front(description="before---after")}
    )

    assert listed(install, ext) == [("long", "x" * 1024), ("dashes", "before---after")]


@pytest.mark.parametrize("length", [1, 64])
def test_a_skill_name_of_1_to_64_characters_is_accepted(install, skill_package, length):
    """The name pattern allows 1..64 characters."""
    name = "s" * length

    assert listed(install, skill_package({"dir": front(name=name)})) == [(name, "")]


@pytest.mark.parametrize(
    ("manifests", "message"),
    [
        ({"dir": front(name="s" * 65)}, "skill name '" + "s" * 65 + "' must match"),
        ({"dir": front(name="has space")}, "skill name 'has space' must match"),
        ({"dir": front(name="-dash")}, "skill name '-dash' must match"),
        ({"a": front(name="same"), "b": front(name="same")}, "skill 'same' is twice"),
        ({"dir": "---\nname: open\n# never closed\n"}, "dir/SKILL.md front matter is not closed"),
        ({"dir": "---\nname: [unclosed\n---\n"}, "dir/SKILL.md front matter is invalid"),
        (
            {"dir": "---\ndescription: " + "y" * (16 * 1024) + "\n---\n"},
            "dir/SKILL.md front matter is not closed",
        ),
    ],
    ids=["65-chars", "space", "leading-dash", "twice", "unclosed", "invalid-yaml", "over-16-KiB"],
)
def test_a_skill_with_a_bad_name_or_front_matter_is_refused_at_load(
    skill_package, manifests, message
):
    """Skill names follow the pattern and are unique per extension; the front matter is closed
    within its first 16 KiB and is valid YAML."""
    ext = skill_package(manifests)

    with pytest.raises(registry.ExtensionLoadError, match=f"Extension pkgskills: {message}"):
        registry.load([("t", ext)])


def test_a_skill_url_has_one_slash_after_a_public_url_ending_in_one(
    install, skill_package, settings
):
    """`HOST_PUBLIC_URL` may end with `/`: the skill url does not double it."""
    settings.HOST_PUBLIC_URL = "https://hyphae.example/base/"
    install(skill_package({"dir": front(name="tidy")}))

    assert [s["url"] for s in skills_list()] == [
        "https://hyphae.example/base/v1/skills/pkgskills/tidy/"
    ]


# --- the user directory and user deletion ---------------------------------------------------


def test_the_directory_shows_a_users_name_email_admin_and_active_flags(make_user):
    """A user's full name (else the username), email, whether staff or superuser, and whether
    active."""
    make_user("ann", first_name="Ann", last_name="Lee", email="ann@example.org", is_staff=True)
    make_user("bob", is_active=False)
    make_user("root", is_superuser=True)

    assert users_list() == [
        {
            "username": "ann",
            "name": "Ann Lee",
            "email": "ann@example.org",
            "admin": True,
            "active": True,
        },
        {"username": "bob", "name": "bob", "email": "", "admin": False, "active": False},
        {"username": "root", "name": "root", "email": "", "admin": True, "active": True},
    ]


def test_the_directory_lists_at_least_one_and_at_most_1000_users(db):
    """The limit is clamped to 1..`DIRECTORY_MAX` (1000)."""
    User = get_user_model()
    User.objects.bulk_create(User(username=f"u{n:04}") for n in range(DIRECTORY_MAX + 1))

    assert [u["username"] for u in users_list(limit=0)] == ["u0000"]
    assert len(users_list(limit=5000)) == DIRECTORY_MAX == 1000


@pytest.mark.parametrize("missing", ["user", "transfer_to"])
def test_deleting_with_a_user_or_target_that_does_not_exist_is_404(owner, missing):
    """An unknown user or transfer target is `store/not_found`, and nobody is deleted."""
    nobody = owner.pk + 1000
    user_id, target_id = (nobody, owner.pk) if missing == "user" else (owner.pk, nobody)

    with pytest.raises(HostError) as refused:
        user_delete(user_id=user_id, transfer_to_id=target_id, actor="staff")

    assert (refused.value.category, refused.value.cause, refused.value.status) == (
        "store",
        "not_found",
        404,
    )
    assert get_user_model().objects.filter(pk=owner.pk).exists()


def test_transferring_to_the_user_being_deleted_names_the_transfer_to_field(owner):
    """The refusal carries the field it is about, as the other transfer refusals do."""
    with pytest.raises(HostError) as refused:
        user_delete(user_id=owner.pk, transfer_to_id=owner.pk, actor="staff")

    assert refused.value.details == {
        "transfer_to": ["Ownership cannot be transferred to the user being deleted"]
    }


def test_the_audit_of_a_deletion_records_what_moved(owner, member, conversation):
    """The audit entry holds the target and the counts; `other` only when some other
    reference moved (none does here)."""
    conversation("c1", who=owner)

    user_delete(user_id=owner.pk, transfer_to_id=member.pk, actor="staff")

    assert AuditEntry.objects.get(action="user_deleted").detail == {
        "transfer_to": "member",
        "conversations": 1,
        "tokens_revoked": 0,
    }


# --- web UI bundles -------------------------------------------------------------------------


def bundles_ext(ext_id: str, *names: str) -> Extension:
    """An extension contributing bundles `names`, all served from `webui/`."""
    return Extension(
        id=ext_id, version="1.0.0", webui_bundles=[WebUIBundle(name, "webui") for name in names]
    )


def test_the_selected_bundle_is_marked_selected_in_the_listing(install, settings):
    """`HOST_WEBUI_BUNDLE` names the bundle listed as `selected`; the others are not."""
    settings.HOST_WEBUI_BUNDLE = "testui"
    install(make_bundle_ext(), bundles_ext("other", "spare"))

    assert sorted((b["name"], b["selected"]) for b in bundles_list()) == [
        ("spare", False),
        ("testui", True),
    ]


@pytest.mark.parametrize(
    ("selection", "definitions", "message"),
    [
        ("", [make_bundle_ext("noindex", "skills")], "web UI bundle noindex has no index.html"),
        (
            "",
            [bundles_ext("first", "shared"), bundles_ext("second", "shared")],
            "Web UI bundle 'shared' is contributed twice: by first and by second",
        ),
        ("nope", [], r"HOST_WEBUI_BUNDLE 'nope' .* \(available: none\)"),
        ("nope", [bundles_ext("many", "zz", "aa")], r"\(available: aa, zz\)"),
    ],
    ids=["no-index", "twice", "none-available", "available-sorted"],
)
def test_a_bundle_without_index_a_name_twice_or_an_unknown_selection_is_a_load_error(
    settings, selection, definitions, message
):
    """A bundle directory holds `index.html`, a bundle name is contributed once, and an unknown
    selection names what is available (sorted, or `none`)."""
    settings.HOST_WEBUI_BUNDLE = selection

    with pytest.raises(registry.ExtensionLoadError, match=message):
        registry.load([(ext.id, ext) for ext in definitions])


# --- extension routes -----------------------------------------------------------------------


def who_calls(ctx: Any, request: Any) -> Any:
    return {"user": ctx.caller.username, "admin": ctx.caller.admin, "service": ctx.caller.service}


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("member", {"user": "member", "admin": False, "service": False}),
        ("staff", {"user": "staff", "admin": True, "service": False}),
        ("service", {"user": SERVICE_USERNAME, "admin": True, "service": True}),
    ],
)
def test_a_route_handler_sees_whether_its_caller_is_an_admin_or_the_service(
    install, api, member, staff, who, expected
):
    """The handler's `ctx.caller` carries the principal's admin and service flags."""
    install(make_routes_ext("who", handler=who_calls))
    client = api({"member": member, "staff": staff, "service": "service"}[who])

    response = client.get("/v1/ext/who/me")

    assert (response.status_code, response.json()) == (200, expected)


def test_a_405_lists_the_allowed_methods_sorted(install, api, member):
    """`details.allow` is sorted, whatever order the routes were declared in."""
    install(
        Extension(
            id="hooks",
            version="1.0.0",
            grants={"routes"},
            routes=[
                Route("POST", "hook", handler=who_calls),
                Route("GET", "hook", handler=who_calls),
            ],
        )
    )

    response = api(member).delete("/v1/ext/hooks/hook")

    assert response.status_code == 405
    assert response.json()["error"]["details"] == {"allow": ["GET", "POST"]}


def test_a_stopped_extension_answers_503_before_its_body_limit_is_checked(install, api, member):
    """In the route view, the extension's availability comes before the method's body limit:
    a body over `POST me`'s 16 bytes (within the path's registered limit, which `GET me`
    raises) to a stopped extension is 503, not 413."""
    install(make_routes_ext("stoplim", body_limit=16))
    RosterEntry.objects.filter(pk="stoplim").update(status=ExtensionStatus.STOPPED, reason="halted")

    response = api(member).post("/v1/ext/stoplim/me", b"x" * 17, content_type="text/plain")

    assert response.status_code == 503
    assert response.json()["error"]["message"] == "Extension stoplim is stopped: halted"


def test_a_later_load_with_a_larger_body_limit_accepts_a_body_within_it(install, api, member):
    """The middleware refuses a body by the limit of the extension as loaded now: after a
    load with `upload` at 16 bytes, a load with it at 1024 accepts 100 bytes."""
    install(make_routes_ext("grow", body_limit=16))
    install(make_routes_ext("grow", body_limit=1024))

    response = api(member).post("/v1/ext/grow/upload", b"x" * 100, content_type="text/plain")

    assert response.status_code == 200
    assert response.json()["n"] == 100


def test_routes_list_leaves_out_an_uninstalled_extension_and_goes_on_to_the_next(install):
    """An uninstalled extension's routes are not listed; the extensions after it still are."""
    install(make_routes_ext("aaa"), make_routes_ext("zzz"))
    RosterEntry.objects.filter(pk="aaa").update(status=ExtensionStatus.UNINSTALLED)

    assert {route["extension_id"] for route in routes_list()} == {"zzz"}


# --- extension commands ---------------------------------------------------------------------


class Pair(BaseModel):
    a: int = 0
    b: int = 0


class Echo(BaseModel):
    ran: str


def commands_ext(ext_id: str = "cmds", ran: list[str] | None = None) -> Extension:
    """Global commands `whoami` (the caller's flags), `first`/`second` and `pair` (input
    `{a, b}`), and the conversation command `note`; each handler run is noted in `ran`."""
    ext = Extension(id=ext_id, version="1.0.0", grants={"commands", "state"})

    def noting(name: str) -> Any:
        def handler(ctx: Any, *args: Any) -> dict[str, Any]:  # (data) or (conversation, data)
            if ran is not None:
                ran.append(f"{ext_id}.{name}")
            return {"ran": f"{ext_id}.{name}"}

        return handler

    ext.command("whoami", scope="global")(
        lambda ctx, data: {"admin": ctx.caller.admin, "service": ctx.caller.service}
    )
    ext.command("first", scope="global")(noting("first"))
    ext.command("second", scope="global")(noting("second"))
    ext.command("pair", scope="global", input=Pair)(noting("pair"))
    ext.command("note", scope="conversation")(noting("note"))
    return ext


def command(client: Any, name: str, body: Any, ext: str = "cmds", key: str | None = None) -> Any:
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return client.post(f"/v1/extensions/{ext}/commands/{name}", body, format="json", **headers)


@pytest.mark.parametrize(
    ("who", "expected"),
    [
        ("member", {"admin": False, "service": False}),
        ("staff", {"admin": True, "service": False}),
        ("service", {"admin": True, "service": True}),
    ],
)
def test_a_command_handler_sees_whether_its_caller_is_an_admin_or_the_service(
    install, api, member, staff, who, expected
):
    """The handler's `ctx.caller` carries the principal's admin and service flags."""
    install(commands_ext())
    client = api({"member": member, "staff": staff, "service": "service"}[who])

    response = command(client, "whoami", {})

    assert (response.status_code, response.json()) == (200, expected)


def test_an_idempotency_key_of_exactly_256_characters_is_accepted_and_replays(install, api, member):
    """256 characters is within the bound: the call runs once and its retry replays."""
    ran: list[str] = []
    install(commands_ext(ran=ran))
    client = api(member)

    first = command(client, "first", {}, key="k" * 256)
    again = command(client, "first", {}, key="k" * 256)

    assert (first.status_code, again.status_code) == (200, 200)
    assert again["Idempotent-Replayed"] == "true"
    assert ran == ["cmds.first"]


def test_a_retry_with_the_same_body_in_another_key_order_replays(install, api, member):
    """The request fingerprint is of the canonical body: member order does not matter."""
    ran: list[str] = []
    install(commands_ext(ran=ran))
    client = api(member)

    first = command(client, "pair", {"a": 1, "b": 2}, key="same")
    again = command(client, "pair", {"b": 2, "a": 1}, key="same")

    assert (first.status_code, again.status_code) == (200, 200)
    assert again["Idempotent-Replayed"] == "true"
    assert ran == ["cmds.pair"]


def test_an_idempotency_key_is_remembered_per_extension_and_command(install, api, member):
    """The same key for another command, or for the same command of another extension, is a
    new call: its own handler runs and answers."""
    ran: list[str] = []
    install(commands_ext("cmds", ran), commands_ext("more", ran))
    client = api(member)

    answers = [
        command(client, "first", {}, key="same").json(),
        command(client, "second", {}, key="same").json(),
        command(client, "first", {}, ext="more", key="same").json(),
    ]

    assert answers == [{"ran": "cmds.first"}, {"ran": "cmds.second"}, {"ran": "more.first"}]
    assert ran == ["cmds.first", "cmds.second", "more.first"]


def test_the_command_catalog_is_sorted_by_name_and_kept_per_revision(db):
    """Each entry has its scope, admin-only flag and output schema; a new revision of the
    same extension gets its own catalog, not the cached one."""
    old = Extension(id="catalogued", version="1.0.0", grants={"commands"})
    old.command("zap", scope="conversation", output=Echo, description="Zap it")(
        lambda ctx, cid, data: None
    )
    old.command("add", scope="global", admin_only=True)(lambda ctx, data: None)
    new = Extension(id="catalogued", version="2.0.0", grants={"commands"})
    new.command("only", scope="global")(lambda ctx, data: None)

    catalog = command_catalog(registry.load_one(old, "old"))
    renewed = command_catalog(registry.load_one(new, "new"))

    assert [(e.name, e.scope, e.admin_only, e.description) for e in catalog] == [
        ("add", "global", True, ""),
        ("zap", "conversation", False, "Zap it"),
    ]
    assert catalog[0].output_schema is None
    assert catalog[1].output_schema == Echo.model_json_schema()
    assert [e.name for e in renewed] == ["only"]


def test_a_retry_whose_claim_meets_the_first_calls_committed_key_replays_its_result(
    install, api, member, monkeypatch
):
    """A retry that looked up before the first call committed, then finds its key taken when
    claiming it, answers with the first call's stored result; its handler does not run."""
    ran: list[str] = []
    install(commands_ext(ran=ran))
    client = api(member)
    assert command(client, "first", {}, key="race").status_code == 200
    lookup = command_service._Idempotency.lookup
    missed: list[bool] = []

    def not_committed_yet(self: Any) -> Any:
        if not missed:  # the retry's first lookup: the first call had not committed then
            missed.append(True)
            return None
        return lookup(self)

    monkeypatch.setattr(command_service._Idempotency, "lookup", not_committed_yet)

    again = command(client, "first", {}, key="race")

    assert (again.status_code, again.json()) == (200, {"ran": "cmds.first"})
    assert again["Idempotent-Replayed"] == "true"
    assert ran == ["cmds.first"]


def test_an_extension_stopped_between_the_availability_check_and_the_frame_answers_its_reason(
    install, api, member, monkeypatch
):
    """The command's frame finds the extension stopped meanwhile: the answer is the stopped
    message with its reason, and the handler never runs."""
    from extensions_host.runtime import extension_stop

    ran: list[str] = []
    install(commands_ext(ran=ran))
    available = command_service.extension_available

    def then_stopped(**kwargs: Any) -> Any:
        checked = available(**kwargs)
        extension_stop(extension_id="cmds", hook="test", reason="halted")
        return checked

    monkeypatch.setattr(command_service, "extension_available", then_stopped)

    response = command(api(member), "first", {})

    assert response.status_code == 503
    assert response.json()["error"]["message"] == "Extension cmds is stopped: halted"
    assert ran == []


def test_the_command_service_itself_refuses_a_reader_of_a_conversation_it_cannot_write(
    install, owner, member, conversation
):
    """`command_call` (also what the author harness calls) checks write access to the
    conversation, not only the API view: a member who may read it gets 403."""
    ran: list[str] = []
    install(commands_ext(ran=ran))
    conversation("shared", who=owner, sharing="users")

    with pytest.raises(HostError) as refused:
        command_service.command_call(
            principal=user_principal(member, "token"),
            extension_id="cmds",
            name="note",
            scope="conversation",
            conversation_id="shared",
            body={},
        )

    assert (refused.value.category, refused.value.cause, refused.value.status) == (
        "auth",
        "forbidden",
        403,
    )
    assert ran == []
