"""What `Extension(...)` refuses at definition, and what its revision hashes: a projection needs
its schema; workers and jobs are part of the contract, only when present."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from extensions_host.registry import revision_of
from extensions_host.sdk import (
    Collection,
    Context,
    DefinitionError,
    Document,
    Extension,
    Job,
    JobRun,
    PromptAction,
    Route,
    Worker,
    WorkerWake,
    add_job,
    add_worker,
)


class Note(BaseModel):
    id: str
    conversation_id: str
    text: str = Field(min_length=1, max_length=300)


class Pad(BaseModel):
    lines: list[str] = []


class Board(BaseModel):
    count: int = 0


class AddNote(BaseModel):
    text: str = Field(min_length=1, max_length=300)


def inbound(ctx: Context, request: object) -> None:
    return None


def tidy(ctx: Context, wake: WorkerWake) -> None:
    return None


def nightly(ctx: Context, run: JobRun) -> None:
    return None


def pinned(*more_grants: str) -> Extension:
    """An extension with every kind of declaration but workers and jobs."""
    ext = Extension(
        id="pinned",
        version="1.2.3",
        grants={"state", "commands", "projection", "timers", "lifecycle", "routes", *more_grants},
        collections={
            "note": Collection(Note, key=lambda n: n.id, index=lambda n: n.conversation_id)
        },
        documents={"pad": Document(Pad)},
        projection_schema=Board,
        routes=[Route("POST", "inbound", inbound, auth="public")],
        interaction_kinds=("approval",),
    )
    ext.command("add", input=AddNote, output=Board)(lambda ctx, cid, data: Board())
    return ext


# `revision_of(pinned().contract())` computed before workers and jobs joined the contract
PINNED_REVISION = "aa008a028ee4e132dc3f6b6586ea2cfd10f5eb0dabc208de486c397220c0c5e4"


def revision(ext: Extension) -> str:
    return revision_of(ext.contract())


# --- projection -------------------------------------------------------------------------------


def test_a_projection_grant_without_a_projection_schema_is_refused_at_definition():
    with pytest.raises(DefinitionError) as refused:
        Extension(id="blind", version="1", grants={"projection"})

    assert str(refused.value) == (
        "Extension blind: a projection needs projection_schema=<the pydantic model project returns>"
    )


def test_a_project_hook_without_a_projection_schema_is_refused_at_definition():
    ext = Extension(id="blind", version="1", grants={"commands"})

    with pytest.raises(DefinitionError, match="needs projection_schema="):
        ext.project(lambda ctx, conversation_id: None)

    assert "project" not in ext.hooks.single


def test_a_projection_grant_with_its_schema_takes_a_project_hook():
    ext = Extension(id="seen", version="1", grants={"projection"}, projection_schema=Board)

    ext.project(lambda ctx, conversation_id: Board())

    assert "project" in ext.hooks.single


# --- workers and jobs in the revision ---------------------------------------------------------


def test_an_extension_without_workers_or_jobs_keeps_the_revision_it_had_before():
    ext = pinned()

    assert not {"workers", "jobs"} & set(ext.contract())
    assert revision(ext) == PINNED_REVISION


def test_adding_a_worker_or_a_job_is_a_new_revision():
    with_worker, with_job = pinned(), pinned()

    add_worker(with_worker, Worker("tidy", wake_on=["conversation_idle"], run=tidy))
    add_job(with_job, Job("nightly", schedule="0 3 * * *", action=nightly))

    assert len({PINNED_REVISION, revision(with_worker), revision(with_job)}) == 3
    assert with_worker.contract()["workers"] == {"tidy": {"wake_on": ["conversation_idle"]}}


def test_what_a_worker_wakes_on_is_part_of_the_revision():
    idle, created = pinned(), pinned()

    add_worker(idle, Worker("tidy", wake_on=["conversation_idle"], run=tidy))
    add_worker(created, Worker("tidy", wake_on=["conversation_created"], run=tidy))

    assert revision(idle) != revision(created)


@pytest.mark.parametrize(
    ("changed", "new_revision"),
    [
        ({"schedule": "0 4 * * *"}, True),
        ({"schedule": None, "every_seconds": 3600}, True),
        ({"overlap": "buffer_one"}, True),
        ({"catch_up": "once"}, True),
        ({"action": PromptAction("inbox", "Anything new?")}, True),
        ({"deadline_s": 60}, False),  # like a route's deadline: staff may override it
        ({"description": "the nightly tidy"}, False),
    ],
)
def test_a_changed_job_is_a_new_revision_unless_only_its_deadline_or_description_changed(
    changed: dict[str, object], new_revision: bool
):
    job = {"name": "nightly", "schedule": "0 3 * * *", "action": nightly}
    before, after = pinned("send"), pinned("send")

    add_job(before, Job(**job))  # type: ignore[arg-type]
    add_job(after, Job(**(job | changed)))  # type: ignore[arg-type]

    assert (revision(before) != revision(after)) is new_revision


def test_a_prompt_jobs_text_is_part_of_the_revision():
    ask, tell = (
        Extension(
            id="news",
            version="1",
            grants={"timers", "send"},
            jobs=[Job("morning", every_seconds=3600, action=PromptAction("inbox", text))],
        )
        for text in ("Anything new?", "Summarise the news.")
    )

    assert revision(ask) != revision(tell)


def test_workers_and_jobs_given_to_the_extension_are_attached_as_add_worker_and_add_job_do():
    worker = Worker("tidy", wake_on=["conversation_idle"], run=tidy)
    job = Job("nightly", schedule="0 3 * * *", action=nightly)
    declared = Extension(
        id="curator", version="1", grants={"lifecycle", "timers"}, workers=[worker], jobs=[job]
    )
    attached = Extension(id="curator", version="1", grants={"lifecycle", "timers"})
    add_worker(attached, worker)
    add_job(attached, job)

    assert (declared.workers, declared.jobs) == ((worker,), (job,))
    assert declared.contract() == attached.contract()


def test_a_worker_given_to_the_extension_needs_its_grant_as_add_worker_does():
    with pytest.raises(DefinitionError, match="worker tidy but does not request the lifecycle"):
        Extension(
            id="curator",
            version="1",
            workers=[Worker("tidy", wake_on=["conversation_idle"], run=tidy)],
        )
