"""The staff console and the inspector page in a real browser (headless Chromium), against
real processes: what staff and users see, live, without reloading."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from artifacts import services as artifact_services
from conversations.models import Conversation
from core import clock
from core.models import AuditEntry
from extensions_host.models import ExtensionStatus, RosterEntry
from extensions_host.runtime import extension_stop, run_frame
from tests.artifacts.helpers import decl, emit, newest_head, op_context, started

from .conftest import Host, log_in

if TYPE_CHECKING:
    from playwright.sync_api import Page

# without Playwright the module is skipped (with this reason), not a collection error
expect = pytest.importorskip(
    "playwright.sync_api", reason="needs Playwright: pip install -r requirements-dev.txt"
).expect
pytestmark = [
    pytest.mark.browser,
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
]

REASON = "on_timer defect: RuntimeError: the browser test broke it"


def conversation(cid: str, owner_name: str = "admin") -> Conversation:
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.get(username=owner_name)
    return Conversation.objects.create(
        id=cid, owner=owner, name=f"Browser {cid}", last_activity_at=clock.now()
    )


def mark_page(page: Page) -> None:
    """A marker that only survives as long as the page is not reloaded."""
    page.evaluate("window.__notReloaded = true")


def still_same_page(page: Page) -> bool:
    return page.evaluate("window.__notReloaded === true")


def test_staff_see_a_stopped_extension_on_the_dashboard_resume_it_and_find_the_audit_entry(
    page: Page, host: Host
):
    extension_stop(extension_id="flaky", hook="on_timer", reason=REASON)

    log_in(page, host)
    dashboard = page.locator("#hy-stopped")
    expect(dashboard).to_contain_text("flaky")
    expect(dashboard).to_contain_text(REASON)
    expect(page.locator("#hy-stopped-count")).to_have_text("1")
    expect(page.locator("#hy-running")).to_have_text("1")
    host.screenshot(page, "dashboard")

    page.goto(f"{host.url}/admin/extensions_host/rosterentry/")
    row = page.locator("#result_list tr", has_text="flaky")
    expect(row.locator(".hy-badge")).to_have_text("stopped")
    row.locator("input[name=_selected_action]").check()
    page.select_option("select[name=action]", "resume_selected")
    page.click("button[name=index]")
    expect(page.locator("#content h1")).to_have_text("Resume extensions")
    expect(page.locator("#content")).to_contain_text(REASON)
    page.click("input[value='Yes, resume']")

    expect(page.locator("ul.messagelist")).to_contain_text("Resumed 1 extension(s).")
    row = page.locator("#result_list tr", has_text="flaky")
    expect(row.locator(".hy-badge")).to_have_text("running")
    assert RosterEntry.objects.get(pk="flaky").status == ExtensionStatus.RUNNING

    page.goto(f"{host.url}/admin/extensions_host/rosterentry/flaky/change/")
    expect(page.locator("#hy-status")).to_have_text("running")
    audit = page.locator("#hy-audit .hy-audit-row").first
    expect(audit).to_contain_text("extension_resumed")
    expect(audit).to_contain_text("admin")
    expect(page.locator("#hy-audit")).to_contain_text(REASON)  # the previous reason, kept
    host.screenshot(page, "extension")

    page.goto(f"{host.url}/admin/core/auditentry/")
    expect(page.locator("#result_list")).to_contain_text("extension_resumed")
    assert AuditEntry.objects.filter(action="extension_resumed", actor="admin").count() == 1

    page.goto(f"{host.url}/admin/")
    expect(page.locator("#hy-stopped-count")).to_have_text("0")
    expect(page.locator("#hy-stopped")).to_contain_text("Every installed extension is running.")


def test_the_inspector_shows_the_echo_answer_and_new_attention_live_without_reload(
    page: Page, host: Host
):
    host.processes.worker(concurrency=1)
    conversation("live")

    log_in(page, host, "/inspect/live")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live", timeout=30_000)
    expect(page.locator("#part-attention .count")).to_have_text("0")
    mark_page(page)

    page.fill("#composer-text", "hello from the browser")
    page.click("#composer-send")
    expect(page.locator("#composer-note")).to_contain_text("submitted")
    expect(page.locator("#composer-text")).to_have_value("")
    answer = page.locator("#part-transcript .entry.role-assistant .entry-text")
    expect(answer).to_contain_text("echo: hello from the browser", timeout=60_000)
    expect(page.locator("#part-transcript .entry.role-user")).to_contain_text(
        "hello from the browser"
    )
    expect(page.locator("#part-header .badge-idle")).to_have_text("idle", timeout=30_000)

    def flag(ctx: Any) -> None:
        ctx.attention.set(
            "live",
            {
                "id": "check",
                "level": "action",
                "title": "Check the echo answer",
                "body": "It came back from a real worker.",
            },
        )

    outcome = run_frame(extension_id="lookout", hook="on_timer", call=flag, boundary="worker")
    assert outcome.ok, outcome
    item = page.locator("#part-attention .attention-item")
    expect(item).to_contain_text("Check the echo answer", timeout=30_000)
    expect(item.locator(".badge")).to_have_text("action")
    expect(page.locator("#part-attention .count")).to_have_text("1")
    expect(page.locator("#part-projection")).to_contain_text("lookout")
    assert still_same_page(page), "the page was reloaded"
    host.screenshot(page, "inspector")


def test_an_html_artifact_with_a_script_does_not_run_unless_its_preset_enables_scripts(
    page: Page, host: Host
):
    conversation("art")
    log_in(page, host, "/inspect/art")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live", timeout=30_000)
    title = page.title()
    mark_page(page)

    # the script comes first: once the paragraph after it is shown, it would have run
    hostile = (
        "<script>"
        "document.documentElement.setAttribute('data-ran', 'yes');"
        "try { window.top.document.title = 'pwned'; } catch (e) {}"
        "try { parent.document.body.setAttribute('data-pwned', 'yes'); } catch (e) {}"
        "</script><p id='shown'>inert artifact</p>"
    )
    scripted = (
        "<p id='shown'>scripted artifact</p><script>"
        "document.getElementById('shown').textContent = 'script ran in its sandbox';"
        "try { window.top.document.title = 'pwned'; } catch (e) {"
        " document.body.setAttribute('data-blocked', 'yes'); }"
        "</script>"
    )
    # two operations (the preset decides about scripts per operation), each completed
    for n, (payload, scripts) in enumerate(((hostile, False), (scripted, True))):
        operation = op_context(
            world_id="art",
            operation_id=f"op-{n}",
            parent_head=newest_head("art"),
            preset_scripts_enabled=scripts,
        )
        context = started(operation, decl(f"page{n}", content_type="text/html"))
        emit(context, f"page{n}", payload, f"call-{n}")
        artifact_services.operation_mark_core_committed(
            context=operation, head=operation.parent_head
        )
        artifact_services.followup_complete(operation_id=f"op-{n}", requests=[])

    frames = page.locator("#part-artifacts iframe.html-artifact")
    expect(frames).to_have_count(2, timeout=30_000)  # appeared live, no reload
    inert = page.frame_locator("#part-artifacts iframe[sandbox='']")
    expect(inert.locator("#shown")).to_have_text("inert artifact")
    expect(inert.locator("html[data-ran]")).to_have_count(0)
    sandboxed = page.frame_locator("#part-artifacts iframe[sandbox='allow-scripts']")
    expect(sandboxed.locator("#shown")).to_have_text("script ran in its sandbox")
    expect(sandboxed.locator("body[data-blocked='yes']")).to_have_count(1)

    assert page.title() == title and page.title() != "pwned"
    assert page.locator("body[data-pwned]").count() == 0
    assert still_same_page(page), "the page was reloaded"
    srcdoc = page.locator("#part-artifacts iframe[sandbox='']").get_attribute("srcdoc") or ""
    assert "<script>" in srcdoc  # the script is there, inert: the sandbox has no allow-scripts


def test_without_the_event_stream_the_inspector_falls_back_to_polling(page: Page, host: Host):
    conversation("poll")
    # the stream answers 404, as where no process serves it: EventSource gives up
    page.route("**/v1/conversations/poll/events", lambda route: route.fulfill(status=404))
    log_in(page, host, "/inspect/poll")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "polling")
    mark_page(page)

    def flag(ctx: Any) -> None:
        ctx.attention.set("poll", {"id": "p", "level": "info", "title": "Seen by polling"})

    assert run_frame(extension_id="lookout", hook="on_timer", call=flag, boundary="worker").ok
    expect(page.locator("#part-attention .attention-item")).to_contain_text(
        "Seen by polling", timeout=30_000
    )
    assert still_same_page(page), "the page was reloaded"


def test_the_api_docs_render_from_this_origin_under_the_strict_policy(page: Page, host: Host):
    # Swagger UI's files come from the host (drf-spectacular-sidecar), its script is a separate
    # request: no CDN, and nothing the Content-Security-Policy blocks
    outside, refused = [], []
    page.on(
        "request",
        lambda request: outside.append(request.url)
        if not request.url.startswith(host.url)
        else None,
    )
    page.on(
        "console",
        lambda message: refused.append(message.text)
        if "Content Security Policy" in message.text
        else None,
    )
    response = page.goto(f"{host.url}/v1/docs")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    expect(page.locator(".opblock-tag").first).to_be_visible()
    events = page.locator("[data-path='/v1/conversations/{conversation_id}/events']")
    expect(events.first).to_be_attached()
    assert outside == []
    assert refused == []


def test_a_markdown_artifact_keeps_its_list_bullets_and_numbers(page: Page, host: Host):
    # the inspector's own lists have no markers; an artifact's markdown lists keep theirs
    conversation("lists")
    operation = op_context(world_id="lists", operation_id="op-md", parent_head=newest_head("lists"))
    context = started(operation, decl("plan"))
    emit(context, "plan", "- Day 1\n- Day 2\n\n1. pack\n2. leave\n", "call-md")
    artifact_services.operation_mark_core_committed(context=operation, head=operation.parent_head)
    artifact_services.followup_complete(operation_id="op-md", requests=[])
    log_in(page, host, "/inspect/lists")
    item = page.locator("#part-artifacts .markdown ul li").first
    expect(item).to_have_text("Day 1", timeout=30_000)
    marker = "el => getComputedStyle(el.parentElement).listStyleType"
    assert item.evaluate(marker) == "disc"
    assert page.locator("#part-artifacts .markdown ol li").first.evaluate(marker) == "decimal"
