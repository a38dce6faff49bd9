"""`TestHost`: one extension host for one test, driven through the real services.

Everything here calls the same functions the API views and the Celery tasks call (commands,
frames, the timer sweep, settled delivery, the lifecycle outbox, workers, jobs, notifiers, the
echo runtime). Nothing is mocked: the database is the test database, the clock is a fake host
clock that only moves when the test says so, and background work runs when the test asks for
it (`fire_timers`, `deliver_settled`, `tick`, …) instead of when beat would run it. The test's
transaction never commits, so each method runs the after-commit steps of its work before it
returns (`_host_work`), as a real commit would: a stop's `extension_stopped` event with the full
cause (`stop_cause`), notifications, delivery kicks.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.test import override_settings

from core import clock as host_clock
from core.auth import Principal, user_principal
from core.errors import HostError

T = TypeVar("T")
P = ParamSpec("P")

DEFAULT_USER = "alice"
# A runaway loop in a test (a timer that re-sets itself for "now") must end the test, not hang
# it: background drains stop after this many rounds.
MAX_ROUNDS = 1_000
# the logger Django's own commit reports a failing robust after-commit step to
_commit_logger = logging.getLogger("django.db.backends.base")


@contextmanager
def _run_commit_steps() -> Iterator[None]:
    """A block whose after-commit steps (`transaction.on_commit`) run at its end, as a real
    commit would run them: a stop's `extension_stopped` event (with the full cause) and its
    listeners, `run.settled` notifications, delivery kicks, change publications. The test's
    own transaction never commits, so without this they would never run.

    Unlike `TestCase.captureOnCommitCallbacks`, it takes what it runs off the connection's
    list, so blocks may nest (`tick` → `fire_timers`) and nothing runs twice. Outside a
    transaction (`transaction=True` tests) the steps already ran at each commit."""
    connection = transaction.get_connection()
    start = len(connection.run_on_commit)
    try:
        yield
    finally:
        # the steps a step adds run too, in order (as `run_and_clear_commit_hooks` does)
        while len(connection.run_on_commit) > start:
            _, step, robust = connection.run_on_commit.pop(start)
            if not robust:
                try:
                    step()
                except BaseException:
                    # a failing step ends the commit's steps, as after a real commit
                    del connection.run_on_commit[start:]
                    raise
                continue
            try:
                step()
            except Exception as exc:
                _commit_logger.error(
                    "Error calling %s in on_commit() (%s).",
                    getattr(step, "__qualname__", step),
                    exc,
                    exc_info=True,
                )


def _host_work(method: Callable[P, T]) -> Callable[P, T]:
    """A `TestHost` method that runs host work: its after-commit steps run before it returns
    (`_run_commit_steps`)."""

    @functools.wraps(method)
    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        with _run_commit_steps():
            return method(*args, **kwargs)

    return run


def _api_client() -> Any:
    """A DRF test client whose every request is host work (`_run_commit_steps`)."""
    from rest_framework.test import APIClient

    class HostAPIClient(APIClient):
        def request(self, *args: Any, **kwargs: Any) -> Any:
            with _run_commit_steps():
                return super().request(*args, **kwargs)

    return HostAPIClient()


class _StopEvents(logging.Handler):
    """The causes of the `extension_stopped` events logged during the test, by event id (the
    roster row names its stop's event: `stop_cause`)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.causes: dict[str, str | None] = {}

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) == "extension_stopped":
            self.causes[str(getattr(record, "event_id", ""))] = getattr(record, "cause", None)


@dataclass(frozen=True)
class ExtensionState:
    """An extension's roster row, as staff see it."""

    id: str
    status: str
    reason: str
    failing_hook: str
    revision: str
    admitted_grants: frozenset[str]
    restart_count: int

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def stopped(self) -> bool:
        return self.status == "stopped"


@dataclass(frozen=True)
class SentPrompt:
    """A prompt an extension admitted into a conversation (`ctx.send`, a prompt job)."""

    conversation_id: str
    extension_id: str
    request_id: str
    text: str
    delivery: str
    not_before_ms: int | None
    status: str
    correlation: str | None  # None when the send named none, as the API shows it


@dataclass(frozen=True)
class Turn:
    """One run from claim to settlement: what the runtime received and what it answered."""

    run_id: int
    conversation_id: str
    sequence: int
    input_texts: tuple[str, ...]
    prompt_sections: dict[str, str]
    answer: str
    capture: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class ToolCall:
    """A recorded tool call: its result, or `ok=False` with the reason (the run goes on)."""

    tool_call_id: str
    ok: bool
    result: Any
    reason: str


@contextmanager
def running_host(*, data_dir: Path, start_ms: int | None = None) -> Iterator[TestHost]:
    """A `TestHost` for the duration of the block (the database must be usable: pytest-django's
    `db`). The extensions' directories go under `data_dir`."""
    with ExitStack() as stack:
        stack.enter_context(override_settings(HOST_DATA_DIR=data_dir))
        yield TestHost(stack=stack, start_ms=start_ms)


class TestHost:
    """A host for one test. Get one from the `hyphae_host` fixture (it needs pytest-django's
    database) or from `running_host(...)`."""

    __test__ = False  # not a pytest test class

    def __init__(self, *, stack: ExitStack, start_ms: int | None = None) -> None:
        from extensions_host.runtime import forget_activations

        self._stack = stack
        self.clock = stack.enter_context(host_clock.fake_clock(start_ms))
        self._request_ids = itertools.count(1)
        self._tool_calls = itertools.count(1)
        forget_activations()
        stack.callback(forget_activations)
        self._stops = _StopEvents()
        stops_logger = logging.getLogger("extensions_host.stops")
        stops_logger.addHandler(self._stops)
        stack.callback(stops_logger.removeHandler, self._stops)

    # --- installing -----------------------------------------------------------------------

    @_host_work
    def install(self, *extensions: Any, grants: dict[str, Iterable[str]] | None = None) -> Any:
        """Install exactly these extensions (a later call replaces the set, like a deploy) and
        sync the roster: grants are admitted as requested (`HOST_AUTO_ADMIT`), or only the
        ones listed in `grants={"extension-id": [...]}`. Declared jobs are scheduled from now,
        as a running host's job sweep does within its next tick (so an `advance()` before the
        first `run_jobs()` counts the instants it passes). Returns the sync report."""
        from extensions_host import registry
        from extensions_host.runtime import forget_activations
        from extensions_host.services.roster import extension_admit_grants

        self._stack.enter_context(registry.installed(*extensions))
        forget_activations()
        report = self.sync()
        for extension_id, admitted in (grants or {}).items():
            extension_admit_grants(
                extension_id=extension_id, grants=sorted(admitted), actor="hyphae-testing"
            )
        return report

    @_host_work
    def sync(self) -> Any:
        """Run `sync_roster` again (as a deploy or a process start does), and schedule the
        jobs it declares (as the job sweep's next tick does)."""
        from extensions_host.background.services.jobs import jobs_declared, jobs_ensure
        from extensions_host.services.roster import roster_sync

        report = roster_sync()
        jobs_ensure(jobs_declared())
        return report

    def status(self, extension_id: str) -> ExtensionState:
        from extensions_host.models import RosterEntry

        row = RosterEntry.objects.get(pk=extension_id)
        return ExtensionState(
            id=row.id,
            status=row.status,
            reason=row.reason,
            failing_hook=row.failing_hook,
            revision=row.revision,
            admitted_grants=frozenset(row.admitted_grants or ()),
            restart_count=row.restart_count,
        )

    @_host_work
    def resume(self, extension_id: str, *, actor: str = "staff") -> ExtensionState:
        """Resume a stopped extension, as staff do from the admin."""
        from extensions_host.services.roster import extension_resume

        extension_resume(extension_id=extension_id, actor=actor)
        return self.status(extension_id)

    @_host_work
    def set_settings(self, extension_id: str, value: dict[str, Any]) -> dict[str, Any]:
        """Edit the extension's settings as staff do (validated against its settings model)."""
        from extensions_host.contributions.services.stores import settings_edit

        return settings_edit(extension_id=extension_id, value=value, actor="staff")

    @_host_work
    def set_secret(self, extension_id: str, key: str, value: str | None) -> None:
        """Set, replace or (with None) delete a secret as staff do in the admin (encrypted,
        audited with the key only)."""
        from extensions_host.contributions.services.stores import secret_edit

        secret_edit(extension_id=extension_id, key=key, value=value, actor="staff")

    def stop_cause(self, extension_id: str) -> str | None:
        """The full cause of the extension's current stop, as its `extension_stopped` log event
        carries it (exception type, message and traceback, secrets redacted); None when it is
        not stopped or the stop had no exception (a deadline, a missing handler)."""
        from extensions_host.models import RosterEntry

        event_id = (
            RosterEntry.objects.filter(pk=extension_id, status="stopped")
            .values_list("stop_event_id", flat=True)
            .first()
        )
        return self._stops.causes.get(event_id) if event_id else None

    # --- people and conversations ---------------------------------------------------------

    def user(self, username: str = DEFAULT_USER, *, staff: bool = False) -> Any:
        """The user `username` (created on first use; staff users are superusers)."""
        users = get_user_model().objects
        found = users.filter(username=username).first()
        if found is not None:
            return found
        if staff:
            return users.create_superuser(username=username, email="", password=None)
        return users.create_user(username=username, password=None)

    def principal(self, user: Any = None) -> Principal:
        return user_principal(self._user(user), "token")

    @_host_work
    def conversation(
        self, conversation_id: str = "c1", *, owner: Any = None, name: str = ""
    ) -> str:
        """Create the conversation (idempotent for the same owner) and return its id."""
        from conversations.services import conversation_create

        created = conversation_create(
            principal=self.principal(owner), conversation_id=conversation_id, name=name
        )
        return created.conversation.pk

    @_host_work
    def submit(
        self, conversation_id: str, text: str, *, user: Any = None, request_id: str | None = None
    ) -> int:
        """The user submits a prompt (as `POST …/submissions` does). Returns the submission."""
        from conversations.services import submission_submit

        admission = submission_submit(
            principal=self.principal(user or self._owner_of(conversation_id)),
            conversation_id=conversation_id,
            parts=[{"type": "text", "text": text}],
            request_id=request_id or f"hyphae-testing-{next(self._request_ids)}",
        )
        return admission.submission.pk

    # --- calling the extension --------------------------------------------------------------

    @_host_work
    def command(
        self,
        extension_id: str,
        name: str,
        input: dict[str, Any] | None = None,
        *,
        conversation_id: str | None = None,
        user: Any = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """Call an extension command as `POST …/commands/{name}` does (same checks, same frame,
        same error mapping). A conversation-scoped command needs `conversation_id`; the caller
        defaults to the conversation's owner. Errors raise `core.errors.HostError` (its
        `.status` is the HTTP status the API would answer)."""
        from extensions_host.services.commands import command_call

        if user is None and conversation_id is not None:
            user = self._owner_of(conversation_id)
        result = command_call(
            principal=self.principal(user),
            extension_id=extension_id,
            name=name,
            scope="conversation" if conversation_id is not None else "global",
            conversation_id=conversation_id,
            body=input if input is not None else {},
            idempotency_key=idempotency_key,
        )
        return result.body

    @_host_work
    def transact(self, extension_id: str, fn: Callable[[Any], T]) -> T:
        """Run `fn(ctx)` in a full frame of the extension, as its own route or worker code does
        with `ctx.transact` (typed errors are raised as they are; a defect stops it)."""
        from extensions_host.runtime import detached_context

        ctx = detached_context(extension_id=extension_id, hook="hyphae-testing")
        if ctx is None:
            raise LookupError(f"Extension {extension_id} is not installed")
        return ctx.transact(fn)

    @_host_work
    def read(self, extension_id: str, fn: Callable[[Any], T]) -> T:
        """Run `fn(ctx)` with a context of the extension outside any frame (reads only)."""
        from extensions_host.runtime import detached_context

        ctx = detached_context(extension_id=extension_id, hook="hyphae-testing")
        if ctx is None:
            raise LookupError(f"Extension {extension_id} is not installed")
        return fn(ctx)

    def api(self, user: Any = None, *, scope: str = "write") -> Any:
        """A DRF test client authenticated with a real API token of `user` (default: the
        default user); each request runs its after-commit steps before it returns, as every
        method here does. Anonymous requests: `api_anonymous()`."""
        from core.services import token_create

        client = _api_client()
        _, raw = token_create(
            user=self._user(user), name="hyphae-testing", scope=scope, expires_at=None
        )
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    def api_anonymous(self) -> Any:
        return _api_client()

    @_host_work
    def route(
        self,
        method: str,
        extension_id: str,
        path: str,
        *,
        json: Any = None,
        user: Any = None,
        anonymous: bool = False,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Call an extension route at `/v1/ext/<extension_id>/<path>` over HTTP (the real
        middleware, auth, body limit and dispatch). Returns the test response."""
        client = self.api_anonymous() if anonymous else self.api(user)
        call = getattr(client, method.lower())
        url = f"/v1/ext/{extension_id}/{path}"
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in (headers or {}).items()}
        if json is None:
            return call(url, **extra)
        return call(url, data=json, format="json", **extra)

    @_host_work
    def answer_interaction(
        self, conversation_id: str, call_id: str, answer: Any, *, user: Any = None
    ) -> Any:
        """The user answers a pending interaction through the API
        (`POST /v1/conversations/{cid}/interactions/{call_id}/answer`)."""
        client = self.api(user or self._owner_of(conversation_id))
        return client.post(
            f"/v1/conversations/{conversation_id}/interactions/{call_id}/answer",
            data={"answer": answer},
            format="json",
        )

    # --- the runtime side: claims and settlements --------------------------------------------

    @_host_work
    def settle(
        self,
        conversation_id: str,
        text: str | None = "hello",
        *,
        answer: str | None = None,
        user: Any = None,
        outcome: str = "answered",
    ) -> Turn:
        """One agent turn: the user submits `text` (None: use what is queued), the runtime
        claims (prompt sections are captured from the extensions), appends `answer` (default:
        the echo runtime's answer) and settles. Delivery to `on_settled` consumers happens on
        `deliver_settled()` or `tick()`, as beat would do it."""
        return self.answer(self.claim(conversation_id, text, user=user), answer, outcome=outcome)

    @_host_work
    def claim(self, conversation_id: str, text: str | None = "hello", *, user: Any = None) -> int:
        """The first half of a turn: the user submits `text` (None: use what is queued) and the
        runtime claims the run (prompt sections and tools are captured). Returns the run id,
        for `tool_call` and `answer`."""
        from conversations.services import run_claim

        if text is not None:
            self.submit(conversation_id, text, user=user)
        claim = run_claim(conversation_id=conversation_id)
        if claim is None:
            raise LookupError(f"Nothing to claim in conversation {conversation_id}")
        return claim.run.pk

    @_host_work
    def tool_call(
        self,
        run_id: int,
        extension_id: str,
        tool: str,
        arguments: dict[str, Any],
        *,
        tool_call_id: str | None = None,
    ) -> ToolCall:
        """The runtime calls a tool of a claimed run, as `POST /v1/runs/{id}/tool-calls` does:
        the handler runs in a frame and its result (or the bounded reason of a failure) is
        recorded. Bad arguments or a tool the claim did not offer raise `HostError`."""
        from extensions_host.surfaces.services.toolcalls import tool_call_execute

        call_id = tool_call_id or f"call-{next(self._tool_calls)}"
        record = tool_call_execute(
            run_id=run_id,
            tool_call_id=call_id,
            extension_id=extension_id,
            tool=tool,
            arguments=arguments,
        ).record
        return ToolCall(
            tool_call_id=call_id, ok=record.ok, result=record.result, reason=record.reason
        )

    @_host_work
    def respond(self) -> list[Turn]:
        """The built-in echo runtime: claim every runnable conversation and answer it (what the
        `echo_sweep` beat task does). Returns the turns, oldest work first."""
        from conversations.services import run_claim

        turns: list[Turn] = []
        for _ in range(MAX_ROUNDS):
            claim = run_claim()
            if claim is None:
                return turns
            turns.append(self.answer(claim.run.pk))
        raise RuntimeError("respond(): the runtime never ran out of work")

    @_host_work
    def answer(self, run_id: int, answer: str | None = None, *, outcome: str = "answered") -> Turn:
        """The second half of a turn: the runtime appends `answer` (default: the echo
        runtime's) to a claimed run and settles it."""
        from conversations import echo
        from conversations.models import Run
        from conversations.services import entry_append, run_settle
        from extensions_host.surfaces.services.participation import run_info

        run = Run.objects.get(pk=run_id)
        info = run_info(run)
        capture = dict(run.capture or {})
        text = answer
        if text is None:
            text = echo.echo_text(input_texts=list(info.input_texts), capture=capture)
        if outcome == "answered":
            appended = entry_append(
                conversation_id=run.conversation_id,
                run_id=run.pk,
                role="assistant",
                content=[{"type": "text", "text": text}],
                entry_key="hyphae-testing-answer",
            )
            settled = run_settle(
                run_id=run.pk, status="answered", answer_entry_id=appended.entry.pk
            )
        else:
            settled = run_settle(run_id=run.pk, status="unanswered", reason=text or "unanswered")
        # a settled run always has its sequence (`Run`'s check constraint)
        assert settled.run.settled_sequence is not None
        return Turn(
            run_id=run.pk,
            conversation_id=run.conversation_id,
            sequence=settled.run.settled_sequence,
            input_texts=tuple(info.input_texts),
            prompt_sections={s["name"]: s["text"] for s in capture.get("prompt_sections") or []},
            answer=text or "",
            capture=capture,
        )

    # --- time and background work -------------------------------------------------------------

    def advance(self, *, seconds: float = 0, ms: int = 0) -> int:
        """Move the host clock forward (nothing runs until you ask: see `tick`)."""
        return self.clock.advance(ms=ms, seconds=seconds)

    @_host_work
    def fire_timers(self) -> int:
        """Fire every due timer (the `fire_timers` sweep). Returns how many fired."""
        from extensions_host.background.services.timers import PAGE, timers_fire_page

        fired = 0
        for _ in range(MAX_ROUNDS):
            page = timers_fire_page()
            fired += page.fired
            if page.claimed < PAGE or page.progressed == 0:
                return fired
        raise RuntimeError("fire_timers(): timers kept coming due")

    @_host_work
    def deliver_settled(self, extension_id: str | None = None) -> int:
        """Deliver settled runs to every `settled` consumer that is behind (or to one).
        Returns how many runs were delivered in all."""
        from extensions_host.background.models import SettledCursor
        from extensions_host.background.services.settled import (
            settled_consumers_behind,
            settled_deliver_all,
        )

        behind = settled_consumers_behind()
        targets = [e for e in behind if extension_id in (None, e)]
        before = dict(SettledCursor.objects.filter(pk__in=targets).values_list("pk", "position"))
        for consumer in targets:
            for _ in range(MAX_ROUNDS):
                if not settled_deliver_all(extension_id=consumer):
                    break
        after = dict(SettledCursor.objects.filter(pk__in=targets).values_list("pk", "position"))
        return sum(after[e] - before.get(e, after[e]) for e in after)

    @_host_work
    def emit_lifecycle(self, kind: str, conversation_id: str = "", **payload: Any) -> None:
        """Record a lifecycle event in the outbox (as the services that cause them do) and
        deliver it: handlers run in their frames, woken workers run."""
        from core.services import lifecycle_record

        data = dict(payload)
        if conversation_id and kind != "conversation_forked":
            data.setdefault("conversation_id", conversation_id)
        with transaction.atomic():
            lifecycle_record(kind=kind, conversation_id=conversation_id, payload=data)
        self.deliver_lifecycle()

    @_host_work
    def deliver_lifecycle(self) -> None:
        """Fan out the outbox, deliver pending events to every subscriber, run woken workers."""
        from extensions_host.background.services.lifecycle import (
            lifecycle_deliver_all,
            lifecycle_fanout_all,
            lifecycle_pending_extensions,
        )

        for _ in range(MAX_ROUNDS):
            if not lifecycle_fanout_all():
                break
        for extension_id in lifecycle_pending_extensions():
            for _ in range(MAX_ROUNDS):
                if not lifecycle_deliver_all(extension_id=extension_id):
                    break
        self.run_workers()

    @_host_work
    def detect_idle(self) -> int:
        """Emit `conversation_idle` for conversations idle past `IDLE_AFTER_SECONDS` (host
        clock) and deliver it. Returns how many were emitted."""
        from extensions_host.background.services.idle import conversations_detect_idle

        emitted = 0
        for _ in range(MAX_ROUNDS):
            count, more = conversations_detect_idle()
            emitted += count
            if not more:
                break
        self.deliver_lifecycle()
        return emitted

    @_host_work
    def run_workers(self) -> dict[str, str]:
        """Run every worker with a pending wake. Returns `{worker id: outcome}`."""
        from extensions_host.background.models import WorkerState
        from extensions_host.background.services.workers import worker_id, worker_run

        outcomes: dict[str, str] = {}
        for _ in range(MAX_ROUNDS):
            pending = list(
                WorkerState.objects.filter(pending_wake__isnull=False).values_list(
                    "extension_id", "name"
                )
            )
            ran = False
            for extension_id, name in pending:
                outcome = worker_run(extension_id=extension_id, name=name)
                outcomes[worker_id(extension_id, name)] = outcome
                ran = ran or outcome in ("ok", "failed")
            if not ran:
                return outcomes
        raise RuntimeError("run_workers(): workers kept waking")

    @_host_work
    def run_jobs(self) -> None:
        """Run every due job (the `run_jobs` sweep)."""
        from extensions_host.background.services.jobs import jobs_run_due

        for _ in range(MAX_ROUNDS):
            if not jobs_run_due():
                return
        raise RuntimeError("run_jobs(): jobs kept coming due")

    @_host_work
    def trigger_job(self, job_id: str) -> str:
        """Staff run a job now (`POST /v1/jobs/{id}/trigger`); returns the run's outcome."""
        from extensions_host.background.services.jobs import job_run, job_trigger

        job_trigger(job_id=job_id, actor="staff")
        return job_run(job_id=job_id)

    @_host_work
    def jobs(self) -> dict[str, dict[str, Any]]:
        """Every declared job with next/last run, outcome and counters (as `GET /v1/jobs`)."""
        from extensions_host.background.services.jobs import jobs_list

        return {row["id"]: row for row in jobs_list()}

    def workers(self) -> dict[str, dict[str, Any]]:
        """Every declared worker with its last run, outcome and error (as `GET /v1/meta`): the
        outcome of a worker that `deliver_lifecycle()` or `detect_idle()` woke and ran."""
        from extensions_host.background.services.workers import workers_summary

        return {row["id"]: row for row in workers_summary()}

    @_host_work
    def notify(
        self,
        type: str,
        title: str,
        *,
        body: str = "",
        conversation_id: str | None = None,
        job_id: str | None = None,
        user: Any = None,
    ) -> None:
        """Record a notification event (as the host does for `interaction.pending`,
        `job.failed`, `run.settled`); `deliver_notifications()` hands it to the notifiers."""
        from extensions_host.contributions.services.notify import notification_emit

        with transaction.atomic():
            notification_emit(
                type=type,
                user=user,
                title=title,
                body=body,
                conversation_id=conversation_id,
                job_id=job_id,
            )

    @_host_work
    def deliver_notifications(self) -> list[str]:
        """Deliver every due notification to its notifier (the worker's task body). Returns
        the outcomes (`delivered`, `retry`, `failed`, …) in delivery order."""
        from extensions_host.contributions.models import DeliveryStatus, NotificationDelivery
        from extensions_host.contributions.services.notify import notification_deliver

        due = NotificationDelivery.objects.filter(
            status__in=[DeliveryStatus.PENDING, DeliveryStatus.IN_FLIGHT],
            next_attempt_at__lte=self.clock.now_ms(),
        ).values_list("pk", flat=True)
        return [notification_deliver(delivery_id=pk) for pk in list(due)]

    @_host_work
    def tick(self, seconds: float = 1) -> None:
        """One beat tick after `seconds`: advance the clock, then run what beat runs every
        tick — fire timers, the echo runtime, settled delivery, the lifecycle outbox and its
        workers, due jobs, notifier deliveries."""
        if seconds:
            self.advance(seconds=seconds)
        self.fire_timers()
        self.respond()
        self.deliver_settled()
        self.deliver_lifecycle()
        self.run_jobs()
        self.deliver_notifications()

    @_host_work
    def run_for(self, seconds: float, *, step: float = 1) -> None:
        """`tick` every `step` seconds for `seconds` seconds of host time."""
        steps = int(seconds / step)
        for _ in range(steps):
            self.tick(step)

    # --- reads to assert on --------------------------------------------------------------------

    @_host_work
    def records(self, extension_id: str, collection: str, *, index: str | None = None) -> list[Any]:
        """Every record of the collection (decoded with its model), in key order."""
        spec, _ = self._collection(extension_id, collection)
        from extensions_host.services.records import MAX_PAGE, record_page

        found: list[Any] = []
        after: str | None = None
        while True:
            page = record_page(
                extension_id=extension_id,
                collection=collection,
                spec=spec,
                limit=MAX_PAGE,
                after=after,
                index=index,
            )
            found.extend(page)
            if len(page) < MAX_PAGE:
                return found
            after = spec.key(page[-1])

    @_host_work
    def record(self, extension_id: str, collection: str, key: str) -> Any:
        from extensions_host.services.records import record_get

        spec, _ = self._collection(extension_id, collection)
        return record_get(extension_id=extension_id, collection=collection, spec=spec, key=key)

    @_host_work
    def document(self, extension_id: str, name: str, conversation_id: str) -> Any:
        """The extension's document of that conversation (its initial value when unset)."""
        from extensions_host import registry
        from extensions_host.services.documents import document_read, document_spec

        loaded = registry.get(extension_id)
        if loaded is None:
            raise LookupError(f"Extension {extension_id} is not installed")
        spec = document_spec(loaded.definition, name)
        return document_read(
            extension_id=extension_id, name=name, spec=spec, conversation_id=conversation_id
        )

    def timers(self, extension_id: str) -> dict[str, int]:
        """Pending timers of the extension: key → due_at (epoch ms)."""
        from extensions_host.background.models import Timer

        return dict(
            Timer.objects.filter(extension_id=extension_id)
            .order_by("key")
            .values_list("key", "due_at")
        )

    @_host_work
    def attention(self, conversation_id: str) -> list[dict[str, Any]]:
        """The conversation's visible attention items (as the conversation view shows them)."""
        from extensions_host.surfaces.selectors import attention_visible

        return attention_visible(conversation_id=conversation_id)

    @_host_work
    def ambient(self, conversation_id: str) -> list[dict[str, Any]]:
        from extensions_host.surfaces.selectors import ambient_visible

        return ambient_visible(conversation_id=conversation_id)

    @_host_work
    def interactions(self, conversation_id: str) -> list[dict[str, Any]]:
        from extensions_host.surfaces.selectors import interactions_of
        from extensions_host.surfaces.services.interactions import interaction_wire

        rows = interactions_of(conversation_id=conversation_id).order_by("pk")
        return [interaction_wire(row) for row in rows]

    @_host_work
    def projection(self, conversation_id: str, *, user: Any = None) -> dict[str, Any]:
        """The projection slots by extension id (`GET …/projection`'s `slots`)."""
        from extensions_host.services.projection import projection_build

        principal = self.principal(user or self._owner_of(conversation_id))
        return projection_build(principal=principal, conversation_id=conversation_id)["slots"]

    @_host_work
    def view(self, conversation_id: str, *, user: Any = None) -> dict[str, Any]:
        """`GET /v1/conversations/{id}` over HTTP: the conversation view a front end (and the
        inspector) reads, with visible attention and ambient surfaces."""
        response = self.api(user or self._owner_of(conversation_id)).get(
            f"/v1/conversations/{conversation_id}"
        )
        if response.status_code != 200:
            raise HostError("store", "not_found", f"view answered {response.status_code}")
        return response.json()

    def sent(
        self, conversation_id: str | None = None, *, extension_id: str | None = None
    ) -> list[SentPrompt]:
        """Prompts extensions admitted (`ctx.send`, prompt jobs), oldest first."""
        from conversations.models import Submission
        from conversations.selectors import entry_text

        rows = Submission.objects.filter(origin_kind="extension").select_related("entry")
        if conversation_id is not None:
            rows = rows.filter(conversation_id=conversation_id)
        if extension_id is not None:
            rows = rows.filter(origin_extension_id=extension_id)
        return [
            SentPrompt(
                conversation_id=row.conversation_id,
                extension_id=row.origin_extension_id,
                request_id=row.request_id,
                text=_submission_text(row, entry_text),
                delivery=row.delivery,
                not_before_ms=host_clock.to_ms(row.not_before) if row.not_before else None,
                status=row.status,
                correlation=row.correlation or None,
            )
            for row in rows.order_by("pk")
        ]

    def transcript(self, conversation_id: str) -> list[tuple[str, str]]:
        """`(role, text)` of every entry, in order."""
        from conversations.models import Entry
        from conversations.selectors import entry_text

        rows = Entry.objects.filter(conversation_id=conversation_id).order_by("pk")
        return [(row.role, entry_text(row.content)) for row in rows]

    # --- helpers ---------------------------------------------------------------------------------

    def _user(self, user: Any) -> Any:
        if user is None:
            return self.user()
        if isinstance(user, str):
            return self.user(user)
        return user

    def _owner_of(self, conversation_id: str) -> Any:
        from conversations.models import Conversation

        row = Conversation.objects.filter(
            Q(pk=conversation_id) & Q(owner__isnull=False)
        ).select_related("owner")
        found = row.first()
        return found.owner if found is not None else self.user()

    def _collection(self, extension_id: str, collection: str) -> tuple[Any, Any]:
        from extensions_host import registry
        from extensions_host.services.records import collection_spec

        loaded = registry.get(extension_id)
        if loaded is None:
            raise LookupError(f"Extension {extension_id} is not installed")
        return collection_spec(loaded.definition, collection), loaded


def _submission_text(row: Any, entry_text: Callable[[Any], str]) -> str:
    entry = getattr(row, "entry", None)
    if entry is not None:
        return entry_text(entry.content)
    return entry_text(row.parts)
