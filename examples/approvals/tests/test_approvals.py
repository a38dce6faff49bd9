"""The approvals example, through the author harness: interactions, the ambient header, the
reconcile timer, the webhook route, the notifier and the daily job."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hyphae_approvals.extension import TOKEN_HEADER, approvals

from core.errors import HostError

JOB = "ext:approvals:daily"


@pytest.fixture
def host(hyphae_host: Any) -> Any:
    hyphae_host.install(approvals)
    hyphae_host.conversation("c1")
    return hyphae_host


def request(host: Any, title: str = "Deploy to production?", **extra: Any) -> dict[str, Any]:
    return host.command("approvals", "request", {"title": title, **extra}, conversation_id="c1")


def test_a_request_seeds_a_pending_interaction_with_an_ambient_header(host):
    created = request(host, detail="Release 4.2, 14 changes")

    (interaction,) = host.interactions("c1")
    assert interaction["call_id"] == created["call_id"]
    assert (interaction["kind"], interaction["status"]) == ("approval", "pending")
    assert interaction["options"] == ["approve", "reject"]
    assert interaction["prompt"] == "Deploy to production?\n\nRelease 4.2, 14 changes"
    (header,) = host.view("c1")["ambient"]
    assert (header["key"], header["place"], header["body"]) == (
        "approvals",
        "header",
        "1 approval waiting",
    )
    (item,) = host.attention("c1")
    assert item["title"] == "Approval waiting: Deploy to production?"


def test_an_approval_answered_through_the_api_settles_the_interaction(host):
    created = request(host)

    response = host.answer_interaction("c1", created["call_id"], "approve")

    assert response.status_code == 200
    (interaction,) = host.interactions("c1")
    assert interaction["status"] == "answered"
    assert interaction["answer"] == "approve"
    assert interaction["settled_at"] == host.clock.now_ms()
    # the reconcile timer picks the answer up and records the decision
    assert host.timers("approvals") == {"reconcile": host.clock.now_ms() + 15_000}
    host.advance(seconds=15)
    assert host.fire_timers() == 1
    approval = host.record("approvals", "approval", created["id"])
    assert (approval.status, approval.via) == ("approved", "answer")
    assert host.view("c1")["ambient"] == []
    assert host.attention("c1") == []
    assert host.timers("approvals") == {}  # nothing pending: the sweep stops


def test_the_decide_command_answers_the_interaction(host):
    created = request(host)

    result = host.command(
        "approvals", "decide", {"id": created["id"], "decision": "reject"}, conversation_id="c1"
    )

    assert result == {"id": created["id"], "status": "rejected"}
    (interaction,) = host.interactions("c1")
    assert (interaction["status"], interaction["answer"]) == ("answered", "reject")
    with pytest.raises(HostError) as again:
        host.command(
            "approvals",
            "decide",
            {"id": created["id"], "decision": "approve"},
            conversation_id="c1",
        )
    assert again.value.status == 409


def configure_token(host: Any) -> str:
    host.user("root", staff=True)
    result = host.command("approvals", "configure", {"rotate_callback_token": True}, user="root")
    return result["callback_token"]


def test_the_webhook_callback_decides_with_the_callback_token(host):
    created = request(host)
    token = configure_token(host)

    response = host.route(
        "POST",
        "approvals",
        "callback",
        anonymous=True,
        json={"conversation_id": "c1", "id": created["id"], "decision": "approve", "by": "ops"},
        headers={TOKEN_HEADER: token},
    )

    assert response.status_code == 200
    assert response.json() == {"id": created["id"], "status": "approved"}
    (interaction,) = host.interactions("c1")
    assert (interaction["status"], interaction["answer"]) == ("answered", "approve")
    approval = host.record("approvals", "approval", created["id"])
    assert (approval.via, approval.decided_by) == ("callback", "ops")


def test_the_callback_refuses_a_wrong_token_and_changes_nothing(host):
    created = request(host)
    configure_token(host)

    response = host.route(
        "POST",
        "approvals",
        "callback",
        anonymous=True,
        json={"conversation_id": "c1", "id": created["id"], "decision": "approve"},
        headers={TOKEN_HEADER: "guess"},
    )

    assert response.status_code == 403
    assert host.interactions("c1")[0]["status"] == "pending"
    assert host.status("approvals").running


def test_the_callback_answers_a_malformed_body_with_400_without_a_stop(host):
    token = configure_token(host)

    response = host.route(
        "POST",
        "approvals",
        "callback",
        anonymous=True,
        json={"decision": "maybe"},
        headers={TOKEN_HEADER: token},
    )

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Callback body is invalid"
    assert host.status("approvals").running


def test_only_staff_may_configure(host):
    with pytest.raises(HostError) as error:
        host.command("approvals", "configure", {"rotate_callback_token": True})

    assert error.value.status == 403


def test_an_overdue_approval_expires(host):
    created = request(host, expires_in_hours=1)

    host.advance(seconds=3600)
    assert host.fire_timers() == 1  # the reconcile sweep, late: it expires what is overdue

    (interaction,) = host.interactions("c1")
    assert interaction["status"] == "expired"
    assert host.record("approvals", "approval", created["id"]).status == "expired"
    assert host.view("c1")["ambient"] == []


def test_the_log_notifier_writes_each_notification_as_a_json_line(host, settings):
    request(host, detail="Release 4.2")  # a pending interaction notifies its owner
    host.settle("c1", "ship it?")  # so does a settled run

    assert host.deliver_notifications() == ["delivered", "delivered"]

    log = Path(settings.HOST_DATA_DIR) / "data" / "approvals" / "notifications.jsonl"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(n["type"], n["conversation_id"], n["user"]) for n in lines] == [
        ("interaction.pending", "c1", "alice"),
        ("run.settled", "c1", "alice"),
    ]
    assert lines[0]["title"] == "approvals: approval"
    assert lines[0]["body"] == "Deploy to production?\n\nRelease 4.2"
    assert host.deliver_notifications() == []  # each delivered once


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A real HTTP server on localhost that records the JSON bodies POSTed to it."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            received.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    finally:
        server.shutdown()
        server.server_close()


def test_the_notifier_posts_to_the_webhook_url_of_its_settings(host, webhook):
    url, received = webhook
    host.set_settings("approvals", {"webhook_url": url})

    host.notify("job.failed", "Job nightly failed", job_id="ext:x:nightly")

    assert host.deliver_notifications() == ["delivered"]
    assert [(r["type"], r["title"], r["job_id"]) for r in received] == [
        ("job.failed", "Job nightly failed", "ext:x:nightly")
    ]


def test_invalid_settings_are_refused(host):
    with pytest.raises(HostError) as error:
        host.set_settings("approvals", {"webhook_url": "not a url"})

    assert error.value.status == 400


def test_the_daily_job_escalates_approvals_waiting_over_a_day(host):
    created = request(host, expires_in_hours=72)
    host.run_jobs()  # declares the job: its first run is the next 08:00 UTC
    next_run = host.jobs()[JOB]["next_run_at"]
    assert (next_run.hour, next_run.minute) == (8, 0)

    host.clock.set(int(next_run.timestamp() * 1000) + 24 * 3600 * 1000)
    host.fire_timers()
    host.run_jobs()

    job = host.jobs()[JOB]
    assert (job["last_outcome"], job["runs"]) == ("ok", 1)
    (item,) = host.attention("c1")
    assert (item["id"], item["level"]) == (f"approval:{created['id']}", "warning")
    assert item["title"] == "Still waiting for approval: Deploy to production?"
