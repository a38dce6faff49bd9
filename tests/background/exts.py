"""Test extensions for background work, built by functions so a test can vary hooks and grants.
(Extensions that real worker processes load live in `tests/background/worker_exts.py`.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from extensions_host.background.declarations import Job, JobRun, add_job
from extensions_host.background.models import JobState
from extensions_host.background.services.jobs import job_run, jobs_run_due
from extensions_host.sdk import Collection, Document, Extension, Retry

GRANTS = {"state", "timers", "settled", "lifecycle", "send"}


class Effect(BaseModel):
    key: str
    n: int = 0
    data: Any = None


class Pad(BaseModel):
    text: str = ""


def make_ext(
    ext_id: str = "alpha",
    *,
    grants: set[str] | None = None,
    on_timer: Callable[..., Any] | None = None,
    on_settled: Callable[..., Any] | None = None,
    lifecycle: dict[str, Callable[..., Any]] | None = None,
    shutdown: Callable[..., Any] | None = None,
    version: str = "1.0.0",
    **extra: Any,
) -> Extension:
    """An extension with an `effect` collection and a `pad` document."""
    ext = Extension(
        id=ext_id,
        version=version,
        grants=GRANTS if grants is None else grants,
        collections={"effect": Collection(Effect, key=lambda e: e.key)},
        documents={"pad": Document(Pad)},
        **extra,
    )
    if on_timer is not None:
        ext.on_timer(on_timer)
    if on_settled is not None:
        ext.on_settled(on_settled)
    for kind, handler in (lifecycle or {}).items():
        ext.on_lifecycle(kind)(handler)
    if shutdown is not None:
        ext.shutdown(shutdown)
    return ext


def record_timer(ctx: Any, timer: Any) -> None:
    """An on_timer hook writing one effect per firing: key = timer key, data = the event."""
    ctx.collection("effect").put(
        Effect(key=timer.key, n=timer.due_at, data=[timer.due_at, timer.fired_at])
    )


def effects(extension_id: str) -> dict[str, Effect]:
    from extensions_host.models import ExtensionRecord

    rows = ExtensionRecord.objects.filter(extension_id=extension_id, collection="effect")
    return {row.key: Effect.model_validate_json(row.value) for row in rows}


JOB = "ext:alpha:tick"


class Runs:
    """A job action that records its runs; `fail` makes it raise, `advance_ms` makes it take
    that long on the fake clock."""

    def __init__(self, clock: Any = None, *, advance_ms: int = 0) -> None:
        self.runs: list[JobRun] = []
        self.fail: BaseException | None = None
        self.clock = clock
        self.advance_ms = advance_ms

    def __call__(self, ctx: Any, run: JobRun) -> None:
        if self.fail is not None:
            raise self.fail
        self.runs.append(run)
        ctx.collection("effect").put(Effect(key=str(run.scheduled_for)))
        if self.advance_ms:
            self.clock.advance(ms=self.advance_ms)  # a run that takes this long

    @property
    def instants(self) -> list[int]:
        return [run.scheduled_for for run in self.runs]


def job_ext(
    action: Any, *, grants: set[str] | None = None, version: str = "1.0.0", **job: Any
) -> Extension:
    """`alpha` with one job, `tick` (every 10 s unless told)."""
    ext = make_ext("alpha", grants=grants, version=version)
    job.setdefault("every_seconds", 10)
    add_job(ext, Job("tick", action=action, **job))
    return ext


def job_retrying(install: Any, fake_clock: Any, **job: Any) -> tuple[Runs, int]:
    """`alpha`'s job `tick` (`job_ext`), run at its first instant and answered with a 30 s
    `Retry`: its runs (still failing) and that instant."""
    runs = Runs()
    runs.fail = Retry(30, "later")
    install(job_ext(runs, **job))
    jobs_run_due()
    first = JobState.objects.get(pk=JOB).next_run_at
    fake_clock.set(first)
    assert job_run(job_id=JOB) == "retry"
    return runs, first
