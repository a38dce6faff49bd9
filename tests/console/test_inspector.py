"""The inspector page: login and access, what it shows, safe rendering of artifacts, the
strict Content-Security-Policy, the live fragments and the frame of scripted artifacts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.urls import reverse

from artifacts import services as artifact_services
from extensions_host.services.roster import extension_resume
from tests.artifacts.helpers import decl, emit, newest_head, op_context, started

from .conftest import STOP_REASON
from .data import fill_host
from .exts import flaky, keeper

PAGE = reverse("inspector:page", args=["c1"])
FRAGMENTS = reverse("inspector:fragments", args=["c1"])


@pytest.fixture
def host(install, owner):
    install(keeper(), flaky())
    return fill_host(owner)


@pytest.fixture
def as_owner(client, owner):
    client.force_login(owner)
    return client


def part(html: str, name: str) -> str:
    start = html.index(f'id="part-{name}"')
    end = html.index("</section>", start) if name != "header" else html.index("</header>", start)
    return html[start:end]


def artifacts_of(world: str, *items: tuple[str, str, Any], scripts: bool = False) -> dict:
    """Emit artifacts (name, content type, payload) in one committed operation."""
    operation = op_context(world_id=world, operation_id=f"op-{world}-{scripts}",
                           parent_head=newest_head(world),
                           preset_scripts_enabled=scripts)  # fmt: skip
    context = started(
        operation,
        *(decl(name, content_type=ctype, save="operation") for name, ctype, _ in items),
    )
    ids = {}
    for n, (name, _, payload) in enumerate(items):
        ids[name] = emit(context, name, payload, f"call-{n}").record_id
    artifact_services.operation_mark_core_committed(context=operation, head=operation.parent_head)
    return ids


def test_the_page_needs_a_login_and_sends_anonymous_visitors_to_the_admin_login(client, host):
    response = client.get(PAGE)

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=/inspect/c1")


def test_a_conversation_the_visitor_cannot_read_is_not_found(client, outsider, host):
    client.force_login(outsider)

    assert client.get(PAGE).status_code == 404
    assert client.get(FRAGMENTS).status_code == 404
    assert client.get(reverse("inspector:page", args=["nope"])).status_code == 404


def test_a_reader_of_a_shared_conversation_sees_it_read_only(client, member, host):
    host.conversation.sharing = "users"
    host.conversation.save()
    client.force_login(member)

    html = client.get(PAGE).content.decode()

    assert "Launch plan" in html
    assert 'id="composer-send" disabled' in html
    assert "read-only" in part(html, "header")


def test_the_page_shows_transcript_attention_ambient_projection_and_interactions(as_owner, host):
    html = as_owner.get(PAGE).content.decode()

    assert "Launch plan" in part(html, "header")
    transcript = part(html, "transcript")
    assert "hello keeper" in transcript and "echo: hello keeper" in transcript
    attention = part(html, "attention")
    assert 'data-count="1"' in attention and "Review the launch plan" in attention
    assert "2 of 3 done" in part(html, "ambient")
    projection = part(html, "projection")
    assert "&quot;notes&quot;: 2" in projection
    assert "flaky" in projection and STOP_REASON in projection
    assert "Ship it?" in part(html, "interactions")
    assert 'id="composer-send" disabled' not in html


def test_the_page_has_a_strict_content_security_policy_and_no_inline_script(as_owner, host):
    response = as_owner.get(PAGE)
    policy = response["Content-Security-Policy"]
    html = response.content.decode()

    assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy.split("style-src")[0]
    assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy
    assert html.count("<script") == 1 and '<script src="/static/hyphae/inspector.js"' in html
    assert " on" + "click=" not in html


def test_artifacts_are_rendered_by_content_type_per_channel(as_owner, host):
    artifacts = part(as_owner.get(PAGE).content.decode(), "artifacts")

    assert 'data-channel="main"' in artifacts and 'data-channel="side"' in artifacts
    assert "<h1>Plan</h1>" in artifacts and "<em>bold</em>" in artifacts
    assert "&quot;steps&quot;: 3" in artifacts
    assert 'sandbox=""' in artifacts
    assert 'srcdoc="&lt;p id=&#x27;x&#x27;&gt;hi&lt;/p&gt;"' in artifacts


def test_markdown_is_sanitized_and_html_never_leaves_its_script_less_sandbox(as_owner, host):
    ids = artifacts_of(
        "c1",
        ("evil_md", "text/markdown",
         "[x](javascript:alert(1)) <script>alert(1)</script> <img src=x onerror=alert(1)>"),
        ("evil_html", "text/html", '<script>parent.document.title="pwned"</script><b>hi</b>'),
    )  # fmt: skip
    artifacts = part(as_owner.get(PAGE).content.decode(), "artifacts")

    markdown = artifacts[artifacts.index(ids["evil_md"]) :]
    markdown = markdown[: markdown.index("</article>")]
    assert "<script" not in markdown and "<img" not in markdown
    assert 'href="javascript:' not in markdown  # the link is refused, shown as text
    html_frame = artifacts[artifacts.index(ids["evil_html"]) :]
    html_frame = html_frame[: html_frame.index("</article>")]
    assert 'sandbox=""' in html_frame and "allow-scripts" not in html_frame
    assert "<script>" not in html_frame and "&lt;script&gt;" in html_frame


def test_html_of_a_preset_with_scripts_gets_a_scripted_sandbox_of_its_own_origin(as_owner, host):
    script = "<script>document.body.textContent='ran'</script>"
    ids = artifacts_of("c1", ("app", "text/html", script), scripts=True)
    artifacts = part(as_owner.get(PAGE).content.decode(), "artifacts")
    frame_url = reverse("inspector:artifact-frame", args=["c1", ids["app"]])

    assert f'sandbox="allow-scripts" referrerpolicy="no-referrer" src="{frame_url}"' in artifacts
    frame = as_owner.get(frame_url)
    assert frame.status_code == 200
    assert frame["Content-Security-Policy"].startswith("sandbox allow-scripts;")
    assert "allow-same-origin" not in frame["Content-Security-Policy"]
    assert frame["X-Frame-Options"] == "SAMEORIGIN"
    assert b"document.body.textContent" in frame.content


def test_the_frame_endpoint_refuses_artifacts_without_scripts_and_strangers(
    as_owner, client, outsider, host
):
    without_scripts = reverse("inspector:artifact-frame", args=["c1", host.html_record_id])
    assert as_owner.get(without_scripts).status_code == 404
    ids = artifacts_of("c1", ("app", "text/html", "<b>x</b>"), scripts=True)
    client.force_login(outsider)
    assert (
        client.get(reverse("inspector:artifact-frame", args=["c1", ids["app"]])).status_code == 404
    )


def test_fragments_render_the_named_parts_with_the_version(as_owner, host):
    body = as_owner.get(FRAGMENTS, {"parts": "attention,transcript"}).json()

    assert set(body["parts"]) == {"attention", "transcript"}
    assert "Review the launch plan" in body["parts"]["attention"]
    assert body["version"] == host.conversation.__class__.objects.get(pk="c1").version


def test_fragments_answer_nothing_when_polled_at_the_current_version(as_owner, host):
    version = as_owner.get(FRAGMENTS).json()["version"]

    assert as_owner.get(FRAGMENTS, {"since": version}).json()["parts"] == {}
    assert set(as_owner.get(FRAGMENTS, {"since": version - 1}).json()["parts"]) == {
        "header", "attention", "ambient", "transcript", "projection", "artifacts", "interactions",
    }  # fmt: skip


def test_a_poll_at_the_current_version_answers_the_projection_when_the_roster_moved(as_owner, host):
    """A stop or a resume moves no conversation's version: the page's poll sends the roster
    token it holds, and gets the projection (with the slot stopped) when it moved."""
    first = as_owner.get(FRAGMENTS).json()
    version, roster = first["version"], first["roster"]
    page = as_owner.get(PAGE).content.decode()
    assert f'data-roster="{roster}"' in page  # the page starts from the token it rendered at
    assert as_owner.get(FRAGMENTS, {"since": version, "roster": roster}).json()["parts"] == {}

    extension_resume(extension_id="flaky", actor="staff")  # the host fixture stopped it

    moved = as_owner.get(FRAGMENTS, {"since": version, "roster": roster}).json()
    assert moved["version"] == version and moved["roster"] != roster
    assert list(moved["parts"]) == ["projection"]
    assert STOP_REASON not in moved["parts"]["projection"]
    again = {"since": version, "roster": moved["roster"]}
    assert as_owner.get(FRAGMENTS, again).json()["parts"] == {}


def test_the_roster_token_of_the_stream_and_of_the_page_agree(host, owner):
    from core.auth import user_principal
    from extensions_host.surfaces.live import conversation_version, roster_token

    principal = user_principal(owner, "session")
    seen = conversation_version(conversation_id="c1", principal=principal)
    assert seen is not None and seen.roster == roster_token()
    extension_resume(extension_id="flaky", actor="staff")
    moved = conversation_version(conversation_id="c1", principal=principal)
    assert moved is not None and moved.roster == roster_token() != seen.roster


@pytest.mark.parametrize(
    "query", [{"parts": "transcript,secrets"}, {"since": "-1"}, {"since": "9" * 30}]
)
def test_fragments_refuse_bad_queries_with_400(as_owner, host, query):
    response = as_owner.get(FRAGMENTS, query)

    assert response.status_code == 400
    assert response.json()["error"]["category"] == "contract"


def test_fragments_need_a_login(client, host):
    response = client.get(FRAGMENTS)

    assert response.status_code == 401
    assert json.loads(response.content)["error"]["cause"] == "unauthenticated"


def test_the_composer_posts_through_the_api_with_the_session_and_csrf(owner, host):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    html = browser.get(PAGE).content.decode()
    token = html.split('data-csrf="', 1)[1].split('"', 1)[0]
    url = reverse("conversation-submissions", args=["c1"])
    body = {"request_id": "r-inspector", "parts": [{"type": "text", "text": "from the page"}]}

    refused = browser.post(url, body, content_type="application/json")
    accepted = browser.post(url, body, content_type="application/json", HTTP_X_CSRFTOKEN=token)

    assert refused.status_code == 403
    assert accepted.status_code == 201, accepted.content
    assert "from the page" in part(browser.get(PAGE).content.decode(), "transcript")


def test_fragments_answer_artifacts_only_when_the_world_moved(as_owner, host):
    first = as_owner.get(FRAGMENTS, {"parts": "artifacts"}).json()
    quiet = as_owner.get(
        FRAGMENTS, {"parts": "artifacts", "artifacts_since": first["artifacts_version"]}
    ).json()
    artifacts_of("c1", ("late", "text/plain", "a late panel"))
    moved = as_owner.get(
        FRAGMENTS, {"parts": "artifacts", "artifacts_since": first["artifacts_version"]}
    ).json()

    assert quiet["parts"] == {}
    assert moved["artifacts_version"] > first["artifacts_version"]
    assert "a late panel" in moved["parts"]["artifacts"]
