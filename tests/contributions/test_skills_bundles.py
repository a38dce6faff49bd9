"""Skills (inside the package, listed, served read-only) and web UI bundles (served at /ui/)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from extensions_host import registry
from extensions_host.contributions.services.skills import skills_for_claim

from .exts import make_bundle_ext, make_skills_ext


@pytest.mark.parametrize(
    ("directory", "message"),
    [
        ("../conversations", "skill directory '../conversations' escapes its package"),
        ("skills/../../core", "escapes its package"),
        ("/etc", "escapes its package"),
        (".", "escapes its package"),
        ("skills/nowhere", "is not a directory"),
        ("notaskill", "has no SKILL.md"),
    ],
)
def test_a_skill_directory_outside_the_package_or_not_a_skill_is_refused_at_load(
    directory, message
):
    with pytest.raises(registry.ExtensionLoadError, match=message):
        registry.load([("t", make_skills_ext("esc", [directory]))])


def test_skills_are_returned_for_claims_with_a_read_only_url(install, settings):
    settings.HOST_PUBLIC_URL = "https://hyphae.example"
    install(make_skills_ext())
    assert skills_for_claim() == [
        {
            "extension_id": "skilled",
            "name": "summarize",
            "description": "Summarize a long document into key points.",
            "url": "https://hyphae.example/v1/skills/skilled/summarize/",
        },
        {
            "extension_id": "skilled",
            "name": "plain",
            "description": "",
            "url": "https://hyphae.example/v1/skills/skilled/plain/",
        },
    ]


def test_skill_files_are_served_read_only_to_the_runtime_and_admins(install, api, member, staff):
    install(make_skills_ext())
    runtime = api("service")
    manifest = runtime.get("/v1/skills/skilled/summarize/SKILL.md")
    assert manifest.status_code == 200
    assert manifest["Content-Type"] == "text/markdown; charset=utf-8"
    assert b"key points" in b"".join(manifest.streaming_content)
    script = runtime.get("/v1/skills/skilled/summarize/helper.py")
    assert script["Content-Type"] == "application/octet-stream"
    assert script["Content-Disposition"].startswith("attachment")
    assert api(staff).get("/v1/skills/skilled/summarize/SKILL.md").status_code == 200
    assert api(member, scope="runtime").get("/v1/skills/skilled/plain/SKILL.md").status_code == 200
    assert api(member).get("/v1/skills/skilled/summarize/SKILL.md").status_code == 403
    assert APIClient().get("/v1/skills/skilled/summarize/SKILL.md").status_code == 401


def test_an_uninstalled_extensions_skill_files_are_not_served(install, api):
    from extensions_host.models import ExtensionStatus, RosterEntry

    install(make_skills_ext())
    runtime = api("service")
    assert runtime.get("/v1/skills/skilled/summarize/SKILL.md").status_code == 200
    RosterEntry.objects.filter(pk="skilled").update(status=ExtensionStatus.UNINSTALLED)
    # its code is still loaded in this process, but it is neither listed nor served
    assert skills_for_claim() == []
    assert runtime.get("/v1/skills/skilled/summarize/SKILL.md").status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "/v1/skills/skilled/summarize/../plain/SKILL.md",
        "/v1/skills/skilled/summarize/../../test_sdk.py",
        "/v1/skills/skilled/summarize/%2e%2e/%2e%2e/conftest.py",
        "/v1/skills/skilled/summarize/missing.md",
        "/v1/skills/skilled/nope/SKILL.md",
        "/v1/skills/ghost/summarize/SKILL.md",
        "/v1/skills/skilled/summarize/.hidden",
    ],
)
def test_skill_paths_outside_a_skill_or_unknown_are_404(install, api, path):
    install(make_skills_ext())
    assert api("service").get(path).status_code == 404


def test_the_selected_bundle_s_index_is_served_at_ui_with_a_strict_csp(install, settings):
    settings.HOST_WEBUI_BUNDLE = "testui"
    install(make_bundle_ext())
    client = APIClient()
    index = client.get("/ui/")
    assert index.status_code == 200
    assert index["Content-Type"] == "text/html; charset=utf-8"
    assert b"test bundle" in b"".join(index.streaming_content)
    assert index["X-Content-Type-Options"] == "nosniff"
    policy = index["Content-Security-Policy"]
    assert "script-src 'self'" in policy
    assert "object-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    script = client.get("/ui/assets/app.js")
    assert script["Content-Type"] == "text/javascript; charset=utf-8"
    binary = client.get("/ui/assets/data.bin")
    assert binary["Content-Type"] == "application/octet-stream"
    assert binary["Content-Disposition"].startswith("attachment")


@pytest.mark.parametrize(
    "path",
    [
        "/ui/../settings.py",
        "/ui/../../config/settings/base.py",
        "/ui/%2e%2e/exts.py",
        "/ui/unknown.html",
        "/ui/assets/",
        "/ui/assets",
        "/ui/.env",
    ],
)
def test_a_bundle_request_outside_the_bundle_or_for_an_unknown_file_is_404(install, settings, path):
    settings.HOST_WEBUI_BUNDLE = "testui"
    install(make_bundle_ext())
    assert APIClient().get(path).status_code == 404


def test_without_a_selection_ui_is_404(install, settings):
    settings.HOST_WEBUI_BUNDLE = ""
    install(make_bundle_ext())
    assert APIClient().get("/ui/").status_code == 404


def test_an_unknown_bundle_selection_is_a_clear_startup_error(settings):
    settings.HOST_WEBUI_BUNDLE = "nope"
    with pytest.raises(
        registry.ExtensionLoadError,
        match=r"HOST_WEBUI_BUNDLE 'nope' is not contributed by any installed extension "
        r"\(available: testui\)",
    ):
        registry.load([("t", make_bundle_ext())])


def test_a_bundle_outside_its_package_is_refused_at_load():
    with pytest.raises(registry.ExtensionLoadError, match="escapes its package"):
        registry.load([("t", make_bundle_ext("evil", "../../config"))])


def test_a_claim_captures_a_skill_contributor_and_lists_its_skills(install, api, owner):
    install(make_skills_ext())
    client = api(owner)
    assert client.post("/v1/conversations", {"id": "sk"}, format="json").status_code == 201
    submitted = client.post(
        "/v1/conversations/sk/submissions",
        {"parts": [{"type": "text", "text": "hi"}]},
        format="json",
    )
    assert submitted.status_code == 201
    claim = api("service").post("/v1/conversations/sk/runs", {}, format="json")
    assert claim.status_code == 201, claim.content
    body = claim.json()
    capture = body.get("capture", body)
    assert [p["id"] for p in capture["participants"]] == ["skilled"]
    assert [s["name"] for s in capture["skills"]] == ["summarize", "plain"]
