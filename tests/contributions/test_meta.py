"""GET /v1/meta, GET /v1/auth/check, providers with default-model resolution and collisions."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.sdk import Extension, Provider

from .exts import make_bundle_ext, make_provider_ext, make_routes_ext, make_skills_ext


def test_meta_needs_authentication(db):
    assert APIClient().get("/v1/meta").status_code == 401


def test_meta_lists_version_roster_routes_skills_bundles_and_lag(install, api, member):
    install(make_routes_ext(), make_skills_ext(), make_bundle_ext())
    body = api(member).get("/v1/meta").json()
    assert body["version"] == "0.1.0"
    assert body["health"] == {"status": "ok"}
    assert {e["id"]: e["status"] for e in body["extensions"]} == {
        "web": "running",
        "skilled": "running",
        "testui": "running",
    }
    routes = {(r["method"], r["path"]): r for r in body["routes"]}
    assert routes["POST", "upload"] == {
        "extension_id": "web",
        "method": "POST",
        "path": "upload",
        "url": "/v1/ext/web/upload",
        "auth": "user",
        "body_limit": 1024,
        "available": True,
    }
    assert [(s["name"], s["description"]) for s in body["skills"]] == [
        ("summarize", "Summarize a long document into key points."),
        ("plain", ""),
    ]
    [bundle] = body["webui_bundles"]
    assert bundle == {"extension_id": "testui", "name": "testui", "selected": False}
    assert set(body["lag"]) == {"available", "settled", "timers", "outbox"}
    assert body["lag"]["timers"]["due"] == 0
    assert body["incompatible_migrations"] == []
    assert isinstance(body["workers"], list)
    assert isinstance(body["jobs"], list)


def test_any_stopped_extension_degrades_health(install, api, member):
    install(make_routes_ext())
    RosterEntry.objects.filter(pk="web").update(
        status=ExtensionStatus.STOPPED, reason="route GET me defect: boom"
    )
    body = api(member).get("/v1/meta").json()
    assert body["health"]["status"] == "degraded"
    assert body["extensions"][0]["health"] == {
        "status": "degraded",
        "detail": "stopped: route GET me defect: boom",
    }
    assert body["routes"][0]["available"] is False


def test_an_extension_health_hook_is_aggregated(install, api, member):
    ext = Extension(id="probe", version="1")
    ext.health(lambda ctx: {"status": "degraded", "detail": "queue is long"})
    fine = Extension(id="fine", version="1")
    fine.health(lambda ctx: {"status": "ok"})
    install(ext, fine)
    body = api(member).get("/v1/meta").json()
    health = {e["id"]: e["health"] for e in body["extensions"]}
    assert health == {
        "fine": {"status": "ok"},
        "probe": {"status": "degraded", "detail": "queue is long"},
    }
    assert body["health"]["status"] == "degraded"


def test_a_broken_health_hook_is_a_defect_that_stops_its_extension(install, api, member):
    ext = Extension(id="liar", version="1")
    ext.health(lambda ctx: {"status": "great"})
    install(ext)
    body = api(member).get("/v1/meta").json()
    assert body["extensions"][0]["health"]["status"] == "degraded"
    assert RosterEntry.objects.get(pk="liar").reason == (
        "health defect: Extension health result is invalid"
    )


def test_a_migration_failure_of_an_extension_in_runs_is_listed_as_incompatible(
    install, api, member
):
    tools = Extension(id="tools", version="1.0.0", grants={"run_tools", "state"})
    install(make_routes_ext(), make_skills_ext(), tools)
    RosterEntry.objects.update(
        status=ExtensionStatus.STOPPED, failing_hook="migration", reason="state is newer"
    )
    body = api(member).get("/v1/meta").json()
    # `web` (routes and state) takes no part in runs; `skilled` does through its skills
    assert body["incompatible_migrations"] == [
        {"id": "skilled", "reason": "state is newer"},
        {"id": "tools", "reason": "state is newer"},
    ]


def test_the_last_proposer_sets_the_default_model_and_collisions_are_recorded(
    install, api, member, settings
):
    settings.HOST_DEFAULT_MODEL = ""
    install(
        make_provider_ext(
            "alpha", providers=[Provider("openai", ["gpt-a"], default_model="openai/gpt-a")]
        ),
        make_provider_ext(
            "beta",
            providers=[
                Provider("openai", ["gpt-b"]),
                Provider("local", ["llama"], default_model="local/llama"),
            ],
        ),
    )
    catalog = api(member).get("/v1/meta").json()["providers"]
    assert catalog["default_model"] == "local/llama"
    assert catalog["default_model_source"] == "extension:beta"
    assert catalog["collisions"] == [
        {"name": "openai", "extensions": ["alpha", "beta"], "winner": "beta"}
    ]
    assert {p["name"]: p["extension_id"] for p in catalog["providers"]} == {
        "local": "beta",
        "openai": "beta",
    }
    settings.HOST_DEFAULT_MODEL = "openai/gpt-z"
    configured = api(member).get("/v1/meta").json()["providers"]
    assert (configured["default_model"], configured["default_model_source"]) == (
        "openai/gpt-z",
        "configured",
    )


def test_auth_check_reports_the_principal_and_provider_readiness_verbatim(install, api, member):
    install(
        make_provider_ext(
            "keys",
            providers=[
                Provider("ready", readiness=lambda: {"status": "ready"}),
                Provider(
                    "missing",
                    readiness=lambda: {"status": "not_configured", "detail": "no API key"},
                ),
                Provider("untracked"),
            ],
        )
    )
    body = api(member, scope="read").get("/v1/auth/check").json()
    assert body["principal"] == {
        "user": "member",
        "name": "member",
        "email": "",
        "admin": False,
        "service": False,
        "method": "token",
        "scope": "read",
    }
    assert {p["name"]: p["readiness"] for p in body["providers"]} == {
        "ready": {"status": "ready"},
        "missing": {"status": "not_configured", "detail": "no API key"},
        "untracked": None,
    }


def test_auth_check_for_the_service_and_anonymous(db, api):
    assert APIClient().get("/v1/auth/check").status_code == 401
    principal = api("service").get("/v1/auth/check").json()["principal"]
    assert (principal["service"], principal["admin"], principal["method"]) == (
        True,
        True,
        "service",
    )


def test_providers_need_their_grant_admitted(install, api, member):
    install(make_provider_ext("keys", providers=[Provider("p", ["m"], default_model="p/m")]))
    RosterEntry.objects.filter(pk="keys").update(admitted_grants=[])
    catalog = api(member).get("/v1/meta").json()["providers"]
    assert catalog["providers"] == []
    assert catalog["default_model"] is None


def _busy_ext(n: int) -> Extension:
    """An extension with a settled cursor and a due timer: a row of every lag figure."""
    ext = Extension(id=f"busy{n}", version="1", grants={"settled", "timers", "state"})
    ext.on_settled(lambda ctx, runs: None)
    ext.on_timer(lambda ctx, timer: None)
    return ext


def _queries(install: Any, count: int, read: Any) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from extensions_host.runtime import run_frame

    install(*[_busy_ext(n) for n in range(count)])
    for n in range(count):
        run_frame(
            extension_id=f"busy{n}",
            hook="test",
            call=lambda ctx: ctx.timers.set("due", 0),
            failures="return",
        )
    read()  # warm: tokens, caches, activation
    with CaptureQueriesContext(connection) as captured:
        read()
    return len(captured.captured_queries)


@pytest.mark.parametrize("surface", ["lag figures", "GET /v1/meta", "/metrics"])
def test_the_lag_figures_cost_the_same_queries_for_one_or_five_extensions(
    install, api, member, surface
):
    from extensions_host.contributions.metrics import metrics_text
    from extensions_host.contributions.services.meta import lag_figures

    client = api(member)
    read = {
        "lag figures": lag_figures,
        "GET /v1/meta": lambda: client.get("/v1/meta"),
        "/metrics": metrics_text,
    }[surface]

    one = _queries(install, 1, read)
    five = _queries(install, 5, read)

    assert five == one  # set-based: no query per extension
    assert len(lag_figures()["settled"]["consumers"]) == 5
    assert lag_figures()["timers"]["due"] == 5
