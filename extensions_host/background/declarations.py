"""What an extension declares for background work: idle `Worker`s and scheduled `Job`s.

Pure data plus functions (no Django import), so these types can move into the SDK as they are.
Authors import them from `extensions_host.sdk` and declare them with the extension, or attach
them later with `add_worker`/`add_job` (the same checks):

```python
from extensions_host.sdk import Extension, Job, PromptAction, Worker, add_job

curator = Extension(..., workers=[Worker("tidy", wake_on=["conversation_idle"], run=tidy)],
                    jobs=[Job("nightly", schedule="0 3 * * *", action=nightly_task)])
add_job(curator, Job("nudge", every_seconds=3600,
                     action=PromptAction(conversation_id="inbox", text="Anything new?")))
```

Both are part of the extension's contract (`Worker.contract`, `Job.contract`): a new worker or
schedule is a new revision.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from croniter import croniter

from extensions_host.sdk.context import Context
from extensions_host.sdk.contributions import NAME_RE, check_deadline
from extensions_host.sdk.definition import LIFECYCLE_EVENTS, DefinitionError, Extension

MAX_PROMPT_CHARS = 16_384

Overlap = Literal["skip", "buffer_one"]
CatchUp = Literal["skip", "once"]


@dataclass(frozen=True)
class WorkerWake:
    """What woke a worker run: the lifecycle event and its conversation ("" for none)."""

    event: str
    conversation_id: str


@dataclass(frozen=True)
class Worker:
    """An idle worker: `run(ctx, wake)` runs outside any transaction (it may call slow
    services) and writes through `ctx.transact(fn)`. One run at a time per worker across the
    cluster; wakes during a run coalesce into one pending wake (last wins)."""

    name: str
    wake_on: tuple[str, ...]
    run: Callable[[Context, WorkerWake], object]
    deadline_s: float | None = None

    def __init__(
        self,
        name: str,
        *,
        wake_on: Iterable[str],
        run: Callable[[Context, WorkerWake], object],
        deadline_s: float | None = None,
    ) -> None:
        events = tuple(wake_on) if not isinstance(wake_on, str) else (wake_on,)
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise DefinitionError(f"Worker name {name!r} must match {NAME_RE.pattern}")
        if not events:
            raise DefinitionError(f"Worker {name}: wake_on is required and may not be empty")
        if "shutdown" in events:
            raise DefinitionError(
                f"Worker {name}: wake_on may not contain shutdown (workers stop before it)"
            )
        unknown = sorted(set(events) - LIFECYCLE_EVENTS)
        if unknown:
            raise DefinitionError(f"Worker {name}: unknown wake_on events {unknown}")
        if not callable(run):
            raise DefinitionError(f"Worker {name}: run must be a function")
        check_deadline(deadline_s, f"Worker {name}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "wake_on", events)
        object.__setattr__(self, "run", run)
        object.__setattr__(self, "deadline_s", deadline_s)

    def contract(self) -> dict[str, Any]:
        """What the extension's revision hashes of this worker (not its deadline: like a
        route's, staff may override it)."""
        return {"wake_on": sorted(self.wake_on)}


@dataclass(frozen=True)
class PromptAction:
    """A job action that submits `text` into the conversation `conversation_id` as the
    extension (needs the `send` grant as well as `timers`)."""

    conversation_id: str
    text: str

    def __post_init__(self) -> None:
        if not isinstance(self.conversation_id, str) or not re.match(
            r"\A[A-Za-z0-9_-]{1,64}\Z", self.conversation_id
        ):
            raise DefinitionError("PromptAction conversation_id must be a conversation id")
        if not isinstance(self.text, str) or not 1 <= len(self.text) <= MAX_PROMPT_CHARS:
            raise DefinitionError(f"PromptAction text must be 1..{MAX_PROMPT_CHARS} characters")


@dataclass(frozen=True)
class JobRun:
    """What a job's task action receives: which instant it runs for (epoch ms; the trigger
    time for a manual run) and whether staff triggered it."""

    job_id: str
    scheduled_for: int
    fired_at: int
    manual: bool = False
    missed_runs: int = 0


@dataclass(frozen=True)
class Job:
    """A declared job: `schedule` (a cron expression, UTC) or `every_seconds`, and an action —
    a task `fn(ctx, run: JobRun)` run in the extension's own frame, or a `PromptAction`.

    `overlap`: a job never runs twice at once; an instant that comes due while it runs is
    skipped (`skip`, counted) or run once right after (`buffer_one`). `catch_up`: instants
    missed while the host or the extension was down are counted and skipped (`skip`) or run
    once (`once`).
    """

    name: str
    action: Callable[[Context, JobRun], object] | PromptAction
    schedule: str | None = None
    every_seconds: int | None = None
    overlap: Overlap = "skip"
    catch_up: CatchUp = "skip"
    deadline_s: float | None = None
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        where = f"Job {self.name}"
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise DefinitionError(f"Job name {self.name!r} must match {NAME_RE.pattern}")
        if (self.schedule is None) == (self.every_seconds is None):
            raise DefinitionError(f"{where}: give exactly one of schedule or every_seconds")
        if self.schedule is not None and (
            not isinstance(self.schedule, str) or not croniter.is_valid(self.schedule)
        ):
            raise DefinitionError(f"{where}: schedule {self.schedule!r} is not a cron expression")
        if self.every_seconds is not None and (
            isinstance(self.every_seconds, bool)
            or not isinstance(self.every_seconds, int)
            or self.every_seconds < 1
        ):
            raise DefinitionError(f"{where}: every_seconds must be an integer >= 1")
        if not (isinstance(self.action, PromptAction) or callable(self.action)):
            raise DefinitionError(f"{where}: action must be a function or a PromptAction")
        if self.overlap not in ("skip", "buffer_one"):
            raise DefinitionError(f"{where}: overlap must be 'skip' or 'buffer_one'")
        if self.catch_up not in ("skip", "once"):
            raise DefinitionError(f"{where}: catch_up must be 'skip' or 'once'")
        check_deadline(self.deadline_s, where)

    @property
    def action_kind(self) -> Literal["task", "prompt"]:
        return "prompt" if isinstance(self.action, PromptAction) else "task"

    @property
    def schedule_text(self) -> str:
        return self.schedule if self.schedule is not None else f"every {self.every_seconds}s"

    def contract(self) -> dict[str, Any]:
        """What the extension's revision hashes of this job: when and what it runs (not its
        deadline nor its description)."""
        action = self.action
        return {
            "schedule": self.schedule,
            "every_seconds": self.every_seconds,
            "overlap": self.overlap,
            "catch_up": self.catch_up,
            "action": dataclasses.asdict(action) if isinstance(action, PromptAction) else "task",
        }


def job_id(extension_id: str, name: str) -> str:
    return f"ext:{extension_id}:{name}"


def add_worker(extension: Extension, worker: Worker) -> Worker:
    """Attach a worker to an extension definition (names unique per extension)."""
    if not isinstance(worker, Worker):
        raise DefinitionError("add_worker takes a Worker")
    _require_grant(extension, "lifecycle", f"worker {worker.name}")
    current = workers_of(extension)
    if any(w.name == worker.name for w in current):
        raise DefinitionError(f"Extension {extension.id}: worker {worker.name} is defined twice")
    extension.workers = (*current, worker)
    return worker


def add_job(extension: Extension, job: Job) -> Job:
    """Attach a job to an extension definition (names unique per extension)."""
    if not isinstance(job, Job):
        raise DefinitionError("add_job takes a Job")
    _require_grant(extension, "timers", f"job {job.name}")
    if job.action_kind == "prompt":
        _require_grant(extension, "send", f"prompt job {job.name}")
    current = jobs_of(extension)
    if any(j.name == job.name for j in current):
        raise DefinitionError(f"Extension {extension.id}: job {job.name} is defined twice")
    extension.jobs = (*current, job)
    return job


def _require_grant(extension: Extension, grant: str, what: str) -> None:
    """A declaration that could never run without its grant is refused at definition, as
    contributions are (spec 03: workers need `lifecycle`, jobs `timers`, prompt jobs `send`)."""
    if grant not in extension.grants:
        raise DefinitionError(
            f"Extension {extension.id}: declares {what} but does not request the {grant} grant"
        )


def workers_of(extension: Extension) -> tuple[Worker, ...]:
    return extension.workers


def jobs_of(extension: Extension) -> tuple[Job, ...]:
    return extension.jobs
