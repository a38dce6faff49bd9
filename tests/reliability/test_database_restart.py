"""Database restart during load (spec 08): PostgreSQL is restarted while real Celery workers
and beat fire timers and deliver settled runs and lifecycle events, and a real gunicorn server
answers API requests (settles, conversation creates, commands). Nothing is restarted by hand.

Checked: no extension is stopped by it (status running, no stop reason, no failing hook);
requests and sweeps succeed again within 30 s of the database returning; every timer's, settled
run's and lifecycle event's effect exactly once (0 lost, 0 duplicated); a command has its effect
once if it answered 200 and none otherwise.

It restarts the PostgreSQL cluster serving the test database (`pg_ctlcluster <version> <name>
restart`, the cluster found by its port in `pg_lsclusters`: `main` in CI), which other test
runs may share, so it runs only with `RELIABILITY_DISRUPTIVE=1` (CI sets it; its run is
serial) and only as root against a local cluster; the cluster is started again at the end
whatever happened.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from django.db import close_old_connections, connection

from conversations.models import Conversation
from core import clock
from core.services import token_create
from extensions_host.background import tasks
from extensions_host.background.models import SettledCursor, Timer
from extensions_host.background.services.settled import core_cursor
from extensions_host.models import ExtensionRecord, ExtensionStatus, RosterEntry
from tests.conftest import SERVICE_TOKEN
from tests.security.live import gunicorn

from . import exts
from .conftest import claimed_runs, ready, set_timers, wait_until
from .exts import Effect

pytestmark = [
    pytest.mark.integration,
    pytest.mark.postgres,
    pytest.mark.disruptive,
    pytest.mark.skipif(
        os.environ.get("RELIABILITY_DISRUPTIVE") != "1",
        reason="restarts the shared PostgreSQL server: set RELIABILITY_DISRUPTIVE=1 (CI does)",
    ),
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fresh_pools"),
]

EXTENSIONS = exts.HEALTHY_IDS[:4]
TIMERS_PER_EXTENSION = 100
RECOVERY_S = 30.0  # spec 08: requests and sweeps succeed again within 30 s of the return
READY_TIMEOUT_S = 60.0


# --- the PostgreSQL cluster ----------------------------------------------------------------


def _cluster() -> tuple[str, str] | None:
    """(version, name) of the local cluster serving the test database's port (`main` in CI)."""
    if not shutil.which("pg_lsclusters"):
        return None
    port = str(connection.settings_dict.get("PORT") or 5432)
    listed = subprocess.run(
        ["pg_lsclusters", "--no-header"], capture_output=True, text=True, timeout=30, check=False
    )
    for line in listed.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == port:
            return fields[0], fields[1]
    return None


def _pg_ctlcluster(action: str) -> subprocess.CompletedProcess[str]:
    cluster = _cluster()
    assert cluster is not None
    return subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", *cluster, action],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _accepting() -> bool:
    s = connection.settings_dict
    probe = subprocess.run(
        ["pg_isready", "-q", "-h", s.get("HOST") or "127.0.0.1", "-p", str(s.get("PORT") or 5432)],
        timeout=10,
        check=False,
    )
    return probe.returncode == 0


@dataclass
class Restart:
    began: float = 0.0  # monotonic
    returned: float = 0.0  # monotonic: the server accepts connections again
    returned_ms: int = 0  # the same instant, wall clock (hook effects carry wall-clock ms)

    @property
    def outage_s(self) -> float:
        return self.returned - self.began


@pytest.fixture
def restartable_postgres(transactional_db: Any, request: pytest.FixtureRequest) -> Restart:
    """Restarts the test database's PostgreSQL cluster (`.restart()`); whatever happens, the
    cluster is running again and this process's connection is fresh when the test ends (the
    finaliser runs before the database teardown, which needs both)."""
    s = connection.settings_dict
    if s.get("HOST") not in ("127.0.0.1", "localhost", "::1", "", None):
        pytest.skip("the test database is not on a local cluster this test could restart")
    if os.geteuid() != 0 or not shutil.which("pg_ctlcluster") or _cluster() is None:
        pytest.skip("needs root and the test database's cluster in pg_lsclusters (pg_ctlcluster)")

    def running_again() -> None:
        if not _accepting():
            _pg_ctlcluster("start")
        wait_until(_accepting, timeout=READY_TIMEOUT_S, interval=0.2)
        connection.close()  # this process's connection died with the old server

    request.addfinalizer(running_again)
    return Restart()


def restart_postgres(restart: Restart) -> None:
    restart.began = time.monotonic()
    done = _pg_ctlcluster("restart")
    assert done.returncode == 0, done.stdout + done.stderr
    wait_until(_accepting, timeout=READY_TIMEOUT_S, interval=0.05)
    restart.returned = time.monotonic()
    restart.returned_ms = time.time_ns() // 1_000_000


# --- the load through the API ----------------------------------------------------------------


@dataclass
class Call:
    kind: str  # settle, create, poke
    key: str
    started: float  # monotonic
    status: int  # 0: no answer (connection error, timeout)
    ended_ms: int  # wall clock
    body: Any = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass
class Load:
    """API calls in a loop: settle the next claimed run and create a conversation (each retried
    until it succeeds: both are idempotent), and call one command (once, never retried)."""

    url: str
    user_token: str
    run_ids: list[int]
    calls: list[Call] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    iterations: int = 0

    def after(self, instant: float) -> list[Call]:
        return [c for c in self.calls if c.started >= instant]

    def run(self) -> None:
        try:
            with (
                httpx.Client(base_url=self.url, timeout=10) as http,
                httpx.Client(base_url=self.url, timeout=10) as user,
            ):
                http.headers["Authorization"] = f"Bearer {SERVICE_TOKEN}"
                user.headers["Authorization"] = f"Bearer {self.user_token}"
                self._loop(http, user)
        except BaseException as exc:
            self.errors.append(exc)

    def _loop(self, http: httpx.Client, user: httpx.Client) -> None:
        n = 0
        while not self.stop.is_set() and n < len(self.run_ids):
            run_id = self.run_ids[n]
            settle = {"status": "unanswered", "reason": "load"}
            self._until_ok("settle", str(run_id), http, f"/v1/runs/{run_id}/settle", settle)
            cid = f"dbr{n:05}"
            self._until_ok("create", cid, user, "/v1/conversations", {"id": cid})
            extension_id = EXTENSIONS[n % len(EXTENSIONS)]
            path = f"/v1/extensions/{extension_id}/commands/poke"
            self._once("poke", f"{extension_id}/poke-p{n:05}", http, path, {"key": f"p{n:05}"})
            n += 1
            self.iterations = n
            self.stop.wait(0.03)  # pace the load (about 80 requests/s): the machine has 2 cores

    def _once(self, kind: str, key: str, client: httpx.Client, path: str, body: Any) -> Call:
        started = time.monotonic()
        try:
            response = client.post(path, json=body)
            status, answer = response.status_code, _json(response)
        except httpx.TransportError:
            status, answer = 0, None
        call = Call(kind, key, started, status, time.time_ns() // 1_000_000, answer)
        self.calls.append(call)
        return call

    def _until_ok(self, kind: str, key: str, client: httpx.Client, path: str, body: Any) -> Call:
        deadline = time.monotonic() + READY_TIMEOUT_S + RECOVERY_S
        while True:
            call = self._once(kind, key, client, path, body)
            if call.ok:
                return call
            if time.monotonic() > deadline:
                raise AssertionError(f"{kind} {key} never succeeded: {call.status} {call.body}")
            time.sleep(0.1)  # retry pacing, not a timing assumption


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:200]


# --- reading back ----------------------------------------------------------------------------


def effects(extension_id: str) -> dict[str, Effect]:
    rows = ExtensionRecord.objects.filter(extension_id=extension_id, collection="effect")
    return {row.key: Effect.model_validate_json(row.value) for row in rows}


def fresh_connection() -> None:
    """This process's connection died with the old server: drop it (a new one is opened on the
    next query)."""
    close_old_connections()
    connection.close()


# --- the test ----------------------------------------------------------------------------------


def test_a_database_restart_during_load_stops_no_extension_and_loses_or_doubles_nothing(
    install, processes, restartable_postgres, files, owner, tmp_path, settings
):
    settings.AGENT_RUNTIME = "external"  # the load settles the runs itself
    install(*EXTENSIONS)  # settled consumers from the top, lifecycle, timers, a command
    base = core_cursor()
    run_ids = claimed_runs(owner, 2000, "dbs")
    _, user_token = token_create(user=owner, name="load", scope="write", expires_at=None)
    env = {"HOST_AUTO_RESUME": "false", **files.env()}
    processes.worker(concurrency=1, **env)
    processes.worker(concurrency=1, **env)
    processes.beat(processes.log_dir / "beat-schedule", **env)
    ready(processes, 2)
    with gunicorn(
        tmp_path,
        HOST_EXTENSIONS=",".join(exts.paths(*EXTENSIONS)),
        CELERY_BROKER_URL=processes.broker.url,
        HOST_AUTO_RESUME="false",
    ) as server:
        # timers due from 2 s to ~17 s from now: due before, during and after the outage
        first_due = clock.now_ms() + 2000
        due = {f"t{n:03}": first_due + 150 * n for n in range(TIMERS_PER_EXTENSION)}
        for extension_id in EXTENSIONS:
            set_timers(extension_id, due)
        tasks.fire_timers.delay()
        load = Load(url=server.url, user_token=user_token, run_ids=run_ids)
        driver = threading.Thread(target=load.run, name="load", daemon=True)
        driver.start()
        try:
            # load flowing through every path before the restart
            wait_until(
                lambda: load.iterations >= 30
                and sum(k.startswith("timer-") for k in effects(EXTENSIONS[0])) >= 5,
                timeout=60,
                interval=0.2,
            )
            restart = restartable_postgres
            restart_postgres(restart)
            # the load goes on; wait for it to succeed again (bounded), then some more of it
            wait_until(
                lambda: len([c for c in load.after(restart.returned) if c.ok]) >= 60,
                timeout=RECOVERY_S,
                interval=0.1,
            )
        finally:
            load.stop.set()
            driver.join(timeout=READY_TIMEOUT_S + RECOVERY_S + 10)
        assert not driver.is_alive()
        assert not load.errors, load.errors
        server_log = server.output()

    # every timer, settled run and lifecycle event reaches every extension within 30 s of
    # the database returning, with no manual step
    fresh_connection()
    top = core_cursor()
    created = sorted(c.key for c in load.calls if c.kind == "create" and c.ok)

    def caught_up() -> bool:
        if Timer.objects.filter(extension_id__in=EXTENSIONS).exists():
            return False
        positions = dict(
            SettledCursor.objects.filter(pk__in=EXTENSIONS).values_list("pk", "position")
        )
        if any(positions.get(e) != top for e in EXTENSIONS):
            return False
        return all(
            sum(k.startswith("created-") for k in effects(e)) >= len(set(created))
            for e in EXTENSIONS
        )

    remaining = max(restart.returned + RECOVERY_S - time.monotonic(), 1.0)
    wait_until(caught_up, timeout=remaining, interval=0.2)
    caught_up_s = time.monotonic() - restart.returned

    # no extension was stopped by it
    for row in RosterEntry.objects.filter(pk__in=EXTENSIONS):
        assert row.status == ExtensionStatus.RUNNING, (row.pk, row.reason)
        assert (row.reason, row.failing_hook, row.stopped_at) == ("", "", None), row.pk
        assert row.restart_count == 0 and row.last_error == "", (row.pk, row.last_error)
    assert all(proc.poll() is None for proc in processes.procs)  # nothing restarted by hand

    # every effect exactly once: 0 lost, 0 duplicated
    settles = {c.key: c for c in load.calls if c.kind == "settle" and c.ok}
    sequences = sorted(c.body["settled_sequence"] for c in settles.values())
    assert sequences == list(range(base + 1, top + 1))  # the API settled every run once
    answered = {c.key for c in load.calls if c.kind == "poke" and c.ok}
    for extension_id in EXTENSIONS:
        done = effects(extension_id)
        assert {e.n for e in done.values()} == {1}, extension_id
        assert {k for k in done if k.startswith("timer-")} == {f"timer-{k}" for k in due}
        assert [k for k in sorted(done) if k.startswith("settled-")] == [
            f"settled-{seq:06}" for seq in sequences
        ]
        assert {k for k in done if k.startswith("created-")} == {f"created-{c}" for c in created}
        # a command's effect once when it answered 200, none when it did not
        assert {f"{extension_id}/{k}" for k in done if k.startswith("poke-")} == {
            key for key in answered if key.startswith(f"{extension_id}/")
        }
    assert set(created) == set(
        Conversation.objects.filter(pk__startswith="dbr").values_list("pk", flat=True)
    )

    # requests and sweeps succeed again within 30 s of the database returning
    after = load.after(restart.returned)
    failed_after = [c for c in after if not c.ok]
    api_back_s = _recovered_after(after, restart.returned)
    assert api_back_s is not None and api_back_s <= RECOVERY_S
    fired = {
        (e, k): effect.data
        for e in EXTENSIONS
        for k, effect in effects(e).items()
        if k.startswith("timer-")
    }
    late_timer_s = max(
        (ms - max(first_due + 150 * int(k[7:]), restart.returned_ms)) / 1000
        for (_, k), ms in fired.items()
    )
    assert late_timer_s <= RECOVERY_S
    delivered_s = _delivery_after_return(settles, restart.returned_ms)
    assert delivered_s <= RECOVERY_S

    statuses = Counter(f"{c.kind} {c.status}" for c in load.calls if not c.ok)
    during = [c for c in load.calls if restart.began <= c.started < restart.returned]
    tracebacks = server_log.count("Traceback")  # best-effort after-commit steps log theirs
    # while the database is down the API answers 503 (retry), never a server error
    assert not [c for c in load.calls if c.status >= 500 and c.status != 503], statuses
    assert "Internal Server Error" not in server_log  # django.request: an unhandled exception
    print(
        f"\nPostgreSQL restarted under load: down {restart.outage_s:.1f}s; "
        f"{load.iterations} iterations, {len(load.calls)} API calls ({len(during)} during the "
        f"outage); failed answers {dict(statuses)} ({tracebacks} tracebacks in the server log); "
        f"{len(failed_after)} failed after the return; "
        f"API answering again {api_back_s:.2f}s after the return; timers: "
        f"{len(fired)} fired once, latest {late_timer_s:.1f}s after max(due, return); settled: "
        f"{len(sequences)} runs × {len(EXTENSIONS)} consumers once, in order, latest delivered "
        f"{delivered_s:.1f}s after max(settle, return); lifecycle: {len(created)} × "
        f"{len(EXTENSIONS)} once; all caught up {caught_up_s:.1f}s after the return; "
        f"0 extensions stopped"
    )


def _recovered_after(calls: list[Call], instant: float) -> float | None:
    """Seconds from `instant` to the first call from which on every call succeeded."""
    ordered = sorted(calls, key=lambda c: c.started)
    last_failure = max((i for i, c in enumerate(ordered) if not c.ok), default=-1)
    rest = ordered[last_failure + 1 :]
    return (rest[0].started - instant) if rest else None


def _delivery_after_return(settles: dict[str, Call], returned_ms: int) -> float:
    """The latest delivery of a settled run to a consumer, in seconds after the later of its
    settle's answer and the database's return."""
    answered = {c.body["settled_sequence"]: c.ended_ms for c in settles.values()}
    worst = 0.0
    for extension_id in EXTENSIONS:
        for key, effect in effects(extension_id).items():
            if key.startswith("settled-"):
                since = max(answered[int(key[8:])], returned_ms)
                worst = max(worst, (effect.data - since) / 1000)
    return worst
