"""The inspector page, live, in headless Chromium against a uvicorn server: what reaches an
open page without a reload (a projection-only extension stopping and resuming, a change that
arrives during the artifacts poll), and the composer's sends (one per prompt, none cut)."""

from __future__ import annotations

from typing import Any

import pytest

from conversations.models import Conversation, Submission
from core import clock
from extensions_host.runtime import extension_stop, run_frame
from extensions_host.services.roster import extension_resume

from .conftest import Host, log_in

# without Playwright the module is skipped (with this reason), not a collection error
expect = pytest.importorskip(
    "playwright.sync_api", reason="needs Playwright: pip install -r requirements-dev.txt"
).expect
pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

# a generous bound (spec 01's target is about a second, measured at 0.1-0.3 s here): what these
# tests catch is an update that never arrives, not a slow one
LIVE_MS = 10_000

# counts what the page does, from inside the page (set before its own script runs)
PROBES = """
window.__posts = 0;
window.__changes = 0;
const realFetch = window.fetch;
window.fetch = function (url, init) {
  if (init && init.method === 'POST' && String(url).includes('/submissions')) window.__posts++;
  return realFetch.apply(this, arguments);
};
const RealES = window.EventSource;
window.EventSource = function (url, opts) {
  const es = new RealES(url, opts);
  es.addEventListener('change', () => { window.__changes++; });
  return es;
};
window.EventSource.CLOSED = RealES.CLOSED;
"""


def conversation(cid: str) -> Conversation:
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.get(username="admin")
    return Conversation.objects.create(
        id=cid, owner=owner, name=f"Audit {cid}", last_activity_at=clock.now()
    )


def open_live(page: Any, host: Host, cid: str) -> None:
    page.add_init_script(PROBES)
    log_in(page, host, f"/inspect/{cid}")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live", timeout=30_000)


def test_stopping_a_projection_only_extension_shows_its_slot_stopped_live(page, host):
    conversation("stopme")
    open_live(page, host, "stopme")
    slot = page.locator("#part-projection [data-extension=flaky]")
    expect(slot.locator(".badge")).to_have_text("running")

    extension_stop(extension_id="flaky", hook="on_timer", reason="flaky broke in the audit")

    # the slot must turn stopped, with its reason, without a reload
    expect(slot.locator(".badge")).to_have_text("stopped", timeout=LIVE_MS)
    expect(slot.locator(".reason")).to_have_text("flaky broke in the audit")


def test_resuming_a_projection_only_extension_shows_its_slot_running_live(page, host):
    conversation("resumeme")
    extension_stop(extension_id="flaky", hook="on_timer", reason="stopped before the page opened")
    open_live(page, host, "resumeme")
    slot = page.locator("#part-projection [data-extension=flaky]")
    expect(slot.locator(".badge")).to_have_text("stopped")

    extension_resume(extension_id="flaky", actor="admin")

    expect(slot.locator(".badge")).to_have_text("running", timeout=LIVE_MS)


def test_a_stop_between_the_page_and_its_stream_still_reaches_the_page(page, host):
    """The stream starts from what it reads when it connects: a stop committed after the page
    was rendered and before that moves no version. The stream's first event carries the
    roster's token, and the page, rendered with an older one, re-reads the projection."""
    conversation("between")
    stopped: list[bool] = []

    def stop_then_connect(route: Any) -> None:
        if not stopped:
            extension_stop(extension_id="flaky", hook="on_timer", reason="stopped in the gap")
            stopped.append(True)
        route.continue_()

    page.route("**/v1/conversations/between/events", stop_then_connect)
    open_live(page, host, "between")
    slot = page.locator("#part-projection [data-extension=flaky]")

    assert stopped, "the stream was not intercepted"
    expect(slot.locator(".badge")).to_have_text("stopped", timeout=LIVE_MS)
    expect(slot.locator(".reason")).to_have_text("stopped in the gap")


def test_ctrl_enter_pressed_twice_submits_the_prompt_once(page, host):
    conversation("twice")
    open_live(page, host, "twice")
    box = page.locator("#composer-text")
    box.fill("only once please")

    box.press("Control+Enter")
    box.press("Control+Enter")  # while the first is still being sent (or just sent)

    expect(page.locator("#composer-note")).to_contain_text("submitted")
    assert page.evaluate("window.__posts") == 1, "the same prompt was posted twice"
    assert Submission.objects.filter(conversation_id="twice").count() == 1


def test_a_prompt_longer_than_the_limit_is_refused_with_a_message_not_silently_cut(page, host):
    conversation("toolong")
    open_live(page, host, "toolong")
    typed = "a" * 70_000  # over the 64 KiB submission limit

    page.locator("#composer-text").fill(typed)
    page.click("#composer-send")

    note = page.locator("#composer-note")
    expect(note).not_to_have_text("sending…")
    expect(note).to_contain_text("too", timeout=5_000)  # "too long" / "too large"
    stored = [s.parts[0]["text"] for s in Submission.objects.filter(conversation_id="toolong")]
    assert stored == [], f"a cut prompt was sent: {[len(t) for t in stored]} of {len(typed)} chars"


def test_a_change_arriving_while_the_artifacts_poll_is_in_flight_is_not_lost(page, host):
    conversation("race")
    held: list[Any] = []

    def hold_first_artifacts_poll(route: Any) -> None:
        if "parts=artifacts" in route.request.url and not held:
            held.append(route)  # answered below, after the stream's change arrived
        else:
            route.continue_()

    page.route("**/inspect/race/fragments?*", hold_first_artifacts_poll)
    open_live(page, host, "race")
    for _ in range(200):  # the artifacts poll runs every 3 s
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the artifacts poll never ran"
    before = page.evaluate("window.__changes")

    def flag(ctx: Any) -> None:
        ctx.attention.set("race", {"id": "r", "level": "action", "title": "Do not lose me"})

    assert run_frame(extension_id="lookout", hook="on_timer", call=flag).ok
    for _ in range(100):  # bounded: until the stream's change event reached the page
        if page.evaluate("window.__changes") > before:
            break
        page.wait_for_timeout(50)
    assert page.evaluate("window.__changes") > before, "the stream sent no change"
    held[0].continue_()  # the poll ends; the change it delayed must still be shown

    expect(page.locator("#part-attention .attention-item")).to_contain_text(
        "Do not lose me", timeout=3_000
    )
