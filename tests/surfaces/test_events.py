"""Live events: `GET /v1/conversations/{id}/events` (SSE) served by a real uvicorn process
(`config.asgi`, the stream process of spec 08), against the test database."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.db import connection, transaction

from conversations.models import Conversation
from conversations.services import Origin, submission_admit
from core import clock
from core.services import token_create
from extensions_host.runtime import extension_stop
from extensions_host.services.roster import extension_resume
from extensions_host.surfaces import live
from extensions_host.surfaces.live import (
    KINDS,
    change_hub,
    changed_kinds,
    conversation_digests,
    roster_token,
)

from .conftest import in_frame
from .exts import Empty, make_ext

ROOT = Path(__file__).resolve().parents[2]
BOUND_SECONDS = 5.0


def _database_url() -> str:
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    host, port = s.get("HOST") or "127.0.0.1", s.get("PORT") or 5432
    return f"postgres://{s.get('USER') or 'postgres'}{password}@{host}:{port}/{s['NAME']}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StreamServer:
    """`uvicorn config.asgi:application` in its own process, on a free port."""

    def __init__(self, tmp: Path, **env: str) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tmp / f"uvicorn-{self.port}.log"
        environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
        environment.update(
            DJANGO_SETTINGS_MODULE="config.settings.base",
            DATABASE_URL=_database_url(),
            HOST_API_TOKEN=",".join(settings.HOST_API_TOKEN),
            CACHE_URL="locmemcache://",
            HOST_SYNC_AT_START="false",
            HOST_VAR_DIR=str(tmp / "var"),
            PYTHONUNBUFFERED="1",
            **env,
        )
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host",
                 "127.0.0.1", "--port", str(self.port), "--log-level", "warning"],
                cwd=ROOT, env=environment, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"uvicorn did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture
def stream_server(tmp_path: Path) -> Iterator[Callable[..., StreamServer]]:
    servers: list[StreamServer] = []

    def start(**env: str) -> StreamServer:
        server = StreamServer(tmp_path, **env)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


class Events:
    """Reads SSE frames from an httpx streaming response."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.iter_lines()
        self.comments = 0

    def next(self) -> dict[str, Any]:
        frame: dict[str, Any] = {}
        for line in self.lines:
            if line == "":
                if frame:
                    return frame
                continue
            if line.startswith(":"):
                self.comments += 1
                continue
            field, _, value = line.partition(":")
            frame[field] = value.removeprefix(" ")
        return {"end": True}

    def change(self) -> dict[str, Any]:
        while True:
            frame = self.next()
            if frame.get("end") or frame.get("event") in ("change", "gone"):
                return frame


def payload(frame: dict[str, Any]) -> dict[str, Any]:
    return json.loads(frame["data"])


@pytest.fixture
def committed(owner, install):
    """Committed data the server process can see: c1 of `owner`, an attention extension."""
    install(make_ext("watch", grants={"attention"}))
    Conversation.objects.create(id="c1", owner=owner, last_activity_at=clock.now())
    _, raw = token_create(user=owner, name="sse", scope="read", expires_at=None)
    return {"Authorization": f"Bearer {raw}"}


def _submit(owner: Any, text: str) -> None:
    with transaction.atomic():
        submission_admit(
            conversation_id="c1", parts=[{"type": "text", "text": text}],
            origin=Origin.of_user(owner),
        )  # fmt: skip


def _attention(title: str) -> None:
    item = {"id": "a1", "level": "action", "title": title}
    assert in_frame("watch", lambda ctx: ctx.attention.set("c1", item)).ok


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_an_sse_client_sees_a_change_event_soon_after_a_submission_and_an_attention_change(
    committed, stream_server, owner
):
    server = stream_server()
    url = f"{server.base}/v1/conversations/c1/events"
    with httpx.Client(timeout=httpx.Timeout(10.0)) as client:
        with client.stream("GET", url, headers=committed) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = Events(response)
            hello = events.change()
            assert payload(hello)["changed"] == []
            version = payload(hello)["version"]
            assert int(hello["id"]) == version

            started = time.monotonic()
            _submit(owner, "hello there")
            submitted = events.change()
            submission_delay = time.monotonic() - started

            started = time.monotonic()
            _attention("Approve the deploy")
            noticed = events.change()
            attention_delay = time.monotonic() - started

    print(
        f"\nSSE delay on {connection.vendor}: submission {submission_delay * 1000:.0f} ms, "
        f"attention {attention_delay * 1000:.0f} ms"
    )
    assert payload(submitted)["version"] > version
    assert {"entries", "submissions"} <= set(payload(submitted)["changed"])
    assert payload(noticed)["changed"] == ["attention"]
    assert int(noticed["id"]) == payload(noticed)["version"] > payload(submitted)["version"]
    assert submission_delay < BOUND_SECONDS
    assert attention_delay < BOUND_SECONDS


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_stop_and_a_resume_reach_the_stream_as_a_projection_change(
    committed, stream_server, install
):
    """An extension with only a projection has nothing in the conversation whose version a
    stop would move, yet every projection slot shows the stop: the stream watches the roster
    too (on PostgreSQL woken by the stop's hint, on SQLite at its next poll)."""
    install(
        make_ext("watch", grants={"attention"}),
        make_ext("slot", grants={"projection"}, projection_schema=Empty),
    )
    server = stream_server()
    url = f"{server.base}/v1/conversations/c1/events"
    with httpx.Client(timeout=httpx.Timeout(10.0)) as client:
        with client.stream("GET", url, headers=committed) as response:
            events = Events(response)
            hello = payload(events.change())
            version = hello["version"]
            assert hello["roster"] == roster_token()  # a page compares it with its own

            started = time.monotonic()
            extension_stop(extension_id="slot", hook="on_timer", reason="slot broke")
            stopped = events.change()
            stop_delay = time.monotonic() - started
            extension_resume(extension_id="slot", actor="staff")
            resumed = events.change()

    tokens = [hello["roster"]]
    for frame in (stopped, resumed):
        data = payload(frame)
        tokens.append(data.pop("roster"))
        assert data == {"conversation_id": "c1", "version": version, "changed": ["projection"]}
        assert int(frame["id"]) == version  # the conversation did not move
    assert len(set(tokens)) == 3  # each roster change moves the token
    assert tokens[-1] == roster_token()
    assert stop_delay < BOUND_SECONDS


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_stream_keeps_alive_ends_after_its_lifetime_and_resumes_from_last_event_id(
    committed, stream_server, owner
):
    server = stream_server(HOST_SSE_LIFETIME_SECONDS="2", HOST_SSE_KEEPALIVE_SECONDS="0.3")
    url = f"{server.base}/v1/conversations/c1/events"
    with httpx.Client(timeout=httpx.Timeout(10.0)) as client:
        started = time.monotonic()
        with client.stream("GET", url, headers=committed) as response:
            events = Events(response)
            version = payload(events.change())["version"]
            assert events.change() == {"end": True}  # the server closed the stream
        lifetime = time.monotonic() - started
        assert 1.5 < lifetime < 2 + BOUND_SECONDS
        assert events.comments >= 2  # keep-alives while idle

        # resuming at the version seen: the connect event names nothing, then the changes
        resume = committed | {"Last-Event-ID": str(version)}
        with client.stream("GET", url, headers=resume) as response:
            events = Events(response)
            again = payload(events.change())
            _submit(owner, "while away")
            first = events.change()
        assert again == {
            "conversation_id": "c1", "version": version, "changed": [], "roster": roster_token()
        }  # fmt: skip
        assert payload(first)["version"] > version
        assert "entries" in payload(first)["changed"]

        # resuming from an older version: the current one at once, everything may have changed
        stale = committed | {"Last-Event-ID": str(version)}
        with client.stream("GET", url, headers=stale) as response:
            caught_up = Events(response).change()
        assert payload(caught_up)["version"] == payload(first)["version"]
        assert "attention" in payload(caught_up)["changed"]


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_a_roster_move_during_a_reconnect_shows_in_the_connect_event(
    committed, stream_server, install
):
    """A stop moves no conversation's version: a client that reconnects at the version it saw
    learns of a stop made while it was away from the connect event's roster token."""
    install(
        make_ext("watch", grants={"attention"}),
        make_ext("slot", grants={"projection"}, projection_schema=Empty),
    )
    server = stream_server()
    url = f"{server.base}/v1/conversations/c1/events"
    with httpx.Client(timeout=httpx.Timeout(10.0)) as client:
        with client.stream("GET", url, headers=committed) as response:
            before = payload(Events(response).change())
        extension_stop(extension_id="slot", hook="on_timer", reason="slot broke")
        resume = committed | {"Last-Event-ID": str(before["version"])}
        with client.stream("GET", url, headers=resume) as response:
            after = payload(Events(response).change())

    assert after["version"] == before["version"]
    assert after["changed"] == []
    assert after["roster"] != before["roster"]
    assert after["roster"] == roster_token()


@pytest.mark.integration
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_open_streams_share_the_stream_process_connection_pool(committed, stream_server, owner):
    """The ASGI process pools its connections (DATABASE_POOL_SIZE) and a stream hands its
    connection back between polls: many open streams hold no more connections than the pool
    (plus the one that listens for hints), and every one of them still sees a change."""
    server = stream_server(DATABASE_POOL_SIZE="3", PGAPPNAME=SERVER_APP)
    url = f"{server.base}/v1/conversations/c1/events"
    streams = 12
    with httpx.Client(timeout=httpx.Timeout(10.0)) as client, ExitStack() as open_streams:
        readers = []
        for _ in range(streams):
            response = open_streams.enter_context(client.stream("GET", url, headers=committed))
            readers.append(Events(response))
        versions = {payload(reader.change())["version"] for reader in readers}
        held = _server_connections()
        _submit(owner, "to everyone")
        seen = [payload(reader.change()) for reader in readers]

    assert 1 <= held <= 3 + 1  # the pool, and the LISTEN connection
    (start,) = versions
    assert all(event["version"] > start and "entries" in event["changed"] for event in seen)


SERVER_APP = "hyphae-stream-under-test"  # the server's connections name themselves (libpq)


def _server_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [SERVER_APP]
        )
        return int(cursor.fetchone()[0])


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_the_stream_is_access_checked(committed, stream_server, make_user, owner):
    server = stream_server()
    stranger = token_create(user=make_user("stranger"), name="x", scope="read", expires_at=None)
    url = f"{server.base}/v1/conversations/c1/events"

    assert httpx.get(url, timeout=5).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer nope"}, timeout=5).status_code == 401
    denied = httpx.get(url, headers={"Authorization": f"Bearer {stranger[1]}"}, timeout=5)
    assert denied.status_code == 404
    assert denied.json()["error"]["cause"] == "not_found"
    missing = httpx.get(f"{server.base}/v1/conversations/zzz/events", headers=committed, timeout=5)
    assert missing.status_code == 404

    # access lost while streaming: the stream says `gone` and ends
    Conversation.objects.filter(pk="c1").update(sharing="users")
    headers = {"Authorization": f"Bearer {stranger[1]}"}
    with httpx.Client(timeout=httpx.Timeout(10.0)) as client:
        with client.stream("GET", url, headers=headers) as response:
            assert response.status_code == 200
            events = Events(response)
            events.change()
            Conversation.objects.filter(pk="c1").update(sharing="private")
            assert events.change()["event"] == "gone"


# --- what changed (unit) ---------------------------------------------------------------------


def test_digests_name_what_changed(install, conversation, owner):
    install(make_ext("watch", grants={"attention"}, ambient_kinds=("status",)))
    conversation("c1")
    before = conversation_digests(conversation_id="c1")

    submission_admit(
        conversation_id="c1", parts=[{"type": "text", "text": "x"}], origin=Origin.of_user(owner)
    )
    after_submit = conversation_digests(conversation_id="c1")
    assert set(changed_kinds(before, after_submit)) == {"entries", "submissions"}

    assert in_frame(
        "watch", lambda ctx: ctx.set_ambient("c1", {"key": "status", "place": "footer"})
    ).ok
    after_ambient = conversation_digests(conversation_id="c1")
    assert changed_kinds(after_submit, after_ambient) == ["ambient"]

    # a version bump that moved none of the parts: an extension's state (its projection)
    assert changed_kinds(after_ambient, conversation_digests(conversation_id="c1")) == [
        "projection"
    ]


def test_the_event_stream_is_in_the_openapi_schema_marked_as_streaming(api, owner):
    schema = api(owner).get("/v1/schema?format=json").json()

    operation = schema["paths"]["/v1/conversations/{conversation_id}/events"]["get"]

    assert operation["x-streaming"] is True
    assert "text/event-stream" in operation["responses"]["200"]["content"]


def test_the_event_stream_is_secured_and_documented_like_the_conversation_view(api, owner):
    schema = api(owner).get("/v1/schema?format=json").json()
    operation = schema["paths"]["/v1/conversations/{conversation_id}/events"]["get"]
    view = schema["paths"]["/v1/conversations/{conversation_id}"]["get"]

    # generated clients send the same credentials as for the conversation itself
    assert operation["security"] == view["security"]
    assert {"bearerAuth": []} in operation["security"]
    description = operation["description"]
    for needed in ("event: change", "event: gone", "event: unavailable", "retry:", "Last-Event-ID"):
        assert needed in description, needed
    for kind in KINDS:
        assert f"`{kind}`" in description, kind
    assert "EventSource" in description and "session cookie" in description
    assert "WWW-Authenticate" in operation["responses"]["401"]["headers"]


def test_opening_the_stream_while_the_database_is_down_answers_the_documented_503(
    api, owner, monkeypatch
):
    from django.db import OperationalError

    from extensions_host.surfaces import events

    def unreachable(**_: Any) -> None:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(events, "conversation_get", unreachable)
    # the stream's own connection housekeeping would close the test's transaction
    monkeypatch.setattr(events, "close_old_connections", lambda: None)
    client = api(owner)

    response = client.get("/v1/conversations/c1/events")
    schema = client.get("/v1/schema?format=json").json()

    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    assert response.json()["error"]["cause"] == "unavailable"
    operation = schema["paths"]["/v1/conversations/{conversation_id}/events"]["get"]
    assert "Retry-After" in operation["responses"]["503"]["headers"]


@pytest.mark.postgres
def test_an_event_loop_that_ends_leaves_no_change_hub_behind(db):
    """A stream served through WSGI runs in an event loop of its own: its hub (and the loop)
    must go with it, or every such request would keep both for the life of the process."""

    async def listen_once() -> bool:
        hub = change_hub()
        wake = hub.subscribe("c1")
        for _ in range(500):  # bounded: the LISTEN connection is up within 5 s
            if hub.listening:
                break
            await asyncio.sleep(0.01)
        hub.unsubscribe("c1", wake)
        return hub.listening

    hubs_before = len(live._hubs)

    assert asyncio.run(listen_once())
    gc.collect()
    assert len(live._hubs) == hubs_before
